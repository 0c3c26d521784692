package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/buildinfo"
	"github.com/ferrydev/ferry/internal/nilness"
	"github.com/ferrydev/ferry/internal/token"
)

// RelayConfig configures a Relay. A nil config uses the defaults; zero
// fields take the default named in their comment.
type RelayConfig struct {
	// Throughput.

	// BatchSize is the most events one claim takes. Default 100.
	BatchSize int
	// Lanes is the number of claim→publish→mark loops run concurrently,
	// so that one batch is claimed while another waits for confirms.
	// Default 2. A lane that claimed events claims again at once when it
	// is done with them, and a full batch brings another lane in; an idle
	// relay makes one probe per interval (see PollInterval), not one per
	// lane.
	Lanes int
	// Ordered publishes an aggregate's events one at a time, in sequence
	// order: event N+1 is claimed only after event N was confirmed (SENT),
	// whichever relay handles either. A DEAD event holds back every later
	// event of its aggregate until it is retried or discarded. Default
	// false: maximum throughput, no order between concurrent batches.
	Ordered bool

	// Polling and wake-ups: how soon a committed event is claimed, and what an idle relay costs.

	// MinPollInterval is the probe interval right after the relay found
	// events: once its lanes run out of work, the relay asks the store
	// (Store.Ready, one read of the pending index) this often whether
	// events are ready, and wakes a lane when they are. Each probe that
	// finds nothing lengthens the interval by a quarter, up to
	// PollInterval; a claim that finds events brings it back to
	// MinPollInterval. Default 1ms.
	MinPollInterval time.Duration
	// PollInterval is the longest an idle relay waits between two probes:
	// an idle relay makes about one query per PollInterval (plus a sweep
	// per SweepInterval), and notices an event enqueued after a long idle
	// time within PollInterval. Default 80ms: about 13 queries a second
	// when idle.
	PollInterval time.Duration
	// Wakeup, shared with the Outbox of the same process, wakes the relay
	// right after events are enqueued.
	Wakeup *Wakeup
	// DisableListen stops the relay from using the store's own
	// notifications (PostgreSQL LISTEN/NOTIFY). Default false.
	DisableListen bool

	// The log relay: events read from the database's log of changes.

	// Feed, when set, makes this a log relay: it learns which events
	// became NEW from the database's log (ferrybinlog for MariaDB/MySQL's
	// binlog, ferrypgoutput for PostgreSQL's logical replication) and
	// claims them by id as their transaction commits, instead of probing
	// the table every PollInterval. One relay of the table reads the log
	// at a time, holding the lease ferrystore.LeaseLog in <table>_lease
	// (outbox migration 0006_lease) with its checkpoint; the others stand
	// by and take over when the lease ends. Claims, leases, retries, DEAD
	// events and ordered mode are those of the polling relay, in the same
	// table, so log relays and polling relays may serve one table
	// together; what the log cannot tell (a retry whose delay ended, an
	// ordered event held back behind its predecessor, a gap in the log)
	// is claimed from the table. Start runs the feed's Check and fails
	// with an error wrapping ferrystore.ErrLogSetup when the database is
	// not set up for it.
	Feed ferrystore.LogFeed
	// LogLease is how long the log reader's lease lasts without renewal:
	// a standby takes over at most this long after the reader died.
	// Default DefaultLogLease (15s).
	LogLease time.Duration
	// LogPollInterval is how often a log relay that is reading the log
	// still probes the table (Store.Ready), for retries recorded by other
	// relays whose delay ended and for events a person made available;
	// and how often a standby does (it claims what it finds: the events
	// of a reader that died, until its lease ends). Default
	// DefaultLogPollInterval (5s); a relay whose stream is down probes
	// every PollInterval like a polling relay.
	LogPollInterval time.Duration
	// LogCheckpointInterval is how often the checkpoint is saved while
	// the table's events are handled. Default 200ms. The lease is renewed
	// every LogLease/3 either way, and the checkpoint saved with it: a log
	// that moves only by other writes (other tables, the relays' own
	// heartbeats) is saved that often, not every LogCheckpointInterval.
	LogCheckpointInterval time.Duration

	// Leases and retries.

	// Lease is how long a claim holds its events; a relay that has not
	// recorded an outcome by then loses them to the sweeper. Default 30s.
	Lease time.Duration
	// PublishTimeout bounds one batch's publish, confirms included; it
	// must be shorter than Lease. Default 10s.
	PublishTimeout time.Duration
	// Retry decides the delay and the end of failed events. Default
	// ExponentialBackoff{}.
	Retry RetryPolicy
	// SweepInterval is how often the relay returns expired leases to NEW
	// (or DEAD past the retry limit). Default 5s; negative disables.
	SweepInterval time.Duration
	// SweepBatch bounds one sweep statement. Default 500.
	SweepBatch int

	// Maintenance of the table: retention of SENT events.

	// Retention deletes SENT events older than this. Default 0: keep them.
	Retention time.Duration
	// PurgeInterval is how often retention runs. Default 1m.
	PurgeInterval time.Duration
	// PurgeBatch bounds one purge statement, so that no purge holds many
	// row locks for long. Default 1000.
	PurgeBatch int

	// Heartbeat: the relay's row in the table of relays alive.

	// Heartbeat is how often the relay records itself in the heartbeat
	// table of its outbox table (<table>_relay, outbox migration
	// 0003_relay; see ferrystore.RelayRegistry), so that ferry status and
	// consoles can tell which relays are alive now: its ID, host, pid,
	// Version, Broker, Lanes, Ordered, the events it holds in flight and
	// whether its broker is connected, with the last beat stamped by the
	// database clock. It beats as it starts, then every Heartbeat, and
	// deletes its row on Stop; a relay that was killed leaves its row,
	// which then ages. A beat is one statement on one row of that table
	// and touches no event. A failed beat is logged (the first, then once a
	// minute while they go on), counted (RelayStats.HeartbeatErrors,
	// HookHeartbeat), and changes nothing else: the relay goes on
	// relaying. Default DefaultHeartbeat; negative disables. A relay whose
	// store does not implement ferrystore.RelayRegistry does not beat.
	Heartbeat time.Duration
	// ID names the relay in the heartbeat table: at most
	// ferrystore.MaxRelayIDLen bytes, unique among the relays of the
	// table. Default host-pid-random (8 hex digits).
	ID string
	// Version is the relay's version, shown in the heartbeat table.
	// Default: the version of the ferry module in the binary's build
	// information.
	Version string
	// Broker says what the relay publishes to, for the heartbeat table: a
	// broker URL (its credentials are removed before it is stored) or a
	// name. Default: the publisher's Go type (*ferrynats.Publisher, ...).
	Broker string
	// ForgetAfter is how long the heartbeat row of a relay that stopped
	// beating without a clean Stop (killed, its host lost) stays before a
	// relay of the same table deletes it. Each beating relay deletes such
	// rows at its first beat and then every ForgetAfter, at most once an
	// hour. It must be at least 3 Heartbeats, so that no live relay's row
	// is deleted. Default DefaultForgetAfter.
	ForgetAfter time.Duration

	// Observability.

	// Logger receives the relay's logs: its start and stop, broker
	// outages, every publish not confirmed (an error when the event went
	// DEAD). Default: slog.Default(), so that a misconfiguration is seen;
	// slog.New(slog.DiscardHandler) silences it.
	Logger *slog.Logger
	// Hooks observe the relay; see the Hook* interfaces.
	Hooks []Hook

	// Testing: fault injection, for tests of the crash windows only.

	// FaultPoint, when set, is called at each of the relay's fault points
	// (FaultAfterClaim, FaultAfterPublish, FaultLoseConfirm,
	// FaultBeforeForget); a non-nil error acts as a crash at that point.
	// For fault-injection tests; leave nil in production: no command-line
	// flag or environment variable of ferry's sets it.
	FaultPoint func(ctx context.Context, point string) error
}

