package ferryprom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
)

var _ ferry.HookLog = (*Metrics)(nil)

// logMetrics are the log relay's (ferry.RelayConfig.Feed): what it read,
// whether it reads, and the log its database retains for it.
type logMetrics struct {
	reading, retained, lastEvent                       *prometheus.GaugeVec
	events, checkpoints, takeovers, gaps, streamErrors *prometheus.CounterVec

	mu   sync.Mutex
	last map[string]ferry.LogStats // by table: the counts already added
}

func newLogMetrics(constLabels prometheus.Labels) *logMetrics {
	table := []string{"table"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels}, table)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: constLabels}, table)
	}
	return &logMetrics{last: map[string]ferry.LogStats{},
		reading: gauge("ferry_log_reading",
			"1 while this relay holds the table's log lease and streams the database's log; 0 for a standby or a stream down."),
		retained: gauge("ferry_log_retained_bytes",
			"Bytes of log the database retains for the table's log relay (PostgreSQL: the WAL its slot holds), as last measured; -1 unknown."),
		lastEvent: gauge("ferry_log_last_event_timestamp_seconds",
			"When the last transaction read from the log committed (database clock), in Unix seconds."),
		events: counter("ferry_log_events_total",
			"Events the log relay read from the database's log."),
		checkpoints: counter("ferry_log_checkpoints_total",
			"Checkpoints the log relay saved in <table>_lease."),
		takeovers: counter("ferry_log_takeovers_total",
			"Times this relay took the table's log lease."),
		gaps: counter("ferry_log_gaps_total",
			"Times the log no longer held the checkpoint (binlog purged, slot invalidated or dropped): the relay fell back to the table."),
		streamErrors: counter("ferry_log_stream_errors_total",
			"Streams of the log that ended on an error; the relay polls the table meanwhile."),
	}
}

// OnLog implements ferry.HookLog.
func (m *Metrics) OnLog(table string, st ferry.LogStats) {
	l := m.log
	reading := 0.0
	if st.Reading {
		reading = 1
	}
	l.reading.WithLabelValues(table).Set(reading)
	l.retained.WithLabelValues(table).Set(float64(st.RetainedBytes))
	if !st.LastEvent.IsZero() {
		l.lastEvent.WithLabelValues(table).Set(float64(st.LastEvent.UnixNano()) / 1e9)
	}
	l.mu.Lock()
	prev := l.last[table]
	l.last[table] = st
	l.mu.Unlock()
	add := func(c *prometheus.CounterVec, now, before int64) {
		if now > before {
			c.WithLabelValues(table).Add(float64(now - before))
		}
	}
	add(l.events, st.Events, prev.Events)
	add(l.checkpoints, st.Checkpoints, prev.Checkpoints)
	add(l.takeovers, st.Takeovers, prev.Takeovers)
	add(l.gaps, st.Gaps, prev.Gaps)
	add(l.streamErrors, st.StreamErrors, prev.StreamErrors)
}
