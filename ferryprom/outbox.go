package ferryprom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
	"github.com/ferrydev/ferry/internal/runner"
)

// OutboxConfig configures an OutboxCollector. A nil config uses the
// defaults.
type OutboxConfig struct {
	// Interval is the time between two polls of each table. Default 15s.
	Interval time.Duration
	// Timeout bounds one poll of one table. Default 5s; must be shorter
	// than Interval.
	Timeout time.Duration
	// Destinations, when positive, adds per-destination gauges for at most
	// this many destinations of each table (those with the oldest pending
	// events), at the cost of one more query per poll, which reads the
	// events next in line only (ferrystore.PendingWindow of each status);
	// see ferrystore.Admin.PendingByDestination. Stores that do not implement
	// ferrystore.Admin get none. Default 0: off. At most 1000.
	Destinations int
	// ConstLabels are added to every metric. Default none.
	ConstLabels prometheus.Labels
	// Logger receives a warning when a poll fails. Default: slog.Default().
	Logger *slog.Logger
}

// OutboxCollector exports the state of outbox tables, read from the
// database: counts by status and the age of the oldest pending event, the
// outbox's key service level indicator.
//
// A background loop polls each table's Store.Stats every Interval (Start,
// Stop) and Collect reports the last snapshot; a scrape never waits for
// the database. That bounds the database's cost to one query per table
// per Interval, however many scrapers there are and however often they
// scrape, and keeps /metrics answering when the database is slow or down,
// exactly when the other metrics matter. The price is staleness: a value
// is up to Interval old; ferry_outbox_last_poll_timestamp_seconds says how
// old. The age itself is measured by the database clock.
//
// The Stats query reads the index entries of NEW, SENDING and DEAD rows,
// and each pending row once for its created_at: its cost grows with the
// backlog, never with the retained SENT rows.
//
// When a table's last poll failed, its snapshot gauges are not reported
// (a stale age would look like a stalled one) and ferry_outbox_up is 0.
type OutboxCollector struct {
	stores []ferrystore.Store
	cfg    OutboxConfig
	log    *slog.Logger

	up, lastPoll, events, ready, oldest, pollErrs *prometheus.Desc
	destPending, destOldest                       *prometheus.Desc

	mu    sync.Mutex
	snaps []snapshot // by store index

	run    runner.Runner
	cancel context.CancelFunc // of a poll in progress, at Stop
}

type snapshot struct {
	ok     bool
	at     time.Time // last successful poll
	errors float64
	stats  ferrystore.Stats
	byDest []ferrystore.DestinationStats
}

// NewOutboxCollector returns a collector of stores' tables and registers
// it with reg, which must not be nil. Call Start to begin polling, or Poll
// to refresh it on demand.
func NewOutboxCollector(reg prometheus.Registerer, stores []ferrystore.Store, cfg *OutboxConfig) (*OutboxCollector, error) {
	if nilness.Nil(reg) {
		return nil, fmt.Errorf("%w: ferryprom.NewOutboxCollector: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	if len(stores) == 0 {
		return nil, fmt.Errorf("%w: ferryprom.NewOutboxCollector: no stores", ferrytype.ErrInvalidConfig)
	}
	for i, s := range stores {
		if nilness.Nil(s) {
			return nil, fmt.Errorf("%w: ferryprom.NewOutboxCollector: stores[%d] is nil", ferrytype.ErrInvalidConfig, i)
		}
	}
	var c OutboxConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval == 0 {
		c.Interval = 15 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = min(5*time.Second, c.Interval/2)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Interval < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: ferryprom.OutboxConfig.Interval %s is below 10ms", ferrytype.ErrInvalidConfig, c.Interval)
	case c.Timeout <= 0 || c.Timeout >= c.Interval:
		return nil, fmt.Errorf("%w: ferryprom.OutboxConfig.Timeout %s must be positive and shorter than Interval %s",
			ferrytype.ErrInvalidConfig, c.Timeout, c.Interval)
	case c.Destinations < 0 || c.Destinations > ferrystore.MaxListLimit:
		return nil, fmt.Errorf("%w: ferryprom.OutboxConfig.Destinations %d must be within 0..%d",
			ferrytype.ErrInvalidConfig, c.Destinations, ferrystore.MaxListLimit)
	}
	seen := map[string]bool{}
	for i, s := range stores {
		if s == nil {
			return nil, fmt.Errorf("%w: ferryprom.NewOutboxCollector: store %d is nil", ferrytype.ErrInvalidConfig, i)
		}
		if seen[s.Table()] {
			return nil, fmt.Errorf("%w: ferryprom.NewOutboxCollector: table %s given twice", ferrytype.ErrInvalidConfig, s.Table())
		}
		seen[s.Table()] = true
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"table"}, labels...), c.ConstLabels)
	}
	o := &OutboxCollector{
		stores: stores, cfg: c, log: c.Logger, snaps: make([]snapshot, len(stores)),
		up: desc("ferry_outbox_up",
			"1 if the last poll of the outbox table succeeded, 0 if it failed (the table's other gauges are then absent)."),
		lastPoll: desc("ferry_outbox_last_poll_timestamp_seconds",
			"Unix time of the last successful poll of the outbox table."),
		pollErrs: desc("ferry_outbox_poll_errors_total",
			"Polls of the outbox table that failed."),
		events: desc("ferry_outbox_events",
			"Outbox rows by status (new, sending, dead), as of the last poll.", "status"),
		ready: desc("ferry_outbox_ready_events",
			"NEW rows available now (not delayed, not waiting for a retry), as of the last poll."),
		oldest: desc("ferry_outbox_oldest_pending_age_seconds",
			"Age of the oldest NEW or SENDING event, by its created_at on the database clock; 0 when none is pending. "+
				"Behind more than ferrystore.PendingWindow (10000) events of a status, the oldest of those next in line."),
		destPending: desc("ferry_outbox_destination_pending_events",
			"NEW and SENDING rows of one destination (the event type when it has none), among the events next in line "+
				"(ferrystore.PendingWindow of each status).", "destination"),
		destOldest: desc("ferry_outbox_destination_oldest_pending_age_seconds",
			"Age of the oldest pending event of one destination.", "destination"),
	}
	if err := reg.Register(o); err != nil {
		return nil, fmt.Errorf("ferryprom: %w", err)
	}
	return o, nil
}