// Defaults of the relay's heartbeat (RelayConfig.Heartbeat,
// RelayConfig.ForgetAfter).
const (
	DefaultHeartbeat   = 5 * time.Second
	DefaultForgetAfter = 24 * time.Hour
)

func (c *RelayConfig) withDefaults() (RelayConfig, error) {
	var out RelayConfig
	if c != nil {
		out = *c
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if out.BatchSize == 0 {
		out.BatchSize = 100
	}
	if out.Lanes == 0 {
		out.Lanes = 2
	}
	def(&out.PollInterval, 80*time.Millisecond)
	def(&out.MinPollInterval, time.Millisecond)
	out.MinPollInterval = min(out.MinPollInterval, out.PollInterval)
	def(&out.Lease, 30*time.Second)
	def(&out.PublishTimeout, 10*time.Second)
	def(&out.SweepInterval, 5*time.Second)
	def(&out.PurgeInterval, time.Minute)
	if out.SweepBatch == 0 {
		out.SweepBatch = 500
	}
	if out.PurgeBatch == 0 {
		out.PurgeBatch = 1000
	}
	def(&out.LogLease, DefaultLogLease)
	def(&out.LogPollInterval, DefaultLogPollInterval)
	def(&out.LogCheckpointInterval, 200*time.Millisecond)
	if nilness.Nil(out.Retry) {
		out.Retry = ExponentialBackoff{}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	def(&out.Heartbeat, DefaultHeartbeat)
	def(&out.ForgetAfter, DefaultForgetAfter)
	if out.Version == "" {
		out.Version = buildinfo.Read("").Version
	}
	switch {
	case out.BatchSize < 1 || out.BatchSize > 10000:
		return out, fmt.Errorf("%w: RelayConfig.BatchSize %d must be within 1..10000", ErrInvalidConfig, out.BatchSize)
	case out.Lanes < 1 || out.Lanes > 64:
		return out, fmt.Errorf("%w: RelayConfig.Lanes %d must be within 1..64", ErrInvalidConfig, out.Lanes)
	case out.PollInterval < time.Millisecond:
		return out, fmt.Errorf("%w: RelayConfig.PollInterval %s is below 1ms", ErrInvalidConfig, out.PollInterval)
	case out.MinPollInterval < 100*time.Microsecond:
		return out, fmt.Errorf("%w: RelayConfig.MinPollInterval %s is below 100µs", ErrInvalidConfig, out.MinPollInterval)
	case out.PublishTimeout <= 0 || out.Lease <= 0:
		return out, fmt.Errorf("%w: RelayConfig.Lease and PublishTimeout must be positive", ErrInvalidConfig)
	case out.PublishTimeout >= out.Lease:
		return out, fmt.Errorf("%w: RelayConfig.PublishTimeout %s must be shorter than Lease %s", ErrInvalidConfig, out.PublishTimeout, out.Lease)
	case out.Feed != nil && (out.LogLease < time.Second || out.LogCheckpointInterval <= 0 || out.LogPollInterval <= 0 ||
		out.LogCheckpointInterval >= out.LogLease/3):
		return out, fmt.Errorf("%w: RelayConfig.LogLease %s must be at least 1s, and LogPollInterval and LogCheckpointInterval "+
			"positive, the latter under a third of the lease", ErrInvalidConfig, out.LogLease)
	case out.SweepBatch < 1 || out.PurgeBatch < 1:
		return out, fmt.Errorf("%w: RelayConfig.SweepBatch and PurgeBatch must be positive", ErrInvalidConfig)
	case out.Retention < 0:
		return out, fmt.Errorf("%w: RelayConfig.Retention is negative", ErrInvalidConfig)
	case len(out.ID) > ferrystore.MaxRelayIDLen:
		return out, fmt.Errorf("%w: RelayConfig.ID %q is longer than %d bytes", ErrInvalidConfig, out.ID, ferrystore.MaxRelayIDLen)
	case out.Heartbeat > 0 && out.ForgetAfter < 3*out.Heartbeat:
		return out, fmt.Errorf("%w: RelayConfig.ForgetAfter %s must be at least 3 Heartbeats (%s)", ErrInvalidConfig,
			out.ForgetAfter, 3*out.Heartbeat)
	}
	return out, nil
}

// RelayStats counts what a relay did since it was created.
type RelayStats struct {
	Claims     int64 // claim statements that returned events
	Claimed    int64 // events claimed
	Confirmed  int64 // events confirmed and marked SENT
	Duplicates int64 // confirmed events the broker reported as duplicates
	Returned   int64 // unroutable outcomes
	Rejected   int64 // rejected outcomes
	Unknown    int64 // unknown outcomes
	Retried    int64 // events put back to NEW with a delay, by settle or sweep
	NotSent    int64 // unknown outcomes that never left the process (ferrytype.ErrNotSent), given back without spending an attempt
	Released   int64 // of those, events given back to NEW (Store.Release)
	Outages    int64 // broker outages the relay waited out
	Dead       int64 // events moved to DEAD, by settle or sweep
	Fenced     int64 // outcome marks that found the lease gone (0 rows)
	Swept      int64 // expired leases the sweeper returned or killed
	Purged     int64 // SENT rows deleted by retention
	Errors     int64 // database errors in claims and marks
	// Heartbeats counts the beats recorded in the heartbeat table,
	// HeartbeatErrors the beats that failed.
	Heartbeats, HeartbeatErrors int64
}

type relayCounters struct {
	claims, claimed, confirmed, duplicates, returned, rejected, unknown atomic.Int64
	retried, dead, fenced, swept, purged, errors                        atomic.Int64
	notSent, released, outages, beats, beatErrors                       atomic.Int64
}

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
type Relay struct {
	store ferrystore.Store
	pub   ferrybroker.Publisher
	cfg   RelayConfig
	log   *slog.Logger
	hooks relayHooks
	c     relayCounters
	// conn is the publisher's connectivity, nil when it has none.
	conn   ferrybroker.Connectivity
	outage outage

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopping chan struct{}   // closed by Stop: take no new work
	workCtx  context.Context // cancelled when Stop gives up waiting
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	bgWG     sync.WaitGroup

	kick     chan struct{} // one token wakes one lane
	active   atomic.Int64  // lanes inside a cycle
	claiming atomic.Int64  // lanes inside a claim
	// heldBack is set when an ordered claim, woken by the probe while
	// another lane's batch was in flight, found nothing: the ready events
	// wait for that batch. The probe then waits for the lanes to go idle.
	heldBack  atomic.Bool
	lastRing  atomic.Int64 // unix nanos of the last wake-up signal
	missDelay atomic.Int64 // next re-poll delay after a signalled miss

	// registry is the store's heartbeat table, nil when the relay does
	// not beat.
	registry ferrystore.RelayRegistry
	host     string
	inFlight atomic.Int64 // events claimed and not yet settled
	// leading is true while this relay leads the table's maintenance
	// (see Leading): always without a heartbeat table, else as the rows
	// read after each beat say.
	leading atomic.Bool

	// follow reads the table's log; nil for a polling relay.
	follow *logFollower
	// scan asks the next cycle for a claim from the table rather than of
	// the ids read from the log.
	scan atomic.Bool
	// logHeld is set when events the log told of may wait in the table
	// for a claim from it: the next settled batch then asks for one.
	logHeld atomic.Bool
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
	for i, h := range c.Hooks {
		if nilness.Nil(h) {
			return nil, fmt.Errorf("%w: RelayConfig.Hooks[%d] is nil", ErrInvalidConfig, i)
		}
	}
	r := &Relay{store: store, pub: pub, cfg: c, log: c.Logger.With("table", store.Table())}
	r.conn, _ = pub.(ferrybroker.Connectivity)
	r.hooks = collectRelayHooks(store.Table(), c.Hooks)
	if r.host, _ = os.Hostname(); r.host == "" {
		r.host = "unknown"
	}
	if r.cfg.ID == "" {
		r.cfg.ID = fmt.Sprintf("%s-%d-%s", token.Truncate(r.host, 100), os.Getpid(), token.New()[:8])
	}
	if r.cfg.Broker == "" {
		r.cfg.Broker = fmt.Sprintf("%T", pub)
	}
	if !nilness.Nil(c.Feed) {
		r.follow = &logFollower{feed: c.Feed, ckpt: store, hooks: &r.hooks}
		r.follow.stats.Source = c.Feed.Source()
		r.follow.stats.RetainedBytes = -1
	}
	if reg, ok := store.(ferrystore.RelayRegistry); ok && c.Heartbeat > 0 {
		r.registry = reg
	} else {
		r.leading.Store(true)
	}
	return r, nil
}

// Leading reports whether the relay leads its table's maintenance now: the
// sweep of expired leases and the pruning of heartbeat rows of relays
// gone. Of the relays of a table that record heartbeats, one leads — the
// oldest alive, by the heartbeat table (ferrystore.MaintenanceLeader, read
// after each beat) — so N relays sweep as often as one does; when the
// leader stops, or stops beating for three Heartbeats, the next oldest
// takes over at its next beat. A relay that records no heartbeat
// (Heartbeat negative, or a store without a heartbeat table) always leads,
// and so does a relay whose beat or reading of the table failed:
// maintenance is safe to run twice, and not running it is not. Retention
// is not elected: every relay with a Retention purges.
//
// A --drain run's progress line counts the table only in the leading
// relay.
func (r *Relay) Leading() bool { return r.leading.Load() }

// ID returns the relay's id in the heartbeat table (RelayConfig.ID).
func (r *Relay) ID() string { return r.cfg.ID }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Claims: r.c.claims.Load(), Claimed: r.c.claimed.Load(), Confirmed: r.c.confirmed.Load(),
		Duplicates: r.c.duplicates.Load(), Returned: r.c.returned.Load(), Rejected: r.c.rejected.Load(),
		Unknown: r.c.unknown.Load(), Retried: r.c.retried.Load(), Dead: r.c.dead.Load(),
		NotSent: r.c.notSent.Load(), Released: r.c.released.Load(), Outages: r.c.outages.Load(),
		Fenced: r.c.fenced.Load(), Swept: r.c.swept.Load(), Purged: r.c.purged.Load(), Errors: r.c.errors.Load(),
		Heartbeats: r.c.beats.Load(), HeartbeatErrors: r.c.beatErrors.Load(),
	}
}

