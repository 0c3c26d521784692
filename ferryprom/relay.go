package ferryprom

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
)

// Default histogram buckets, in seconds or attempts.
var (
	// commit→confirm: a healthy relay's milliseconds to an outage's hour.
	defaultLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// one claim statement, or one batch's publish (bounded by the publish
	// timeout).
	defaultDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	defaultAttemptBuckets  = []float64{1, 2, 3, 5, 10, 20, 50}
)

// Config configures Metrics. A nil config uses the defaults.
type Config struct {
	// ConstLabels are added to every metric, e.g. {"service": "orders"}.
	// Default none.
	ConstLabels prometheus.Labels
	// LatencyBuckets are the buckets of
	// ferry_relay_commit_to_confirm_seconds. Default: 1ms to 1h (.001,
	// .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300,
	// 900, 3600).
	LatencyBuckets []float64
	// DurationBuckets are the buckets of ferry_relay_claim_duration_seconds
	// and ferry_relay_publish_batch_duration_seconds. Default: 0.5ms to 10s
	// (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10).
	DurationBuckets []float64
	// AttemptBuckets are the buckets of ferry_relay_confirm_attempts.
	// Default 1, 2, 3, 5, 10, 20, 50.
	AttemptBuckets []float64
}

// Metrics counts what relays do. It implements the relay hooks of package
// ferry (HookClaim, HookPublish, HookFenced, HookSweep, HookSettle,
// HookRelease): pass
// it in ferry.RelayConfig.Hooks. One Metrics may serve any number of
// relays, in the same process, on any tables; the table is a label.
//
// Every hook does a few atomic additions and histogram observations per
// event and takes no lock once a table was seen.
type Metrics struct {
	claims, claimed, duplicates, sent, retried, dead, expired, fenced *prometheus.CounterVec
	released                                                          *prometheus.CounterVec
	outcomes                                                          *prometheus.CounterVec
	claimDuration, publishDuration, latency, attempts                 *prometheus.HistogramVec

	tables sync.Map // table name -> *tableMetrics
}

var (
	_ ferry.HookClaim   = (*Metrics)(nil)
	_ ferry.HookPublish = (*Metrics)(nil)
	_ ferry.HookFenced  = (*Metrics)(nil)
	_ ferry.HookSweep   = (*Metrics)(nil)
	_ ferry.HookSettle  = (*Metrics)(nil)
	_ ferry.HookRelease = (*Metrics)(nil)
)

// outcomes in the order of ferrytype.Outcome.
var outcomeNames = [...]string{
	ferrytype.OutcomeUnknown:   "unknown",
	ferrytype.OutcomeConfirmed: "confirmed",
	ferrytype.OutcomeReturned:  "returned",
	ferrytype.OutcomeRejected:  "rejected",
}

// New creates the relay metrics and registers them with reg, which must
// not be nil: ferryprom never uses the global registry.
func New(reg prometheus.Registerer, cfg *Config) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: ferryprom.New: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.LatencyBuckets == nil {
		c.LatencyBuckets = defaultLatencyBuckets
	}
	if c.DurationBuckets == nil {
		c.DurationBuckets = defaultDurationBuckets
	}
	if c.AttemptBuckets == nil {
		c.AttemptBuckets = defaultAttemptBuckets
	}
	for name, b := range map[string][]float64{"LatencyBuckets": c.LatencyBuckets, "DurationBuckets": c.DurationBuckets,
		"AttemptBuckets": c.AttemptBuckets} {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: ferryprom.Config.%s is empty", ferrytype.ErrInvalidConfig, name)
		}
	}
	table := []string{"table"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: c.ConstLabels},
			append(table, labels...))
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets,
			ConstLabels: c.ConstLabels}, table)
	}
	m := &Metrics{
		claims: counter("ferry_relay_claims_total",
			"Claim statements that returned events."),
		claimed: counter("ferry_relay_claimed_events_total",
			"Events claimed (leased to a relay for one publish attempt)."),
		outcomes: counter("ferry_relay_publish_outcomes_total",
			"Publish attempts by the broker's outcome: confirmed, returned (unroutable), rejected, unknown (not counting publishes that never left the relay).", "outcome"),
		duplicates: counter("ferry_relay_publish_duplicates_total",
			"Confirmed publishes the broker reported as duplicates of a message it already had."),
		sent: counter("ferry_relay_sent_total",
			"Events marked SENT."),
		retried: counter("ferry_relay_retries_total",
			"Events put back to NEW for another attempt, after a failed attempt or an expired lease."),
		dead: counter("ferry_relay_dead_total",
			"Events moved to DEAD: retries exhausted; they wait for a person (ferry dead)."),
		expired: counter("ferry_relay_lease_expiries_total",
			"Leases that expired before their relay recorded an outcome, returned by the sweeper."),
		fenced: counter("ferry_relay_fenced_total",
			"Outcome marks that changed nothing because the lease had passed to another owner."),
		released: counter("ferry_relay_released_total",
			"Events whose publish never left the relay (broker unreachable) given back to NEW without spending an attempt."),
		claimDuration: histogram("ferry_relay_claim_duration_seconds",
			"Duration of claim transactions that returned events.", c.DurationBuckets),
		publishDuration: histogram("ferry_relay_publish_batch_duration_seconds",
			"Duration of one batch's publish, until every message had an outcome.", c.DurationBuckets),
		latency: histogram("ferry_relay_commit_to_confirm_seconds",
			"Time from an event's created_at (database clock) to the broker's confirm (relay clock).", c.LatencyBuckets),
		attempts: histogram("ferry_relay_confirm_attempts",
			"Attempts an event needed until the broker confirmed it (1: the first).", c.AttemptBuckets),
	}
	for _, col := range []prometheus.Collector{m.claims, m.claimed, m.outcomes, m.duplicates, m.sent, m.retried, m.dead,
		m.expired, m.fenced, m.released, m.claimDuration, m.publishDuration, m.latency, m.attempts} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("ferryprom: %w (one Metrics serves every relay of a process: create it once)", err)
			}
			return nil, fmt.Errorf("ferryprom: %w", err)
		}
	}
	return m, nil
}

