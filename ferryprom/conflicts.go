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

// ConflictConfig configures a ConflictCollector. A nil config uses the
// defaults.
type ConflictConfig struct {
	// Interval is the time between two polls. Default 15s.
	Interval time.Duration
	// Timeout bounds one poll. Default 5s (at most Interval/2); must be
	// shorter than Interval.
	Timeout time.Duration
	// Consumers are reported at 0 when they have no open conflict, so that
	// their series exist before the first one. Others appear with their
	// first open conflict and disappear when none is left. Default none.
	Consumers []string
	// ConstLabels are added to every metric; give each collector its own
	// (say {"database": "points"}) when one registry gets several. Default
	// none.
	ConstLabels prometheus.Labels
	// Logger receives a warning when a poll fails. Default: slog.Default().
	Logger *slog.Logger
}

// ConflictCollector exports the open conflicts of one consumer database,
// read from its conflict table: the conflicts that wait for a person
// (ferry conflicts list). Unlike ferry_inbox_operations_total{outcome=
// "conflict"}, which counts them as they happen, the gauge stays up until
// each is resolved: alert on it.
//
//	ferry_inbox_open_conflicts{consumer}        gauge    open conflicts, as of the last poll
//	ferry_inbox_conflicts_up                    gauge    1 if the last poll succeeded (else the gauge above is absent)
//	ferry_inbox_conflicts_last_poll_timestamp_seconds  gauge    time of the last successful poll
//	ferry_inbox_conflicts_poll_errors_total     counter  failed polls
//
// Like OutboxCollector, it polls in the background (Start, Stop) and a
// scrape reads the last snapshot: one query (InboxStore.OpenConflicts) per
// Interval, whatever the number of scrapers.
type ConflictCollector struct {
	store ferrystore.InboxStore
	cfg   ConflictConfig

	open, up, lastPoll, pollErrs *prometheus.Desc

	mu     sync.Mutex
	ok     bool
	at     time.Time
	errors float64
	counts map[string]int64

	run    runner.Runner
	cancel context.CancelFunc // of a poll in progress, at Stop
}

// NewConflictCollector returns a collector of store's open conflicts and
// registers it with reg, which must not be nil. Call Start to begin
// polling, or Poll to refresh it on demand.
func NewConflictCollector(reg prometheus.Registerer, store ferrystore.InboxStore, cfg *ConflictConfig) (*ConflictCollector, error) {
	if nilness.Nil(reg) || nilness.Nil(store) {
		return nil, fmt.Errorf("%w: ferryprom.NewConflictCollector needs a Registerer and an inbox store", ferrytype.ErrInvalidConfig)
	}
	var c ConflictConfig
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
		return nil, fmt.Errorf("%w: ferryprom.ConflictConfig.Interval %s is below 10ms", ferrytype.ErrInvalidConfig, c.Interval)
	case c.Timeout <= 0 || c.Timeout >= c.Interval:
		return nil, fmt.Errorf("%w: ferryprom.ConflictConfig.Timeout %s must be positive and shorter than Interval %s",
			ferrytype.ErrInvalidConfig, c.Timeout, c.Interval)
	}
	k := &ConflictCollector{store: store, cfg: c,
		open: prometheus.NewDesc("ferry_inbox_open_conflicts",
			"Open inbox conflicts of a consumer (same business key, other fields), waiting for a person: ferry conflicts list.",
			[]string{"consumer"}, c.ConstLabels),
		up: prometheus.NewDesc("ferry_inbox_conflicts_up",
			"1 if the last poll of the conflict table succeeded, 0 if it failed (ferry_inbox_open_conflicts is then absent).",
			nil, c.ConstLabels),
		lastPoll: prometheus.NewDesc("ferry_inbox_conflicts_last_poll_timestamp_seconds",
			"Unix time of the last successful poll of the conflict table.", nil, c.ConstLabels),
		pollErrs: prometheus.NewDesc("ferry_inbox_conflicts_poll_errors_total",
			"Polls of the conflict table that failed.", nil, c.ConstLabels),
	}
	if err := reg.Register(k); err != nil {
		return nil, fmt.Errorf("ferryprom: %w", err)
	}
	return k, nil
}

// Describe implements prometheus.Collector.
func (k *ConflictCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{k.open, k.up, k.lastPoll, k.pollErrs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reports the last snapshot
// and never touches the database.
func (k *ConflictCollector) Collect(ch chan<- prometheus.Metric) {
	k.mu.Lock()
	ok, at, errs := k.ok, k.at, k.errors
	counts := make(map[string]int64, len(k.counts))
	for c, n := range k.counts {
		counts[c] = n
	}
	k.mu.Unlock()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(k.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(k.pollErrs, prometheus.CounterValue, errs)
	if !at.IsZero() {
		ch <- prometheus.MustNewConstMetric(k.lastPoll, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
	}
	if !ok {
		return
	}
	for _, c := range k.cfg.Consumers {
		if _, has := counts[c]; !has {
			counts[c] = 0
		}
	}
	for c, n := range counts {
		ch <- prometheus.MustNewConstMetric(k.open, prometheus.GaugeValue, float64(n), c)
	}
}

// Poll refreshes the snapshot now, within Timeout. Start calls it every
// Interval.
func (k *ConflictCollector) Poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	counts, err := k.store.OpenConflicts(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.ok = false
		k.errors++
		return fmt.Errorf("poll open conflicts: %w", err)
	}
	k.ok, k.at, k.counts = true, time.Now(), counts
	return nil
}

// Start polls at once and then every Interval, until Stop. ctx bounds
// nothing but the start.
func (k *ConflictCollector) Start(ctx context.Context) error {
	err := k.run.Start(ctx, func(ctx context.Context) error {
		ctx, k.cancel = context.WithCancel(ctx)
		k.run.Go(func() {
			poll := func() {
				if err := k.Poll(ctx); err != nil && ctx.Err() == nil {
					k.cfg.Logger.Warn("conflict metrics: poll failed; ferry_inbox_open_conflicts is absent until a poll succeeds",
						"error", err)
				}
			}
			poll()
			k.run.Every(k.cfg.Interval, poll)
		})
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferryprom: conflict collector %w", err)
	}
	return err
}

// Stop ends the polling, cancelling a poll in progress, and waits for it,
// or for ctx. Stopping twice, or a collector never started, is safe; a
// stopped collector does not start again (ferrytype.ErrClosed).
func (k *ConflictCollector) Stop(ctx context.Context) error {
	_, err := k.run.Stop(ctx, func() { k.cancel() })
	return err
}