// Start starts the relay's lanes, sweeper, retention and wake-up listener
// and returns. ctx bounds nothing but the start itself; stop the relay with
// Stop.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return ErrClosed
	}
	if r.started {
		return fmt.Errorf("ferry: relay already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.follow != nil {
		if err := r.checkLog(ctx); err != nil {
			return err
		}
	}
	r.started = true
	r.stopping = make(chan struct{})
	r.scan.Store(true) // the first look is at the table
	r.workCtx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.kick = make(chan struct{}, r.cfg.Lanes)
	r.kickOne() // look once at start

	for i := 0; i < r.cfg.Lanes; i++ {
		r.wg.Add(1)
		go r.lane()
	}
	r.bg(r.poller)
	if r.follow != nil {
		r.bg(r.followLog)
		r.bg(r.measureLog)
	}
	if r.cfg.Wakeup != nil {
		ch, unsub := r.cfg.Wakeup.subscribe()
		r.bg(func() {
			defer unsub()
			for {
				select {
				case <-r.stopping:
					return
				case <-ch:
					r.ring()
				}
			}
		})
	}
	if l, ok := r.store.(ferrystore.Listener); ok && !r.cfg.DisableListen {
		r.bg(func() { r.listen(l) })
	}
	if r.cfg.SweepInterval > 0 {
		r.bg(func() { r.every(r.cfg.SweepInterval, r.ifLeading(r.sweep)) })
	}
	if r.cfg.Retention > 0 {
		// Every relay with a retention purges, leader or not: retention
		// is set per relay, and electing it would let the leader's
		// setting turn it off for all; a purge that finds nothing is one
		// index read a minute.
		r.bg(func() { r.every(r.cfg.PurgeInterval, r.purge) })
	}
	if r.registry != nil {
		r.bg(r.heartbeat)
	}
	r.log.Info("relay started", "relay_id", r.cfg.ID, "batch_size", r.cfg.BatchSize, "lanes", r.cfg.Lanes,
		"ordered", r.cfg.Ordered)
	return nil
}