// tableMetrics holds one table's children, resolved once.
type tableMetrics struct {
	claims, claimed, duplicates, sent, retried, dead, expired, fenced prometheus.Counter
	released                                                          prometheus.Counter
	outcomes                                                          [len(outcomeNames)]prometheus.Counter
	claimDuration, publishDuration, latency, attempts                 prometheus.Observer
}

// Table initialises the series of table, so that they exist at zero before
// the first event (a rate over a series that appears late misses its first
// increase). The hooks call it on their own; calling it up front is
// optional.
func (m *Metrics) Table(table string) {
	m.table(table)
}

func (m *Metrics) table(name string) *tableMetrics {
	if t, ok := m.tables.Load(name); ok {
		return t.(*tableMetrics)
	}
	t := &tableMetrics{
		claims: m.claims.WithLabelValues(name), claimed: m.claimed.WithLabelValues(name),
		duplicates: m.duplicates.WithLabelValues(name), sent: m.sent.WithLabelValues(name),
		retried: m.retried.WithLabelValues(name), dead: m.dead.WithLabelValues(name),
		expired: m.expired.WithLabelValues(name), fenced: m.fenced.WithLabelValues(name),
		released:      m.released.WithLabelValues(name),
		claimDuration: m.claimDuration.WithLabelValues(name), publishDuration: m.publishDuration.WithLabelValues(name),
		latency: m.latency.WithLabelValues(name), attempts: m.attempts.WithLabelValues(name),
	}
	for i, o := range outcomeNames {
		t.outcomes[i] = m.outcomes.WithLabelValues(name, o)
	}
	actual, _ := m.tables.LoadOrStore(name, t)
	return actual.(*tableMetrics)
}

// OnClaim implements ferry.HookClaim.
func (m *Metrics) OnClaim(table string, events int, took time.Duration) {
	t := m.table(table)
	t.claims.Inc()
	t.claimed.Add(float64(events))
	t.claimDuration.Observe(took.Seconds())
}

// OnPublish implements ferry.HookPublish. The commit→confirm latency of a
// confirmed message runs from its created_at, stamped by the database
// clock when the enqueuing transaction wrote it, to now on the relay's
// clock: a skew between the two clocks shifts it. It includes any delay
// the event was enqueued with and the time spent in earlier attempts.
func (m *Metrics) OnPublish(table string, msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration) {
	t := m.table(table)
	t.publishDuration.Observe(took.Seconds())
	now := time.Now()
	for i := range results {
		if results[i].NotSent() {
			continue // never reached the broker: counted when released
		}
		o := results[i].Outcome
		if int(o) < 0 || int(o) >= len(t.outcomes) {
			o = ferrytype.OutcomeUnknown
		}
		t.outcomes[o].Inc()
		if o != ferrytype.OutcomeConfirmed {
			continue
		}
		if results[i].Duplicate {
			t.duplicates.Inc()
		}
		if i < len(msgs) {
			t.attempts.Observe(float64(msgs[i].Attempt))
			if !msgs[i].CreatedAt.IsZero() {
				t.latency.Observe(max(now.Sub(msgs[i].CreatedAt).Seconds(), 0))
			}
		}
	}
}

// OnFenced implements ferry.HookFenced.
func (m *Metrics) OnFenced(table string, events int64) {
	m.table(table).fenced.Add(float64(events))
}

// OnSweep implements ferry.HookSweep.
func (m *Metrics) OnSweep(table string, events int64) {
	m.table(table).expired.Add(float64(events))
}

// OnSettle implements ferry.HookSettle.
func (m *Metrics) OnSettle(table string, sent, retried, dead int64) {
	t := m.table(table)
	t.sent.Add(float64(sent))
	t.retried.Add(float64(retried))
	t.dead.Add(float64(dead))
}

// OnRelease implements ferry.HookRelease.
func (m *Metrics) OnRelease(table string, events int64) {
	m.table(table).released.Add(float64(events))
}
