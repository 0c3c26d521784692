package ferry

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/buildinfo"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Defaults of RelayConfig, which a zero field takes; the ferry command's
// flags default to the same values.
const (
	DefaultBatchSize       = 100
	DefaultLanes           = 2
	DefaultTableLanes      = 8
	DefaultMinPollInterval = time.Millisecond
	DefaultPollInterval    = 80 * time.Millisecond
	DefaultLease           = 30 * time.Second
	DefaultPublishTimeout  = 10 * time.Second
	DefaultSweepInterval   = 5 * time.Second
	DefaultSweepBatch      = 500
	DefaultPurgeInterval   = time.Minute
	DefaultPurgeBatch      = 1000

	// Of HeartbeatConfig.
	DefaultHeartbeat   = 2 * time.Second
	DefaultForgetAfter = 24 * time.Hour

	// Of LogConfig.
	DefaultLogLease              = 15 * time.Second
	DefaultLogPollInterval       = 5 * time.Second
	DefaultLogCheckpointInterval = 200 * time.Millisecond
)

// RelayConfig configures a Relay. A nil config uses the defaults; zero
// fields take the default named in their comment.
type RelayConfig struct {
	// Throughput.

	// BatchSize is the most events one claim takes. Default
	// DefaultBatchSize (100).
	BatchSize int
	// Lanes is the number of claim→publish→mark loops run concurrently,
	// so that one batch is claimed while another waits for confirms.
	// Default DefaultLanes (2). A lane that claimed events claims again
	// at once when it is done with them, and a full batch brings another
	// lane in; an idle relay makes one probe per interval (see
	// PollInterval), not one per lane.
	Lanes int
	// TableLanes is how many lanes the relays of the table run together:
	// each relay alive that polls the table runs an equal share of them,
	// at most its own Lanes, from the heartbeat rows it reads at each
	// beat; a relay whose share is 0 stands by until a relay stops or
	// dies. So adding relays adds standbys, not claims in flight past
	// what the database serves best (docs/performance.md). A relay
	// starts with one lane; its share falls at once when relays join,
	// and rises only at a beat that finds as many relays alive as the
	// one before. A relay that
	// does not beat, or whose beats fail, runs all its Lanes; so does a
	// log relay. Default DefaultTableLanes (8).
	TableLanes int
	// Ordered publishes an aggregate's events one at a time, in sequence
	// order: event N+1 is claimed only after event N was confirmed (SENT),
	// whichever relay handles either. A DEAD event holds back every later
	// event of its aggregate until it is retried or discarded. Default
	// false: maximum throughput, no order between concurrent batches.
	Ordered bool

	// Polling and wake-ups: how soon a committed event is claimed, and
	// what an idle relay costs.

	// MinPollInterval is the probe interval right after the relay found
	// events: once its lanes run out of work, the relay asks the store
	// (Store.Ready, one read of the pending index) this often whether
	// events are ready, and wakes a lane when they are. Each probe that
	// finds nothing lengthens the interval by a quarter, up to
	// PollInterval; a claim that finds events brings it back to
	// MinPollInterval. Default DefaultMinPollInterval (1ms).
	MinPollInterval time.Duration
	// PollInterval is the longest an idle relay waits between two probes:
	// an idle relay makes about one query per PollInterval (plus its
	// maintenance), and notices an event enqueued after a long idle time
	// within PollInterval. Default DefaultPollInterval (80ms): about 13
	// queries a second when idle.
	PollInterval time.Duration
	// Wakeup, shared with the Outbox of the same process, wakes the relay
	// right after events are enqueued.
	Wakeup *Wakeup
	// DisableListen stops the relay from using the store's own
	// notifications (PostgreSQL LISTEN/NOTIFY). Default false.
	DisableListen bool

	// Leases and retries.

	// Lease is how long a claim holds its events; a relay that has not
	// recorded an outcome by then loses them to the sweeper. Default
	// DefaultLease (30s).
	Lease time.Duration
	// PublishTimeout bounds one batch's publish, confirms included; it
	// must be shorter than Lease. Default DefaultPublishTimeout (10s).
	PublishTimeout time.Duration
	// Retry decides the delay and the end of failed events. Default
	// ExponentialBackoff{}.
	Retry RetryPolicy
	// SweepInterval is how often the maintainer returns expired leases to
	// NEW (or DEAD past the retry limit). Default DefaultSweepInterval
	// (5s); negative disables.
	SweepInterval time.Duration
	// SweepBatch bounds one sweep statement. Default DefaultSweepBatch
	// (500).
	SweepBatch int

	// Maintenance of the table: retention of SENT events.

	// Retention deletes SENT events older than this. Default 0: keep them.
	Retention time.Duration
	// PurgeInterval is how often retention runs. Default
	// DefaultPurgeInterval (1m).
	PurgeInterval time.Duration
	// PurgeBatch bounds one purge statement, so that no purge holds many
	// row locks for long. Default DefaultPurgeBatch (1000).
	PurgeBatch int

	// ID names the relay: in the heartbeat table, and as the holder of
	// the table's leases (maintenance, the log). At most
	// ferrystore.MaxRelayIDLen bytes, unique among the relays of the
	// table. Default host-pid-random (8 hex digits).
	ID string

	// Heartbeat is the relay's row in the table of relays alive.
	Heartbeat HeartbeatConfig

	// Log, with a Feed, makes this a log relay: see LogConfig.
	Log LogConfig

	// Observability.

	// Logger receives the relay's logs: its start and stop, broker
	// outages, every publish not confirmed (an error when the event went
	// DEAD). Default: slog.Default(), so that a misconfiguration is seen;
	// slog.New(slog.DiscardHandler) silences it.
	Logger *slog.Logger
	// Hooks observe the relay; see the Hook* interfaces. A value that
	// implements none of the relay's hooks is refused.
	Hooks []Hook
}