func (r *Relay) bg(fn func()) {
	r.bgWG.Add(1)
	go func() {
		defer r.bgWG.Done()
		fn()
	}()
}

// Stop stops claiming, lets in-flight batches finish publishing and record
// their outcomes, and returns. If ctx ends first, in-flight publishes are
// cancelled (their outcomes become unknown, and their leases expire) and
// Stop returns ctx's error. Stopping twice is safe.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started || r.stopped {
		r.stopped = true
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	close(r.stopping)
	r.mu.Unlock()

	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		r.bgWG.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		r.cancel()
		<-done
	}
	r.cancel()
	if r.registry != nil {
		// Every goroutine ended, the heartbeat's too: no beat comes after.
		r.forget(ctx)
	}
	st := r.Stats()
	attrs := []any{"confirmed", st.Confirmed, "retried", st.Retried, "dead", st.Dead, "fenced", st.Fenced}
	if r.follow != nil {
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

func (r *Relay) kickOne() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// ring handles a wake-up signal: new events may have been enqueued.
func (r *Relay) ring() {
	r.lastRing.Store(time.Now().UnixNano())
	r.kickOne()
}

// poller looks for events for the lanes that are idle. While a lane is
// claiming, or no lane is idle, it makes no query: a lane that finds
// events claims again at once. Otherwise it probes the store
// (Store.Ready) and wakes one idle lane when events are ready, so events
// committed while one lane publishes its batch are claimed by another
// lane, not after that batch's publish and mark. The interval starts at
// MinPollInterval and grows by a quarter at each look that is not
// followed by claimed events, up to PollInterval; any claimed event
// brings it back. So an idle relay makes about one query per
// PollInterval, and a busy one notices new events within a few
// milliseconds. A probe that finds events a claim cannot take (an ordered
// claim held back by an earlier event in flight) still lengthens the
// interval, and until the lanes are all idle again the probe leaves the
// idle lanes be while a batch is in flight.
func (r *Relay) poller() {
	fast := r.cfg.MinPollInterval
	d := fast
	t := time.NewTimer(d)
	defer t.Stop()
	seen := r.c.claimed.Load()
	lastProbe := time.Now() // a log relay's Start looked at the table
	for {
		select {
		case <-r.stopping:
			return
		case <-t.C:
		}
		if c := r.c.claimed.Load(); c != seen {
			seen, d = c, fast
		} else {
			d = min(d+max(d/4, 100*time.Microsecond), r.cfg.PollInterval)
		}
		t.Reset(d)
		active := r.active.Load()
		switch {
		case r.claiming.Load() > 0:
			continue // a lane is looking already
		case active >= int64(r.cfg.Lanes):
			continue // no lane is free to claim
		case active == 0:
			r.heldBack.Store(false)
		case r.heldBack.Load():
			continue // the ready events wait for the batch in flight
		}
		if r.brokerDown() {
			continue // nothing could be published: no probe, no claim
		}
		reading, standby := r.logState()
		if reading || standby {
			// The log tells of new events, to this relay or to the
			// one it stands by for: the table is probed only as a
			// safety net (for a standby, also for the events of a
			// reader that died, until its lease ends).
			t.Reset(r.cfg.PollInterval)
			if time.Since(lastProbe) < r.cfg.LogPollInterval {
				continue
			}
		}
		lastProbe = time.Now()
		ready, err := r.store.Ready(r.workCtx)
		if err != nil {
			r.log.Debug("probe failed; claiming instead", "error", err)
			ready = true
		}
		if ready {
			if reading || standby {
				r.scan.Store(true)
			}
			r.kickOne()
		}
	}
}

func (r *Relay) listen(l ferrystore.Listener) {
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithCancel(r.workCtx)
		go func() {
			select {
			case <-r.stopping:
			case <-ctx.Done():
			}
			cancel()
		}()
		start := time.Now()
		err := l.Listen(ctx, r.ring)
		cancel()
		select {
		case <-r.stopping:
			return
		default:
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		r.log.Warn("listen for new events failed; polling meanwhile", "error", err, "retry_in", backoff)
		if !r.sleep(backoff) {
			return
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// sleep waits d or until Stop; it reports whether the relay still runs.
func (r *Relay) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopping:
		return false
	case <-t.C:
		return true
	}
}

// ifLeading returns fn run only while the relay leads maintenance.
func (r *Relay) ifLeading(fn func()) func() {
	return func() {
		if r.leading.Load() {
			fn()
		}
	}
}

func (r *Relay) every(d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-r.stopping:
			return
		case <-t.C:
			fn()
		}
	}
}