// Describe implements prometheus.Collector.
func (o *OutboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{o.up, o.lastPoll, o.pollErrs, o.events, o.ready, o.oldest, o.destPending, o.destOldest} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reports the last snapshot
// and never touches the database.
func (o *OutboxCollector) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	snaps := append([]snapshot(nil), o.snaps...)
	o.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i, s := range o.stores {
		t, sn := s.Table(), snaps[i]
		up := 0.0
		if sn.ok {
			up = 1
		}
		gauge(o.up, up, t)
		ch <- prometheus.MustNewConstMetric(o.pollErrs, prometheus.CounterValue, sn.errors, t)
		if !sn.at.IsZero() {
			gauge(o.lastPoll, float64(sn.at.UnixNano())/1e9, t)
		}
		if !sn.ok {
			continue
		}
		gauge(o.events, float64(sn.stats.New), t, "new")
		gauge(o.events, float64(sn.stats.Sending), t, "sending")
		gauge(o.events, float64(sn.stats.Dead), t, "dead")
		gauge(o.ready, float64(sn.stats.Ready), t)
		gauge(o.oldest, sn.stats.OldestPending.Seconds(), t)
		for _, d := range sn.byDest {
			gauge(o.destPending, float64(d.New+d.Sending), t, d.Destination)
			gauge(o.destOldest, d.OldestPending.Seconds(), t, d.Destination)
		}
	}
}

// Poll refreshes the snapshot of every table now, each within Timeout, and
// returns the failures joined. Start calls it every Interval.
func (o *OutboxCollector) Poll(ctx context.Context) error {
	var errs []error
	for i, s := range o.stores {
		if err := o.pollOne(ctx, i, s); err != nil {
			errs = append(errs, fmt.Errorf("poll outbox %s: %w", s.Table(), err))
		}
	}
	return errors.Join(errs...)
}

func (o *OutboxCollector) pollOne(ctx context.Context, i int, s ferrystore.Store) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	st, err := s.Stats(ctx)
	var byDest []ferrystore.DestinationStats
	if a, ok := s.(ferrystore.Admin); ok && err == nil && o.cfg.Destinations > 0 {
		byDest, err = a.PendingByDestination(ctx, o.cfg.Destinations)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	sn := &o.snaps[i]
	if err != nil {
		sn.ok = false
		sn.errors++
		return err
	}
	sn.ok, sn.at, sn.stats, sn.byDest = true, time.Now(), st, byDest
	return nil
}

// Start polls every table at once and then every Interval, until Stop.
// ctx bounds nothing but the start.
func (o *OutboxCollector) Start(ctx context.Context) error {
	err := o.run.Start(ctx, func(ctx context.Context) error {
		ctx, o.cancel = context.WithCancel(ctx)
		o.run.Go(func() {
			poll := func() {
				if err := o.Poll(ctx); err != nil && ctx.Err() == nil {
					o.log.Warn("outbox metrics: poll failed; the table's gauges are absent until a poll succeeds",
						"error", err)
				}
			}
			poll()
			o.run.Every(o.cfg.Interval, poll)
		})
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferryprom: outbox collector %w", err)
	}
	return err
}

// Stop ends the polling, cancelling a poll in progress, and waits for it,
// or for ctx. Stopping twice, or a collector never started, is safe; a
// stopped collector does not start again (ferrytype.ErrClosed).
func (o *OutboxCollector) Stop(ctx context.Context) error {
	_, err := o.run.Stop(ctx, func() { o.cancel() })
	return err
}