// HeartbeatConfig configures a relay's heartbeat: how often it records
// itself in the heartbeat table of its outbox table (<table>_relay, outbox
// migration 0003_relay; see ferrystore.RelayRegistry), so that ferry
// status and consoles can tell which relays are alive now: its ID, host,
// pid, Version, Broker, lanes, order, the events it holds in flight and
// whether its broker is connected, with the last beat stamped by the
// database clock. It beats as it starts, then every Interval, and deletes
// its row on Stop; a relay that was killed leaves its row, which then ages.
// A beat is one statement on one row of that table and touches no event.
// A failed beat is logged (the first, then once a minute while they go
// on), counted (RelayStats.HeartbeatErrors, HookHeartbeat), and changes
// nothing else: the relay goes on relaying.
//
// The beats also carry the table's coordination: after each, the relay
// takes or renews the table's maintenance lease (see Relay.Leading) and
// reads the rows of the relays alive, from which it sets its share of
// RelayConfig.TableLanes. A relay that missed four beats is dead: the
// relay that maintains the table returns its claims at once (it records
// the prefix of its claim tokens in its row), rather than after their
// lease (RelayConfig.Lease). The relays of a table should beat at the same
// interval.
type HeartbeatConfig struct {
	// Interval is how often the relay beats. Default DefaultHeartbeat
	// (2s): a killed relay's claims are returned about 6-8s after its last
	// beat. Negative disables the heartbeat: the relay is then listed
	// nowhere, always maintains the table, runs all its Lanes, and its
	// claims wait for their lease if it dies.
	Interval time.Duration
	// ForgetAfter is how long the heartbeat row of a relay that stopped
	// beating without a clean Stop (killed, its host lost) stays before
	// the relay that leads the table's maintenance deletes it, at once
	// and then every ForgetAfter, at most once an hour. It must be at
	// least 3 Intervals, so that no live relay's row is deleted. Default
	// DefaultForgetAfter.
	ForgetAfter time.Duration
	// Version is the relay's version, shown in the heartbeat table.
	// Default: the version of the ferry module in the binary's build
	// information.
	Version string
	// Broker says what the relay publishes to, for the heartbeat table: a
	// broker URL (its credentials are removed before it is stored) or a
	// name. Default: the publisher's String when it is a fmt.Stringer (the
	// publishers of ferryamqp, ferrynats and ferrykafka return the
	// broker's address), else its Go type.
	Broker string
}

// LogConfig makes a relay a log relay, and configures it.
type LogConfig struct {
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
	// Lease is how long the log reader's lease lasts without renewal: a
	// standby takes over at most this long after the reader died.
	// Default DefaultLogLease (15s).
	Lease time.Duration
	// PollInterval is how often a log relay that is reading the log still
	// probes the table (Store.Ready), for retries recorded by other
	// relays whose delay ended and for events a person made available;
	// and how often a standby does (it claims what it finds: the events
	// of a reader that died, until its lease ends). Default
	// DefaultLogPollInterval (5s); a relay whose stream is down probes
	// every RelayConfig.PollInterval like a polling relay.
	PollInterval time.Duration
	// CheckpointInterval is how often the checkpoint is saved while the
	// table's events are handled. Default DefaultLogCheckpointInterval
	// (200ms). The lease is renewed every Lease/3 either way, and the
	// checkpoint saved with it: a log that moves only by other writes
	// (other tables, the relays' own heartbeats) is saved that often, not
	// every CheckpointInterval.
	CheckpointInterval time.Duration
}