// wakeWindow is how long after a wake-up signal a lane that found nothing
// looks again: the signal may have come before the enqueuing transaction
// committed.
const wakeWindow = 500 * time.Millisecond

func (r *Relay) lane() {
	defer r.wg.Done()
	errBackoff := 50 * time.Millisecond
	for {
		select {
		case <-r.stopping:
			return
		case <-r.kick:
		}
		for {
			select {
			case <-r.stopping:
				return
			default:
			}
			busy := r.active.Add(1) > 1
			n, err := r.cycle()
			if err == nil && n == 0 && busy && r.cfg.Ordered {
				r.heldBack.Store(true) // before this lane counts as idle
			}
			r.active.Add(-1)
			if err != nil {
				r.c.errors.Add(1)
				attrs := []any{"error", err, "retry_in", errBackoff}
				if errors.Is(err, ferrytype.ErrUndefinedTable) {
					attrs = append(attrs, "fix", "a table of the outbox does not exist: run ferry migrate --table "+r.store.Table()+
						" (or the store's Migrate)")
				}
				r.log.Error("relay cycle failed", attrs...)
				if !r.sleep(errBackoff) {
					return
				}
				errBackoff = min(errBackoff*2, max(r.cfg.PollInterval*5, time.Second))
				continue
			}
			errBackoff = 50 * time.Millisecond
			if n == r.cfg.BatchSize {
				r.kickOne() // more may be waiting: bring another lane in
			}
			if n > 0 {
				r.missDelay.Store(0)
				continue // more may have committed meanwhile: look again at once
			}
			if r.follow != nil {
				if queued, _ := r.follow.q.state(); queued > 0 {
					continue // the claim was from the table; the log's events wait
				}
			}
			r.maybeRepoll()
			break
		}
	}
}

// maybeRepoll schedules another look shortly after a claim found nothing
// although a wake-up signal just came: the enqueuing transaction may not
// have committed yet. The delays double from 2ms; they stop when the
// signal is older than wakeWindow, so an idle relay makes no extra query.
func (r *Relay) maybeRepoll() {
	if time.Since(time.Unix(0, r.lastRing.Load())) > wakeWindow {
		r.missDelay.Store(0)
		return
	}
	d := time.Duration(r.missDelay.Load())
	if d == 0 {
		d = 2 * time.Millisecond
	} else {
		d = min(d*2, 128*time.Millisecond)
	}
	r.missDelay.Store(int64(d))
	time.AfterFunc(d, r.kickOne)
}

