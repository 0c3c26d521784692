package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
	"github.com/ferrydev/ferry/internal/runner"
	"github.com/ferrydev/ferry/internal/token"
)

// Relay moves events from an outbox table to a broker. Several relays,
// in one process or many, may serve the same table: claims use row leases
// and never hand one event to two relays at once.
//
// The relay's promise is at-least-once: an event is marked SENT only after
// the broker confirmed it, and an event whose outcome is unknown is
// published again with the same id. A relay that loses its lease while
// publishing may still publish; its late mark then changes nothing.
//
// A broker outage spends no event's attempts. While the publisher reports
// its connection down (ferrybroker.Connectivity: ferryamqp and ferrynats
// do, RabbitMQ's blocked connections included) the relay claims nothing
// and makes no probe; it looks again every PollInterval and claims within
// one of the broker's return. Results that never left the process
// (ferrytype.ErrNotSent) give their events back to NEW with the claim's
// attempt taken back (Store.Release); with a publisher that cannot report
// its connection, such results pause claiming for a backoff that grows
// from PollInterval to a second. An outage is logged once as it starts,
// with its cause, and once as it ends, with its length, the publishes
// held back and the events pending. Unknown outcomes of messages that
// were written stay attempts, as they must: the broker may have them.
//
// A Relay is a few parts that call one way: a claim source (the table's,
// or the log's for a log relay) wakes the lanes and says what they claim;
// the lanes claim and hand each batch to the pipeline, which publishes it
// and records the outcomes; the outage tracker gates the claims; the
// maintainer beats, leads the table's maintenance and sweeps.
type Relay struct {
	store ferrystore.Store
	pub   ferrybroker.Publisher
	cfg   RelayConfig
	log   *slog.Logger
	c     relayCounters
	hooks relayHooks
	run   runner.Runner

	state  laneState
	src    claimSource
	logSrc *logSource // nil for a polling relay
	lanes  *lanes
	maint  *maintainer
}

// describeArg names an argument's type for an error, saying when it is a
// nil: "nil", "nil *ferrynats.Publisher", "*ferrymysql.Store".
func describeArg(v any) string {
	switch {
	case v == nil:
		return "nil"
	case nilness.Nil(v):
		return fmt.Sprintf("nil %T", v)
	}
	return fmt.Sprintf("%T", v)
}

// brokerName is what a relay's heartbeat row says it publishes to when
// HeartbeatConfig.Broker does not say: the publisher's description when it
// has one (a fmt.Stringer: ferryamqp's, ferrynats' and ferrykafka's give
// the broker's address), without credentials, else its Go type.
func brokerName(pub ferrybroker.Publisher) string {
	if s, ok := pub.(fmt.Stringer); ok {
		if d := ferrytype.RedactURL(s.String()); d != "" {
			return d
		}
	}
	return fmt.Sprintf("%T", pub)
}

