package shop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/fault"
	"github.com/ferrydev/ferry/internal/open"
)

// RelayOptions configure the shop's relay process. It is ferry's relay as
// `ferry relay` runs it: the store and the publisher opened from URLs the
// same way, the flags of the same names with the same defaults, the same
// ferry.NewRelay. What it adds is fault injection, which `ferry relay`
// does not have: CrashAt, PauseAt and LoseConfirmPct.
type RelayOptions struct {
	// DatabaseURL is the orders database, whose outbox the relay
	// publishes; BrokerURL the broker (nats://, amqp:// or kafka://).
	DatabaseURL, BrokerURL string
	// Stream is the JetStream stream the relay checks (NATS only).
	Stream string
	// Kafka only, as `ferry relay`'s flags of the same names: Topics to
	// check (or, with Declare, create with Partitions partitions and
	// ReplicationFactor replicas) at start, comma-separated; TopicFrom and
	// TopicPrefix derive the topic of an event without a destination.
	Topics, TopicFrom, TopicPrefix string
	Declare                        bool
	Partitions, ReplicationFactor  int
	// ConfirmWindow is RabbitMQ's publishes awaiting their confirms.
	ConfirmWindow int
	// The relay's settings: the ferry.RelayConfig fields `ferry relay`'s
	// flags of the same names set (--batch-size, --lanes, --ordered,
	// --poll-interval, --min-poll-interval, --lease, --publish-timeout,
	// --sweep-interval, --retry-initial, --retry-max, --max-attempts).
	BatchSize, Lanes, MaxAttempts        int
	Ordered                              bool
	PollInterval, MinPollInterval        time.Duration
	Lease, PublishTimeout, SweepInterval time.Duration
	// Heartbeat is how often the relay records itself in <table>_relay;
	// the relays alive elect the one that sweeps from those rows.
	Heartbeat              time.Duration
	RetryInitial, RetryMax time.Duration
	// ShutdownTimeout bounds the wait for batches in flight at stop.
	ShutdownTimeout time.Duration
	// StatsInterval is how often a STATS line is written to Out.
	StatsInterval time.Duration
	// Source is where the relay learns of new events, as `ferry relay
	// --source`: "poll" (the default) or "log" (the database's binlog or
	// logical replication: the log relay). LogSlot names PostgreSQL's
	// replication slot (default ferry_<table>), LogLease the log reader's
	// lease, LogPollInterval its safety-net probe of the table.
	Source, LogSlot           string
	LogLease, LogPollInterval time.Duration
	// CrashAt arms a crash point, "point[:n]" (see RunRole).
	CrashAt string
	// PauseAt arms a pause point, "point=file": each time file exists
	// when the relay reaches point, the relay removes it and stops itself
	// with SIGSTOP (the chaos suite's pause scenario).
	PauseAt string
	// LoseConfirmPct of the broker's confirms are treated as lost: the
	// relay sees an unknown outcome and publishes the event again.
	LoseConfirmPct int
	// Out receives the STATS lines; Log the relay's error log lines.
	Out, Log io.Writer
}

// Flags declares the options as flags of fs, with `ferry relay`'s names
// and defaults.
func (o *RelayOptions) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.DatabaseURL, "database-url", "", "orders database URL (the outbox's)")
	fs.StringVar(&o.BrokerURL, "broker-url", "", "broker URL: nats://, amqp:// or kafka://")
	fs.StringVar(&o.Stream, "stream", "", "JetStream stream to verify")
	fs.StringVar(&o.Topics, "topics", "", "comma-separated Kafka topics to verify (or declare) at start")
	fs.StringVar(&o.TopicFrom, "topic-from", string(ferrykafka.TopicFromEventType),
		"Kafka topic of an event without a destination: event-type or aggregate-type")
	fs.StringVar(&o.TopicPrefix, "topic-prefix", "", "put before every derived Kafka topic (never before a destination)")
	fs.BoolVar(&o.Declare, "declare", false, "create the missing --topics at start (Kafka)")
	fs.IntVar(&o.Partitions, "partitions", -1, "partitions of a declared Kafka topic (-1: the brokers' num.partitions)")
	fs.IntVar(&o.ReplicationFactor, "replication-factor", -1, "replicas of a declared Kafka topic (-1: the brokers' default.replication.factor)")
	fs.IntVar(&o.ConfirmWindow, "confirm-window", 1000, "RabbitMQ publishes awaiting their confirms, per channel")
	fs.IntVar(&o.BatchSize, "batch-size", 100, "events per claim")
	fs.IntVar(&o.Lanes, "lanes", 2, "concurrent claim→publish→mark loops")
	fs.BoolVar(&o.Ordered, "ordered", false, "publish each aggregate's events one at a time, in order")
	fs.DurationVar(&o.PollInterval, "poll-interval", 80*time.Millisecond, "longest wait between two probes of an idle relay")
	fs.DurationVar(&o.MinPollInterval, "min-poll-interval", time.Millisecond, "probe interval right after events were found")
	fs.DurationVar(&o.Lease, "lease", 30*time.Second, "how long a claim holds its events")
	fs.DurationVar(&o.PublishTimeout, "publish-timeout", 10*time.Second, "bound on one batch's publish and confirms (< lease)")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", 5*time.Second, "how often expired leases are returned to NEW")
	fs.DurationVar(&o.Heartbeat, "heartbeat", ferry.DefaultHeartbeat,
		"how often the relay records itself in <table>_relay; a relay that leads the sweep is replaced 3 heartbeats after it stops beating")
	fs.DurationVar(&o.RetryInitial, "retry-initial", time.Second, "delay after the first failed attempt (doubles, with jitter)")
	fs.DurationVar(&o.RetryMax, "retry-max", 5*time.Minute, "longest delay between attempts")
	fs.IntVar(&o.MaxAttempts, "max-attempts", 20, "attempts before an event goes DEAD")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stop waits for batches in flight")
	fs.DurationVar(&o.StatsInterval, "stats-interval", 200*time.Millisecond, "how often to write a STATS line")
	fs.StringVar(&o.Source, "source", "poll", "where the relay learns of new events: poll or log")
	fs.StringVar(&o.LogSlot, "log-slot", "", "PostgreSQL replication slot of --source log (default ferry_<table>)")
	fs.DurationVar(&o.LogLease, "log-lease", ferry.DefaultLogLease, "with --source log: the log reader's lease")
	fs.DurationVar(&o.LogPollInterval, "log-poll-interval", ferry.DefaultLogPollInterval,
		"with --source log: how often the table is still probed")
	fs.StringVar(&o.CrashAt, "crash-at", "", "kill this process with SIGKILL the n-th time it reaches a fault point: point[:n]")
	fs.IntVar(&o.LoseConfirmPct, "lose-confirm-pct", 0, "treat this percent of broker confirms as lost")
	fs.StringVar(&o.PauseAt, "pause-at", "", "stop this process with SIGSTOP at a fault point whenever a file exists: point=file")
}