// cycle claims one batch, publishes it and records the outcomes. It
// returns the number of events claimed.
func (r *Relay) cycle() (int, error) {
	ctx := r.workCtx
	if r.brokerDown() {
		return 0, nil // claim nothing while nothing could be published
	}
	token := token.New()
	start := time.Now()
	var (
		malformed int64
		ids, got  []string
		claimed   func(ok bool)
	)
	if r.follow != nil && !r.scan.CompareAndSwap(true, false) {
		// A log relay claims what the log told of; it claims from the
		// table only when asked to (at start, after a gap, for retries
		// and held-back events, after a probe found events ready) or
		// while its stream is down. A standby claims only when asked
		// to: a wake-up (PostgreSQL's NOTIFY) is for the reader.
		if ids, claimed = r.follow.q.take(r.cfg.BatchSize); ids == nil {
			if reading, standby := r.logState(); reading || standby {
				return 0, nil
			}
		}
	}
	r.claiming.Add(1)
	msgs, err := r.store.Claim(ctx, ferrystore.ClaimParams{
		Limit: r.cfg.BatchSize, Token: token, Lease: r.cfg.Lease, Ordered: r.cfg.Ordered, IDs: ids,
		Malformed: func(id string, reason error) {
			malformed++
			if ids != nil {
				got = append(got, id)
			}
			r.log.Warn("malformed outbox row recorded DEAD; it is never published", "event_id", id, "error", reason)
		},
	})
	r.claiming.Add(-1)
	if claimed != nil {
		claimed(err == nil)
	}
	if err != nil {
		return 0, err
	}
	switch {
	case ids != nil && len(msgs)+int(malformed) < len(ids):
		r.retryMissed(ids, append(got, msgIDs(msgs)...))
	case ids != nil && len(msgs) > 0:
		r.follow.q.claimed(msgIDs(msgs))
	case ids == nil && len(msgs) > 0 && r.follow != nil && r.logReading():
		r.follow.q.tookFromTable(msgIDs(msgs))
	}
	if ids == nil && r.follow != nil && len(msgs)+int(malformed) == r.cfg.BatchSize {
		// A full batch from the table: more may wait there (a backlog at
		// start, after a gap or an outage of the stream), claimed from it
		// until a batch comes back short, as a polling relay drains.
		r.scan.Store(true)
	}
	if r.cfg.Ordered && r.follow != nil {
		switch {
		case ids != nil && len(msgs)+int(malformed) < len(ids):
			// Some were not claimable, held back behind their
			// aggregate's previous event (or not available yet, or
			// taken by another relay): the table is asked after the
			// next batch settles.
			r.logHeld.Store(true)
		case ids == nil && len(msgs) > 0:
			// A claim from the table found events: their aggregates'
			// next events may wait behind them.
			r.logHeld.Store(true)
		}
	}
	if malformed > 0 {
		// Claimed and moved on to DEAD by the store (TransitionMalformed):
		// never published, so counted as dead and not as claimed.
		r.c.dead.Add(malformed)
		r.hooks.settle(0, 0, malformed)
		r.hooks.settleDest(destTally{{Dead: malformed}})
	}
	if len(msgs) == 0 {
		return max(int(malformed), len(ids)), nil
	}
	leaseEnd := start.Add(r.cfg.Lease)
	r.inFlight.Add(int64(len(msgs)))
	defer r.inFlight.Add(-int64(len(msgs)))
	r.c.claims.Add(1)
	r.c.claimed.Add(int64(len(msgs)))
	r.hooks.claim(len(msgs), time.Since(start))
	if err := r.fault(ctx, FaultAfterClaim); err != nil {
		r.log.Warn("fault after claim: batch abandoned", "token", token, "events", len(msgs), "error", err)
		return len(msgs), nil
	}

	pubCtx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	pubStart := time.Now()
	results := r.pub.Publish(pubCtx, msgs)
	cancel()
	if len(results) != len(msgs) {
		r.log.Error("publisher returned the wrong number of results; treating all as unknown",
			"want", len(msgs), "got", len(results))
		results = ferrybroker.AllUnknown(len(msgs), errors.New("publisher returned the wrong number of results"))
	}
	r.hooks.publish(msgs, results, time.Since(pubStart))
	if err := r.fault(ctx, FaultAfterPublish); err != nil {
		r.log.Warn("fault after publish: outcomes not recorded", "token", token, "events", len(msgs), "error", err)
		return len(msgs), nil
	}
	r.settle(ctx, token, leaseEnd, msgs, results)
	if r.follow != nil && r.logHeld.Swap(false) {
		r.scan.Store(true)
		r.kickOne()
	}
	return len(msgs), nil
}