// withDefaults returns the config with its zero fields set, or an error
// naming the first field out of range.
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
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defInt(&out.BatchSize, DefaultBatchSize)
	defInt(&out.Lanes, DefaultLanes)
	defInt(&out.TableLanes, DefaultTableLanes)
	def(&out.PollInterval, DefaultPollInterval)
	def(&out.MinPollInterval, DefaultMinPollInterval)
	out.MinPollInterval = min(out.MinPollInterval, out.PollInterval)
	def(&out.Lease, DefaultLease)
	def(&out.PublishTimeout, DefaultPublishTimeout)
	def(&out.SweepInterval, DefaultSweepInterval)
	def(&out.PurgeInterval, DefaultPurgeInterval)
	defInt(&out.SweepBatch, DefaultSweepBatch)
	defInt(&out.PurgeBatch, DefaultPurgeBatch)
	def(&out.Log.Lease, DefaultLogLease)
	def(&out.Log.PollInterval, DefaultLogPollInterval)
	def(&out.Log.CheckpointInterval, DefaultLogCheckpointInterval)
	if nilness.Nil(out.Retry) {
		out.Retry = ExponentialBackoff{}
	}
	if nilness.Nil(out.Log.Feed) {
		out.Log.Feed = nil
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	hb := &out.Heartbeat
	def(&hb.Interval, DefaultHeartbeat)
	def(&hb.ForgetAfter, DefaultForgetAfter)
	if hb.Version == "" {
		hb.Version = buildinfo.Read("").Version
	}
	switch {
	case out.BatchSize < 1 || out.BatchSize > 10000:
		return out, fmt.Errorf("%w: RelayConfig.BatchSize %d must be within 1..10000", ErrInvalidConfig, out.BatchSize)
	case out.Lanes < 1 || out.Lanes > 64:
		return out, fmt.Errorf("%w: RelayConfig.Lanes %d must be within 1..64", ErrInvalidConfig, out.Lanes)
	case out.TableLanes < 1 || out.TableLanes > 1024:
		return out, fmt.Errorf("%w: RelayConfig.TableLanes %d must be within 1..1024", ErrInvalidConfig, out.TableLanes)
	case out.PollInterval < time.Millisecond:
		return out, fmt.Errorf("%w: RelayConfig.PollInterval %s is below 1ms", ErrInvalidConfig, out.PollInterval)
	case out.MinPollInterval < 100*time.Microsecond:
		return out, fmt.Errorf("%w: RelayConfig.MinPollInterval %s is below 100µs", ErrInvalidConfig, out.MinPollInterval)
	case out.PublishTimeout <= 0 || out.Lease <= 0:
		return out, fmt.Errorf("%w: RelayConfig.Lease and PublishTimeout must be positive", ErrInvalidConfig)
	case out.PublishTimeout >= out.Lease:
		return out, fmt.Errorf("%w: RelayConfig.PublishTimeout %s must be shorter than Lease %s", ErrInvalidConfig,
			out.PublishTimeout, out.Lease)
	case out.Log.Feed != nil && (out.Log.Lease < time.Second || out.Log.CheckpointInterval <= 0 || out.Log.PollInterval <= 0 ||
		out.Log.CheckpointInterval >= out.Log.Lease/3):
		return out, fmt.Errorf("%w: RelayConfig.Log.Lease %s must be at least 1s, and Log.PollInterval and "+
			"Log.CheckpointInterval positive, the latter under a third of the lease", ErrInvalidConfig, out.Log.Lease)
	case out.SweepBatch < 1 || out.PurgeBatch < 1:
		return out, fmt.Errorf("%w: RelayConfig.SweepBatch and PurgeBatch must be positive", ErrInvalidConfig)
	case out.Retention < 0:
		return out, fmt.Errorf("%w: RelayConfig.Retention is negative", ErrInvalidConfig)
	case len(out.ID) > ferrystore.MaxRelayIDLen:
		return out, fmt.Errorf("%w: RelayConfig.ID %q is longer than %d bytes", ErrInvalidConfig, out.ID, ferrystore.MaxRelayIDLen)
	case hb.Interval > 0 && hb.ForgetAfter < 3*hb.Interval:
		return out, fmt.Errorf("%w: RelayConfig.Heartbeat.ForgetAfter %s must be at least 3 Intervals (%s)", ErrInvalidConfig,
			hb.ForgetAfter, 3*hb.Interval)
	}
	return out, nil
}