// RunRelay runs the relay until ctx ends, then stops it (finishing the
// batches in flight). Like `ferry relay`, it waits for an unreachable
// database or broker at start, here up to 30 s.
func RunRelay(ctx context.Context, o RelayOptions) error {
	if o.StatsInterval <= 0 {
		return fmt.Errorf("%w: --stats-interval must be positive", ErrUsage)
	}
	crash, err := fault.Crash(o.CrashAt)
	if err != nil {
		return fmt.Errorf("%w: --crash-at: %w", ErrUsage, err)
	}
	pause, err := fault.Pause(o.PauseAt)
	if err != nil {
		return fmt.Errorf("%w: --pause-at: %w", ErrUsage, err)
	}
	var lose func(ctx context.Context, point string) error
	if o.LoseConfirmPct > 0 {
		lose = func(_ context.Context, point string) error {
			if point == ferryfault.RelayLoseConfirm && rand.IntN(100) < o.LoseConfirmPct {
				return errors.New("confirm lost (injected)")
			}
			return nil
		}
	}
	// A pause comes first: a crash armed at the same point then still
	// fires after the pause, at its own hit.
	faults := fault.Chain(pause, lose, crash)
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelError}))
	var topics []string
	for _, t := range strings.Split(o.Topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	bc := &open.BrokerConfig{
		NATS: open.NATSConfig{Stream: o.Stream},
		AMQP: open.AMQPConfig{ExchangeKind: "topic", Window: o.ConfirmWindow, Logger: log},
		Kafka: open.KafkaConfig{TopicFrom: ferrykafka.TopicFrom(o.TopicFrom), TopicPrefix: o.TopicPrefix, Topics: topics,
			Declare: o.Declare, Partitions: int32(o.Partitions), ReplicationFactor: int16(o.ReplicationFactor),
			Logger: log},
	}
	var store ferrystore.Store
	if err := retryStart(ctx, func() (err error) {
		store, err = open.Store(ctx, o.DatabaseURL, "")
		return err
	}); err != nil {
		return err
	}
	defer store.Close()
	var pub ferrybroker.Publisher
	if err := retryStart(ctx, func() (err error) {
		pub, err = open.Publisher(ctx, o.BrokerURL, bc)
		return err
	}); err != nil {
		return err
	}
	defer pub.Close()
	rc := &ferry.RelayConfig{
		BatchSize: o.BatchSize, Lanes: o.Lanes, Ordered: o.Ordered, PollInterval: o.PollInterval,
		MinPollInterval: o.MinPollInterval,
		Lease:           o.Lease, PublishTimeout: o.PublishTimeout, SweepInterval: o.SweepInterval,
		Heartbeat: ferry.HeartbeatConfig{Interval: o.Heartbeat},
		Retry:     ferry.ExponentialBackoff{Initial: o.RetryInitial, Max: o.RetryMax, MaxAttempts: o.MaxAttempts},
		Logger:    log,
	}
	switch o.Source {
	case "", "poll":
	case "log":
		feed, err := open.Feed(o.DatabaseURL, "", &open.FeedConfig{Slot: o.LogSlot, Logger: log})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		defer feed.Close()
		rc.Log = ferry.LogConfig{Feed: feed, Lease: o.LogLease, PollInterval: o.LogPollInterval}
	default:
		return fmt.Errorf("%w: --source %q: want poll or log", ErrUsage, o.Source)
	}
	relay, err := ferry.NewRelay(store, pub, rc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	// The log relay checks the database's log at start: during an outage
	// that fails as an unreachable database does. The faults reach the
	// relay and its publisher (ferryfault.PublishBeforeConfirm) through
	// the context it starts with.
	runCtx := ferryfault.With(ctx, faults)
	if err := retryStart(ctx, func() error { return relay.Start(runCtx) }); err != nil {
		return err
	}
	statsCtx, stopStats := context.WithCancel(context.Background())
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		out := o.Out
		if out == nil {
			out = io.Discard
		}
		ReportStats(statsCtx, out, o.StatsInterval, func() Stats {
			st, ls := relay.Stats(), relay.LogStats()
			return Stats{Role: "relay", Confirmed: st.Confirmed, Unknown: st.Unknown, Fenced: st.Fenced,
				Swept: st.Swept, Dupes: st.Duplicates, Retried: st.Retried, LogEvents: ls.Events, LogGaps: ls.Gaps}
		})
	}()
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownTimeout)
	defer cancel()
	err = relay.Stop(stopCtx)
	stopStats()
	<-statsDone
	if err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}