// settle records each message's outcome under the claim's lease token.
func (r *Relay) settle(ctx context.Context, token string, leaseEnd time.Time, msgs []ferrytype.Message, results []ferrytype.PublishResult) {
	sent := make([]string, 0, len(msgs))
	var (
		fails   []ferrystore.Failure
		unsent  []string
		unsentE error
		// With a hook that counts by destination: the messages marked
		// SENT, in order, and the destination of each failed one.
		wantDest = r.hooks.wantDestinations()
		sentMsgs []*ferrytype.Message
		route    map[string]string
	)
	for i := range msgs {
		m, res := &msgs[i], results[i]
		if res.Outcome == ferrytype.OutcomeConfirmed {
			if err := r.fault(ctx, FaultLoseConfirm); err != nil {
				res = ferrytype.Unknown(fmt.Errorf("confirm lost: %w", err))
			}
		}
		if res.NotSent() {
			// It never left the process: not the event's fault.
			unsent = append(unsent, m.ID)
			unsentE = res.Err
			continue
		}
		switch res.Outcome {
		case ferrytype.OutcomeConfirmed:
			sent = append(sent, m.ID)
			if wantDest {
				sentMsgs = append(sentMsgs, m)
			}
			if res.Duplicate {
				r.c.duplicates.Add(1)
			}
			continue
		case ferrytype.OutcomeReturned:
			r.c.returned.Add(1)
		case ferrytype.OutcomeRejected:
			r.c.rejected.Add(1)
		default:
			r.c.unknown.Add(1)
		}
		delay, dead := r.cfg.Retry.Next(m.Attempt, res)
		msg := res.Outcome.String()
		if res.Err != nil {
			msg += ": " + res.Err.Error()
		}
		fails = append(fails, ferrystore.Failure{ID: m.ID, Token: token, Dead: dead, Delay: delay,
			Error: fmt.Sprintf("attempt %d: %s", m.Attempt, msg)})
		if wantDest {
			if route == nil {
				route = map[string]string{}
			}
			route[m.ID] = m.Route()
		}
		level := slog.LevelWarn
		if dead {
			level = slog.LevelError
		}
		r.log.Log(ctx, level, "publish not confirmed", "event_id", m.ID, "event_type", m.Type,
			"attempt", m.Attempt, "outcome", res.Outcome.String(), "error", res.Err, "dead", dead, "retry_in", delay)
	}
	for i := range results {
		if len(unsent) == 0 && results[i].Outcome != ferrytype.OutcomeUnknown {
			r.outageOver() // the broker answered, and every message left
			break
		}
	}
	if len(unsent) > 0 {
		r.c.notSent.Add(int64(len(unsent)))
		r.outageFrom(unsentE, false)
		r.outage.note(int64(len(unsent)))
		n, err := retryMark(ctx, leaseEnd, func() (int64, error) { return r.store.Release(ctx, token, unsent) })
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("giving back unsent events failed; the sweeper will return them after their lease",
				"error", err, "token", token, "events", len(unsent))
		} else {
			r.c.released.Add(n)
			r.hooks.release(n)
			r.fenced(token, int64(len(unsent))-n)
		}
	}
	if len(sent) > 0 {
		n, err := retryMark(ctx, leaseEnd, func() (int64, error) { return r.store.MarkSent(ctx, token, sent) })
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("mark sent failed; the events will be published again after their lease", "error", err,
				"token", token, "events", len(sent))
		} else {
			r.c.confirmed.Add(n)
			r.hooks.settle(n, 0, 0)
			if wantDest {
				// Fenced rows (fewer than asked) are not known by id:
				// count the first n in batch order.
				var t destTally
				for _, m := range sentMsgs[:min(int(n), len(sentMsgs))] {
					t.add(m.Route(), 1, 0, 0)
				}
				r.hooks.settleDest(t)
			}
			r.fenced(token, int64(len(sent))-n)
		}
	}
	if len(fails) > 0 {
		res, err := retryMark(ctx, leaseEnd, func() (ferrystore.MarkFailedResult, error) { return r.store.MarkFailed(ctx, fails) })
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("mark failed attempts failed; the sweeper will return the events", "error", err, "token", token)
			return
		}
		if r.follow != nil && len(res.Retried) > 0 {
			// The log tells of the retry at once, before its delay
			// ends: the table is asked when it has.
			time.AfterFunc(minDelay(fails), func() { r.scan.Store(true); r.kickOne() })
		}
		retried, dead := int64(len(res.Retried)), int64(len(res.Dead))
		r.c.dead.Add(dead)
		r.c.retried.Add(retried)
		r.hooks.settle(0, retried, dead)
		if wantDest {
			r.hooks.settleDest(tallyFailed(res, route))
		}
		r.fenced(token, int64(len(res.Fenced)))
	}
}

// minDelay is the shortest delay of fails that go back to NEW.
func minDelay(fails []ferrystore.Failure) time.Duration {
	d := time.Duration(-1)
	for _, f := range fails {
		if !f.Dead && (d < 0 || f.Delay < d) {
			d = f.Delay
		}
	}
	return max(d, 0) + 10*time.Millisecond
}

func (r *Relay) fenced(token string, n int64) {
	if n <= 0 {
		return
	}
	r.c.fenced.Add(n)
	r.hooks.fence(n)
	r.log.Warn("lease lost before the outcome was recorded; left as the new owner set it",
		"token", token, "events", n)
}