// NewRelay returns a relay from store to pub. Call Start to run it.
func NewRelay(store ferrystore.Store, pub ferrybroker.Publisher, cfg *RelayConfig) (*Relay, error) {
	if nilness.Nil(store) || nilness.Nil(pub) {
		return nil, fmt.Errorf("%w: NewRelay needs a store and a publisher, got %s and %s", ErrInvalidConfig,
			describeArg(store), describeArg(pub))
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hooks, err := collectRelayHooks(store.Table(), c.Hooks)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	if c.ID == "" {
		c.ID = fmt.Sprintf("%s-%d-%s", token.Truncate(host, 100), os.Getpid(), token.New()[:8])
	}
	if c.Heartbeat.Broker == "" {
		c.Heartbeat.Broker = brokerName(pub)
	}
	log := c.Logger.With("table", store.Table())
	r := &Relay{store: store, pub: pub, cfg: c, log: log, hooks: hooks}
	r.state.allowed.Store(int64(c.Lanes))
	r.state.changed = make(chan struct{})
	r.state.claimed = &r.c.claimed
	// The prefix of this relay's claim tokens, in its heartbeat row: the
	// maintainer of the table returns its claims at once if it dies.
	claims := token.New()[:16]
	wake := newWaker(c.Lanes)
	out := newOutage(pub, store, c.PollInterval, log, &r.c.outages)
	table := &tableSource{store: store, cfg: &r.cfg, wake: wake, state: &r.state, outage: out, log: log}
	r.src = table
	if c.Log.Feed != nil {
		r.logSrc = newLogSource(table, store, c.ID, &r.cfg, log, &r.hooks)
		r.src = r.logSrc
	}
	pipe := &pipeline{store: store, pub: pub, retry: c.Retry, timeout: c.PublishTimeout, log: log, hooks: &r.hooks, c: &r.c}
	r.lanes = &lanes{cfg: &r.cfg, store: store, src: r.src, pipe: pipe, outage: out, wake: wake, state: &r.state,
		log: log, hooks: &r.hooks, c: &r.c, claims: claims}
	r.maint = &maintainer{store: store, cfg: &r.cfg, log: log, hooks: &r.hooks, c: &r.c, state: &r.state, outage: out,
		source: r.src.kind(), host: host, claims: claims, returned: map[string]bool{},
		lease: &lease{store: store, name: ferrystore.LeaseMaintenance, owner: c.ID, ttl: maintenanceLease(c.Heartbeat.Interval)}}
	if c.Heartbeat.Interval > 0 {
		r.maint.registry = store
		if r.src.kind() == ferrystore.RelaySourceTable {
			// One lane until the heartbeat rows tell the relay its share
			// (maintainer.share).
			r.state.allowed.Store(1)
		}
	}
	return r, nil
}

// Leading reports whether the relay leads its table's maintenance now: the
// sweep of expired leases, the return of the claims of relays that stopped
// beating and the pruning of their heartbeat rows. Of the relays of a
// table that record heartbeats, the one that holds the table's maintenance
// lease (ferrystore.LeaseMaintenance) leads, so N relays sweep as often as
// one does. The lease lasts three heartbeat intervals and its holder
// renews it at each beat: when it stops, it gives the lease up and another
// relay takes it at its next beat; when it dies, another takes it once the
// lease ended. The log reader's lease (ferrystore.LeaseLog) works the same
// way: one mechanism for both. (The lease lasts at least a second,
// however short the interval.) A relay that records no heartbeat
// (Heartbeat.Interval negative) always leads, and so does a relay whose
// request for the lease failed: maintenance is safe to run twice, and not
// running it is not. Retention is not elected: every relay with a
// Retention purges.
//
// A --drain run's progress line counts the table only in the leading
// relay.
func (r *Relay) Leading() bool { return r.maint.leading.Load() }

// ID returns the relay's id in the heartbeat table (RelayConfig.ID).
func (r *Relay) ID() string { return r.cfg.ID }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats { return r.c.stats() }

// LogStats returns what the relay's log feed did; the zero LogStats for a
// polling relay.
func (r *Relay) LogStats() LogStats {
	if r.logSrc == nil {
		return LogStats{}
	}
	return r.logSrc.Stats()
}

// Start starts the relay's claim source, lanes and maintainer and returns.
// ctx bounds nothing but the start itself (a log relay's check of its
// database); its values, a fault-injection function among them (see
// ferryfault), reach every part. Stop the relay with Stop.
func (r *Relay) Start(ctx context.Context) error {
	err := r.run.Start(ctx, func(ctx context.Context) error {
		if err := r.src.start(ctx, &r.run); err != nil {
			return err
		}
		r.lanes.start(&r.run)
		r.maint.start(&r.run)
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferry: relay %w", err)
	}
	if err != nil {
		return err
	}
	r.log.Info("relay started", "relay_id", r.cfg.ID, "batch_size", r.cfg.BatchSize, "lanes", r.cfg.Lanes,
		"ordered", r.cfg.Ordered)
	return nil
}

// Stop stops claiming, lets in-flight batches finish publishing and record
// their outcomes, and returns. If ctx ends first, in-flight publishes are
// cancelled (their outcomes become unknown, and their leases expire) and
// Stop returns ctx's error. Stopping twice is safe.
func (r *Relay) Stop(ctx context.Context) error {
	first, err := r.run.Stop(ctx, nil)
	if !first {
		return nil
	}
	<-r.run.Done()
	r.maint.stop(r.run.Context())
	st := r.Stats()
	attrs := []any{"confirmed", st.Confirmed, "retried", st.Retried, "dead", st.Dead, "fenced", st.Fenced}
	if r.logSrc != nil {
		ls := r.LogStats()
		attrs = append(attrs, "log_events", ls.Events, "log_missed", ls.Missed, "log_given_up", ls.GivenUp,
			"log_gaps", ls.Gaps, "log_stream_errors", ls.StreamErrors, "log_takeovers", ls.Takeovers)
	}
	r.log.Info("relay stopped", attrs...)
	return err
}

// Run starts the relay and runs it until ctx ends, then stops it, giving
// in-flight batches up to the publish timeout to finish.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout+5*time.Second)
	defer cancel()
	return r.Stop(stopCtx)
}

// DrainResult describes the table when Drain returned.
type DrainResult struct {
	Stats ferrystore.Stats
}

// ErrDrainIncomplete is returned by Drain when its context ended while
// events were still NEW or SENDING.
var ErrDrainIncomplete = errors.New("ferry: drain incomplete: events still pending")

// Drain runs the relay until no event is NEW or SENDING (every event is
// SENT or DEAD), then stops it. Delayed events and events waiting for a
// retry are waited for; so are, in ordered mode, events held back by a DEAD
// event of their aggregate, which cannot progress: bound the wait with ctx.
// When ctx ends first, Drain stops the relay and returns an error wrapping
// ErrDrainIncomplete with what is left. It looks whether anything is left
// with Store.Pending, which reads one index entry, every 100ms in which
// the relay claimed nothing, and counts the table with Store.Stats once,
// at the end. It is meant for scripts, cron jobs and tests; a daemon uses
// Run.
func (r *Relay) Drain(ctx context.Context) (DrainResult, error) {
	if err := r.Start(ctx); err != nil {
		return DrainResult{}, err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var (
		res DrainResult
		err error
	)
	claimed := r.c.claimed.Load()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			// While this relay claims events the table is not drained: it
			// asks only once a tick passed without a claim. Pending reads
			// one index entry (after stepping over the entries of events
			// just claimed, which PostgreSQL keeps until vacuum); Stats
			// would count every pending row.
			if c := r.c.claimed.Load(); c != claimed {
				claimed = c
				continue
			}
			pending, perr := r.store.Pending(ctx)
			if perr != nil {
				r.log.Warn("drain: pending check failed", "error", perr)
				continue
			}
			done = !pending
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout+5*time.Second)
	defer cancel()
	if serr := r.Stop(stopCtx); serr != nil {
		err = serr
	}
	if st, serr := r.store.Stats(context.WithoutCancel(ctx)); serr == nil {
		res.Stats = st
	}
	if res.Stats.New > 0 || res.Stats.Sending > 0 {
		err = errors.Join(fmt.Errorf("%w: %d new, %d sending, %d dead", ErrDrainIncomplete,
			res.Stats.New, res.Stats.Sending, res.Stats.Dead), ctx.Err(), err)
	}
	return res, err
}