// retryMark retries a failing outcome write with backoff while the lease
// lasts: every mark it saves is a duplicate publish avoided.
func retryMark[T any](ctx context.Context, leaseEnd time.Time, fn func() (T, error)) (T, error) {
	backoff := 50 * time.Millisecond
	var zero T
	for {
		n, err := fn()
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(leaseEnd) {
			return zero, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, err
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (r *Relay) fault(ctx context.Context, point string) error {
	if r.cfg.FaultPoint == nil {
		return nil
	}
	return r.cfg.FaultPoint(ctx, point)
}

// sweep returns expired leases, in bounded batches, through the retry
// policy: back to NEW after a delay, or DEAD past the attempt limit.
func (r *Relay) sweep() {
	ctx := r.workCtx
	for {
		leases, err := r.store.ExpiredClaims(ctx, r.cfg.SweepBatch)
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("sweep failed", "error", err)
			return
		}
		if len(leases) == 0 {
			return
		}
		if err := r.fault(ctx, FaultMidSweep); err != nil {
			r.log.Warn("fault mid-sweep: expired leases left", "error", err)
			return
		}
		fails := make([]ferrystore.Failure, len(leases))
		route := make(map[string]string, len(leases))
		for i, l := range leases {
			route[l.ID] = l.Destination
			res := ferrytype.Unknown(errors.New("lease expired before an outcome was recorded"))
			delay, dead := r.cfg.Retry.Next(l.Attempts, res)
			fails[i] = ferrystore.Failure{ID: l.ID, Token: l.Token, Dead: dead, Delay: delay,
				Error: fmt.Sprintf("attempt %d: unknown: lease expired before an outcome was recorded", l.Attempts)}
		}
		res, err := r.store.MarkFailed(ctx, fails)
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("sweep failed", "error", err)
			return
		}
		// Rows another sweeper or relay changed first are fenced: not
		// counted here.
		retried, dead := int64(len(res.Retried)), int64(len(res.Dead))
		r.c.swept.Add(retried + dead)
		r.c.dead.Add(dead)
		r.c.retried.Add(retried)
		r.hooks.sweep(retried + dead)
		r.hooks.settle(0, retried, dead)
		if r.hooks.wantDestinations() {
			r.hooks.settleDest(tallyFailed(res, route))
		}
		r.log.Warn("returned expired leases", "events", retried+dead, "dead", dead, "fenced", len(res.Fenced))
		if len(leases) < r.cfg.SweepBatch {
			return
		}
		select {
		case <-r.stopping:
			return
		default:
		}
	}
}

// purge deletes SENT rows past retention, one bounded batch at a time.
func (r *Relay) purge() {
	ctx := r.workCtx
	for {
		n, err := r.store.PurgeSent(ctx, r.cfg.Retention, r.cfg.PurgeBatch)
		if err != nil {
			r.c.errors.Add(1)
			r.log.Error("purge failed", "error", err)
			return
		}
		r.c.purged.Add(n)
		if n < int64(r.cfg.PurgeBatch) {
			return
		}
		select {
		case <-r.stopping:
			return
		default:
		}
	}
}

// outage tracks a broker outage: from the first sign that publishes cannot
// leave the process (the publisher reports no connection, or a batch came
// back not sent) to the first batch that reaches the broker again, or the
// publisher reporting its connection back. It is logged once at each end.
type outage struct {
	mu    sync.Mutex
	since time.Time // zero: no outage
	// byConn is true while the publisher's Connectivity gates claims; false
	// when the outage was seen in results only, and claims are then tried
	// again after backoff.
	byConn bool
	// heldBack counts the publishes given back not sent during the
	// outage; what was never claimed meanwhile is logged as pending.
	heldBack int64
	nextTry  time.Time
	backoff  time.Duration
	// cause is what started the outage, for the heartbeat.
	cause error
}

func (o *outage) note(n int64) {
	o.mu.Lock()
	o.heldBack += n
	o.mu.Unlock()
}

// brokerDown reports whether the relay should claim nothing now: the
// publisher reports its connection down, or a batch came back not sent
// less than the trial backoff ago.
func (r *Relay) brokerDown() bool {
	if r.conn != nil {
		if err := r.conn.Disconnected(); err != nil {
			r.outageFrom(err, true)
			return true
		}
	}
	o := &r.outage
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return false
	}
	if o.byConn {
		// The connection is back: claim again at once.
		o.mu.Unlock()
		r.outageOver()
		return false
	}
	wait := time.Now().Before(o.nextTry)
	o.mu.Unlock()
	return wait
}

// outageFrom records a sign of an outage caused by cause; byConn says
// whether the publisher's connectivity reported it (else a batch's
// results did). The first sign starts the outage and is logged.
func (r *Relay) outageFrom(cause error, byConn bool) {
	o := &r.outage
	o.mu.Lock()
	start := o.since.IsZero()
	if start {
		o.since, o.heldBack, o.backoff, o.cause = time.Now(), 0, 0, cause
		r.c.outages.Add(1)
	}
	o.byConn = byConn
	if !byConn {
		// Results say the broker is unreachable although the publisher
		// (if it can tell) says otherwise: try again after a backoff.
		o.backoff = min(max(o.backoff*2, r.cfg.PollInterval, 10*time.Millisecond), max(r.cfg.PollInterval, time.Second))
		o.nextTry = time.Now().Add(o.backoff)
	}
	o.mu.Unlock()
	if start {
		msg := "<nil>"
		if cause != nil {
			msg = ferrytype.RedactURL(cause.Error())
		}
		r.log.Warn("broker unreachable: claiming paused, pending events stay NEW and spend no attempt",
			"cause", msg)
	}
}

// outageOver ends the outage, if any, and logs how long it lasted.
func (r *Relay) outageOver() {
	o := &r.outage
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return
	}
	took, held := time.Since(o.since), o.heldBack
	o.since, o.heldBack, o.backoff, o.nextTry, o.byConn, o.cause = time.Time{}, 0, 0, time.Time{}, false, nil
	o.mu.Unlock()
	attrs := []any{"outage", took.Round(time.Millisecond), "held_back", held}
	ctx, cancel := context.WithTimeout(r.workCtx, time.Second)
	defer cancel()
	if st, err := r.store.Stats(ctx); err == nil {
		attrs = append(attrs, "pending", st.New)
	}
	r.log.Info("broker reachable again: claiming resumed", attrs...)
}
