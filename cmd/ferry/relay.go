package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

type relayFlags struct {
	brokerURL         string
	batchSize         int
	lanes             int
	tableLanes        int
	ordered           bool
	pollInterval      time.Duration
	minPollInterval   time.Duration
	lease             time.Duration
	publishTimeout    time.Duration
	maxAttempts       int
	retryInitial      time.Duration
	retryMax          time.Duration
	retention         time.Duration
	sweepInterval     time.Duration
	stream            string
	subjects          string
	declare           bool
	exchange          string
	exchangeType      string
	queue             string
	queueType         string
	routingKeys       []string
	confirmWindow     int
	topics            string
	topicFrom         string
	topicPrefix       string
	messageFormat     string
	managementURL     string
	streamReplicas    int
	minInsync         int
	requireDurability string
	formatFor         []string
	ceSource          string
	partitions        int
	replication       int
	drain             bool
	drainTimeout      time.Duration
	drainProgress     time.Duration
	shutdownTimeout   time.Duration
	statsInterval     time.Duration
	httpAddr          string
	metricsInterval   time.Duration
	metricsDests      int
	readyTimeout      time.Duration
	connectTimeout    time.Duration
	heartbeat         time.Duration
	relayID           string
	source            string
	logSlot           string
	logPublication    string
	logLease          time.Duration
	logPollInterval   time.Duration
}

func newRelay(g *globals) *cobra.Command {
	f := &relayFlags{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish outbox events to the broker until stopped",
		Long: `Claims NEW events from the outbox table in batches, publishes them to the broker,
and marks each SENT only when the broker confirmed it. Run as many relays as you
like on one table. SIGTERM or SIGINT stops taking new batches, finishes the
batches in flight (publish and outcome), and exits. With --drain the relay
exits by itself once no event is ready and none is being sent.

An event goes to its destination, or to its event type when it has none: the
NATS subject, the AMQP routing key, or the Kafka topic.

NATS JetStream (nats://, tls://): with --stream the relay checks that the
stream exists (and lists --subjects); with --declare it creates or updates it.

RabbitMQ (amqp://, amqps://): events go to --exchange (default amq.topic; an
event's own exchange wins), as persistent mandatory messages with publisher
confirms; an unroutable event is not SENT but retried. For a cluster, give
its nodes as comma-separated URLs (amqp://u:p@rabbit1:5672/,amqp://u:p@rabbit2:5672/,...,
one virtual host): the relay holds one connection and, when its node goes,
reconnects to the next node of the list that answers. With --queue the relay
checks that the queue exists; with --declare it declares --exchange (a durable
--exchange-type exchange), --queue (a durable --queue-type queue, quorum by
default, with the parking queue <queue>.parking as its at-least-once
dead-letter target) and binds the queue with each --routing-key.

Kafka (kafka://host:9092,host2:9092, kafkas:// for TLS): each event is one
record keyed by its aggregate id, produced by an idempotent producer with
acks from every in-sync replica. An event without a destination goes to
--topic-prefix followed by its event type (or its aggregate type, with
--topic-from aggregate-type). With --topics the relay checks at start that
each topic exists, and exits 2 naming the ones that do not; with --declare
it creates them, with --partitions partitions and --replication-factor
replicas (-1: the brokers' defaults).

At start the relay checks that the outbox table has every migration this
ferry embeds (a table migrated by a newer ferry is only a warning). Without
--drain, a relay whose database or broker is unreachable, or whose table is
missing or behind, does not exit: it keeps trying (database and broker: 200ms
doubling to 5s between tries, a warning each; the schema: checked again every
5s, logged when the cause changes and once a minute) and starts relaying as
soon as all are there, so that running ferry migrate makes it ready without a
restart. Set --connect-timeout explicitly to exit 1 instead when the database
or the broker stays unreachable that long. With --drain the relay tries the
database and the broker for --connect-timeout, then exits 1; a missing or
outdated table exits 7 at once; events that went DEAD during the run exit 6.

Every --heartbeat (5s) the relay records itself in the table <table>_relay
(outbox migration 0003): --relay-id (default host-pid-random), host, pid,
version, broker (without credentials), lanes, events in flight and whether
its broker is connected, stamped with the database clock; it deletes its row
when it stops. ferry status lists these relays and says "no relay alive" when
events wait and none beat recently. A failing heartbeat is logged and never
stops the relay.

With --http-addr (off by default) the relay serves, from the moment it
starts, /metrics (Prometheus; ferry_broker_connected is 0 until the broker is
connected), /healthz (the process runs) and /readyz (200 when the database
answers, the table is migrated and the broker is connected; 503 naming the
cause otherwise). The outbox gauges, the age of the oldest pending event
above all, are read from the database every --metrics-interval. With OTEL_EXPORTER_OTLP_ENDPOINT
set, it exports a span per publish attempt over OTLP/HTTP, in the trace the
event was enqueued in.

With --source log the relay reads which events became NEW from the database's
own log of committed changes instead of probing the table: MariaDB/MySQL's
binlog (log_bin, binlog_format=ROW, binlog_row_image=FULL, and a user with
REPLICATION SLAVE and REPLICATION CLIENT), PostgreSQL's logical replication
(wal_level=logical, a role with REPLICATION; the relay creates the publication
--log-publication and the slot --log-slot, default ferry_<table>). It claims
each event by id as its transaction commits, in the same table and state
machine as the polling relay: retries, DEAD events and --ordered are the same,
and polling relays may run beside it. One relay reads the log at a time,
holding the lease "log" in <table>_lease (outbox migration 0006) where it keeps
its checkpoint; other --source log relays stand by, probing the table every
--log-poll-interval, and take over within --log-lease. At start the relay checks the database's settings and exits 2
naming what is missing and how to fix it. A gap in the log (the binlog purged
past the checkpoint, the slot invalidated or dropped) is logged as an error
and the relay claims what is pending from the table, so nothing is skipped.
See docs/log-relay.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRelay(cmd, g, f) },
	}
	fl := cmd.Flags()
	envString(fl, &f.brokerURL, "broker-url", "FERRY_BROKER_URL", "",
		"broker URL: nats://user:pass@host:4222, amqp://user:pass@host:5672/vhost (amqps:// for TLS; a RabbitMQ cluster's nodes as "+
			"comma-separated amqp:// URLs), kafka://host:9092,host2:9092 (kafkas:// for TLS)")
	fl.IntVar(&f.batchSize, "batch-size", ferry.DefaultBatchSize, "events per claim")
	bindEnv(fl, "batch-size", "FERRY_BATCH_SIZE")
	fl.IntVar(&f.lanes, "lanes", ferry.DefaultLanes, "concurrent claim→publish→mark loops")
	bindEnv(fl, "lanes", "FERRY_LANES")
	fl.IntVar(&f.tableLanes, "table-lanes", ferry.DefaultTableLanes,
		"lanes of all the relays of the table together: each relay alive runs an equal share, at most --lanes (0: a standby)")
	bindEnv(fl, "table-lanes", "FERRY_TABLE_LANES")
	fl.BoolVar(&f.ordered, "ordered", false, "publish each aggregate's events one at a time, in order")
	bindEnv(fl, "ordered", "FERRY_ORDERED")
	fl.DurationVar(&f.pollInterval, "poll-interval", ferry.DefaultPollInterval,
		"longest wait between two probes for events of an idle relay (about one query per interval)")
	bindEnv(fl, "poll-interval", "FERRY_POLL_INTERVAL")
	fl.DurationVar(&f.minPollInterval, "min-poll-interval", ferry.DefaultMinPollInterval,
		"probe interval right after events were found; each empty probe lengthens it by a quarter up to --poll-interval")
	bindEnv(fl, "min-poll-interval", "FERRY_MIN_POLL_INTERVAL")
	fl.DurationVar(&f.lease, "lease", ferry.DefaultLease, "how long a claim holds its events")
	bindEnv(fl, "lease", "FERRY_LEASE")
	fl.DurationVar(&f.publishTimeout, "publish-timeout", ferry.DefaultPublishTimeout, "bound on one batch's publish and confirms (< lease)")
	bindEnv(fl, "publish-timeout", "FERRY_PUBLISH_TIMEOUT")
	fl.IntVar(&f.maxAttempts, "max-attempts", ferry.DefaultMaxAttempts, "attempts before an event goes DEAD")
	bindEnv(fl, "max-attempts", "FERRY_MAX_ATTEMPTS")
	fl.DurationVar(&f.retryInitial, "retry-initial", ferry.DefaultRetryInitial, "delay after the first failed attempt (doubles, with jitter)")
	bindEnv(fl, "retry-initial", "FERRY_RETRY_INITIAL")
	fl.DurationVar(&f.retryMax, "retry-max", ferry.DefaultRetryMax, "longest delay between attempts")
	bindEnv(fl, "retry-max", "FERRY_RETRY_MAX")
	fl.DurationVar(&f.sweepInterval, "sweep-interval", ferry.DefaultSweepInterval, "how often expired leases are returned to NEW")
	bindEnv(fl, "sweep-interval", "FERRY_SWEEP_INTERVAL")
	fl.DurationVar(&f.retention, "retention", 0, "delete SENT events older than this (0 keeps them)")
	bindEnv(fl, "retention", "FERRY_RETENTION")
	envString(fl, &f.stream, "stream", "FERRY_NATS_STREAM", "", "JetStream stream to verify (or declare)")
	envString(fl, &f.subjects, "subjects", "FERRY_NATS_SUBJECTS", "", "comma-separated subjects of --stream")
	fl.IntVar(&f.streamReplicas, "stream-replicas", 1, "replicas of a declared --stream, 1 to 5 (3 on a 3-node JetStream cluster: see ferry doctor)")
	bindEnv(fl, "stream-replicas", "FERRY_NATS_STREAM_REPLICAS")
	fl.BoolVar(&f.declare, "declare", false,
		"declare the broker topology at start: --stream with --subjects (NATS); --exchange, --queue, --routing-key (RabbitMQ); --topics (Kafka)")
	bindEnv(fl, "declare", "FERRY_DECLARE", "FERRY_NATS_DECLARE")
	envString(fl, &f.exchange, "exchange", "FERRY_AMQP_EXCHANGE", "", "RabbitMQ exchange for events that name none (default amq.topic)")
	envString(fl, &f.exchangeType, "exchange-type", "FERRY_AMQP_EXCHANGE_TYPE", "topic", "kind of a declared --exchange: topic, direct, fanout, headers")
	envString(fl, &f.queue, "queue", "FERRY_AMQP_QUEUE", "", "RabbitMQ queue to verify (or declare, bound with --routing-key)")
	envString(fl, &f.queueType, "queue-type", "FERRY_AMQP_QUEUE_TYPE", "quorum", "type of a declared --queue: quorum or classic")
	fl.StringSliceVar(&f.routingKeys, "routing-key", nil, "binding of --queue to --exchange (repeatable; topic patterns allowed)")
	bindEnv(fl, "routing-key", "FERRY_AMQP_ROUTING_KEYS")
	fl.IntVar(&f.confirmWindow, "confirm-window", 1000, "RabbitMQ publishes awaiting their confirms, per channel")
	bindEnv(fl, "confirm-window", "FERRY_AMQP_CONFIRM_WINDOW")
	envString(fl, &f.managementURL, "management-url", "FERRY_AMQP_MANAGEMENT_URL", "",
		"RabbitMQ's management API, http://user:pass@host:15672 (https:// for TLS; several nodes' APIs comma-separated, the first that answers is read): "+
			"what --queue's type makes a confirm worth (ferry doctor)")
	envString(fl, &f.topics, "topics", "FERRY_KAFKA_TOPICS", "", "comma-separated Kafka topics to verify (or declare) at start")
	envString(fl, &f.topicFrom, "topic-from", "FERRY_KAFKA_TOPIC_FROM", string(ferrykafka.TopicFromEventType),
		"Kafka topic of an event without a destination: event-type or aggregate-type")
	envString(fl, &f.topicPrefix, "topic-prefix", "FERRY_KAFKA_TOPIC_PREFIX", "", "put before every derived Kafka topic (never before a destination)")
	envString(fl, &f.messageFormat, "message-format", "FERRY_MESSAGE_FORMAT", "ferry",
		"how events travel: ferry (ferry's headers), cloudevents (CloudEvents, binary content mode) or cloudevents-structured (a JSON envelope)")
	fl.StringSliceVar(&f.formatFor, "message-format-for", nil,
		"DESTINATION=FORMAT: the --message-format of one destination (routing key, subject or topic), e.g. orders.paid=ferry (repeatable)")
	bindEnv(fl, "message-format-for", "FERRY_MESSAGE_FORMAT_FOR")
	envString(fl, &f.ceSource, "cloudevents-source", "FERRY_CLOUDEVENTS_SOURCE", "",
		"the CloudEvents source of every event, a URI-reference naming the service or the table (required with --message-format cloudevents)")
	fl.IntVar(&f.partitions, "partitions", -1, "partitions of a declared Kafka topic (-1: the brokers' num.partitions)")
	bindEnv(fl, "partitions", "FERRY_KAFKA_PARTITIONS")
	fl.IntVar(&f.replication, "replication-factor", -1, "replicas of a declared Kafka topic (-1: the brokers' default.replication.factor)")
	bindEnv(fl, "replication-factor", "FERRY_KAFKA_REPLICATION_FACTOR")
	fl.IntVar(&f.minInsync, "min-insync-replicas", -1,
		"min.insync.replicas of a declared Kafka topic (-1: the brokers' default, usually 1; 2 with --replication-factor 3: see ferry doctor)")
	bindEnv(fl, "min-insync-replicas", "FERRY_KAFKA_MIN_INSYNC_REPLICAS")
	envString(fl, &f.requireDurability, "require-durability", "FERRY_REQUIRE_DURABILITY", "",
		"exit 2 at start when a destination's confirm is below this level: replicated, single, volatile (default: a warning, see ferry doctor)")
	fl.BoolVar(&f.drain, "drain", false, "exit once no event is NEW or SENDING (exit code 3 if --drain-timeout passes first, 6 if events went DEAD, 7 if the table is missing or behind)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 5*time.Minute, "longest a --drain run waits")
	fl.DurationVar(&f.drainProgress, "progress-interval", defaultProgressInterval,
		"with --drain: print progress on stderr (pending left, sent so far, rate) this often (0: never)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stop waits for batches in flight")
	fl.DurationVar(&f.statsInterval, "stats-interval", 0, "log the relay's counters this often (0: only when it stops)")
	bindEnv(fl, "shutdown-timeout", "FERRY_SHUTDOWN_TIMEOUT")
	envString(fl, &f.httpAddr, "http-addr", "FERRY_HTTP_ADDR", "", "serve /metrics, /healthz and /readyz on this address, e.g. :9090 (default off)")
	fl.DurationVar(&f.metricsInterval, "metrics-interval", 15*time.Second, "how often the outbox gauges are read from the database")
	bindEnv(fl, "metrics-interval", "FERRY_METRICS_INTERVAL")
	fl.IntVar(&f.metricsDests, "metrics-destinations", 0, "also export pending counts and age per destination, for this many destinations (one more query per interval)")
	bindEnv(fl, "metrics-destinations", "FERRY_METRICS_DESTINATIONS")
	fl.DurationVar(&f.readyTimeout, "ready-timeout", 2*time.Second, "how long /readyz waits for the database and the broker")
	bindEnv(fl, "ready-timeout", "FERRY_READY_TIMEOUT")
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 30*time.Second,
		"how long the relay keeps trying to reach the database and the broker at start before it exits 1 (0: one try); "+
			"the default applies with --drain, while a relay without --drain keeps trying as long as it runs unless this is set")
	bindEnv(fl, "connect-timeout", "FERRY_CONNECT_TIMEOUT")
	fl.DurationVar(&f.heartbeat, "heartbeat", ferry.DefaultHeartbeat,
		"how often the relay records itself in <table>_relay, for ferry status (0: never)")
	bindEnv(fl, "heartbeat", "FERRY_HEARTBEAT")
	envString(fl, &f.relayID, "relay-id", "FERRY_RELAY_ID", "", "the relay's name in <table>_relay (default host-pid-random)")
	envString(fl, &f.source, "source", "FERRY_SOURCE", "poll",
		"where the relay learns of new events: poll (probe the table) or log (the database's binlog or logical replication)")
	envString(fl, &f.logSlot, "log-slot", "FERRY_LOG_SLOT", "", "PostgreSQL replication slot of --source log (default ferry_<table>)")
	envString(fl, &f.logPublication, "log-publication", "FERRY_LOG_PUBLICATION", "",
		"PostgreSQL publication of --source log (default ferry_<table>)")
	fl.DurationVar(&f.logLease, "log-lease", ferry.DefaultLogLease,
		"with --source log: how long the log reader's lease lasts; a standby takes over within it")
	bindEnv(fl, "log-lease", "FERRY_LOG_LEASE")
	fl.DurationVar(&f.logPollInterval, "log-poll-interval", ferry.DefaultLogPollInterval,
		"with --source log: how often the reader still probes the table (retries recorded by other relays), and a standby does")
	bindEnv(fl, "log-poll-interval", "FERRY_LOG_POLL_INTERVAL")
	return cmd
}

// checkRelayFlags checks the relay's flags against the limits the relay
// sets (ferry.RelayConfig), so that an error names the flag, not the
// library's field. Each limit is the library's.
func checkRelayFlags(f *relayFlags) error {
	switch {
	case f.batchSize > 10000:
		return usageError{fmt.Errorf("--batch-size %d: at most 10000", f.batchSize)}
	case f.lanes > 64:
		return usageError{fmt.Errorf("--lanes %d: at most 64", f.lanes)}
	case f.tableLanes > 1024:
		return usageError{fmt.Errorf("--table-lanes %d: at most 1024", f.tableLanes)}
	case f.pollInterval < time.Millisecond:
		return usageError{fmt.Errorf("--poll-interval %s: at least 1ms", f.pollInterval)}
	case f.minPollInterval < 100*time.Microsecond:
		return usageError{fmt.Errorf("--min-poll-interval %s: at least 100µs", f.minPollInterval)}
	case f.publishTimeout >= f.lease:
		return usageError{fmt.Errorf("--publish-timeout %s must be shorter than --lease %s: a claim must outlast its publish",
			f.publishTimeout, f.lease)}
	case len(f.relayID) > ferrystore.MaxRelayIDLen:
		return usageError{fmt.Errorf("--relay-id is %d bytes: at most %d", len(f.relayID), ferrystore.MaxRelayIDLen)}
	case f.heartbeat > 0 && 3*f.heartbeat > ferry.DefaultForgetAfter:
		return usageError{fmt.Errorf("--heartbeat %s: at most %s (a third of the %s after which the rows of relays gone are deleted)",
			f.heartbeat, ferry.DefaultForgetAfter/3, ferry.DefaultForgetAfter)}
	case f.source == "log" && (f.logLease < time.Second || f.logLease <= 3*ferry.DefaultLogCheckpointInterval):
		return usageError{fmt.Errorf("--log-lease %s: at least 1s", f.logLease)}
	}
	return nil
}

// relayGCPercent is the garbage collector's target of ferry relay when the
// environment sets no GOGC. A relay's live heap is small (a few batches in
// flight) and each event allocates its row, its JSON check and its
// message: at Go's default of 100 a relay process collected several times
// a second, for 15-20 % of its CPU per event. At 400 it collects a quarter
// as often; ferry bench measured the drain of 4 relay processes on MariaDB
// at 49 against 57 µs of relay CPU per event (ordered 52 against 65), and
// each process's peak RSS at 45 against 34 MB.
const relayGCPercent = 400

// relayGC sets relayGCPercent unless GOGC says otherwise.
func relayGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(relayGCPercent)
	}
}

func runRelay(cmd *cobra.Command, g *globals, f *relayFlags) error {
	// The fault points of the relay and its publisher
	// (ferryfault.PublishBeforeConfirm) fire through the context they
	// start with (a test's crash points; never set in production).
	ctx := ferryfault.With(cmd.Context(), g.faultPoint)
	relayGC()
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	// Zero means "the default" in RelayConfig; on the command line it is a
	// mistake worth saying so.
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"--batch-size", f.batchSize >= 1}, {"--lanes", f.lanes >= 1}, {"--table-lanes", f.tableLanes >= 1}, {"--max-attempts", f.maxAttempts >= 1},
		{"--poll-interval", f.pollInterval > 0}, {"--min-poll-interval", f.minPollInterval > 0},
		{"--lease", f.lease > 0}, {"--publish-timeout", f.publishTimeout > 0},
		{"--retry-initial", f.retryInitial > 0}, {"--retry-max", f.retryMax > 0}, {"--retention", f.retention >= 0},
		{"--sweep-interval", f.sweepInterval > 0},
		{"--metrics-interval", f.metricsInterval > 0}, {"--ready-timeout", f.readyTimeout > 0},
		{"--metrics-destinations", f.metricsDests >= 0}, {"--connect-timeout", f.connectTimeout >= 0},
		{"--heartbeat", f.heartbeat >= 0}, {"--log-lease", f.logLease > 0}, {"--log-poll-interval", f.logPollInterval > 0},
	} {
		if !c.ok {
			return usageError{fmt.Errorf("%s must be positive", c.name)}
		}
	}
	if err := checkRelayFlags(f); err != nil {
		return err
	}
	bc, err := brokerConfig(f, log)
	if err != nil {
		return err
	}
	durability, err := requiredDurability(f.requireDurability)
	if err != nil {
		return err
	}
	rc := &ferry.RelayConfig{
		BatchSize: f.batchSize, Lanes: f.lanes, TableLanes: f.tableLanes, Ordered: f.ordered, PollInterval: f.pollInterval,
		MinPollInterval: f.minPollInterval,
		Lease:           f.lease, PublishTimeout: f.publishTimeout, Retention: f.retention, SweepInterval: f.sweepInterval,
		Retry:  ferry.ExponentialBackoff{Initial: f.retryInitial, Max: f.retryMax, MaxAttempts: f.maxAttempts},
		Logger: log, ID: f.relayID,
		Heartbeat: ferry.HeartbeatConfig{Interval: f.heartbeat, Version: buildInfo().Version, Broker: ferrytype.RedactURL(f.brokerURL)},
	}
	if f.heartbeat == 0 {
		rc.Heartbeat.Interval = -1 // 0 on the command line: no heartbeat
	}
	switch f.source {
	case "poll":
	case "log":
		rc.Log.Feed, err = open.Feed(g.databaseURL, g.table, &open.FeedConfig{Slot: f.logSlot, Publication: f.logPublication,
			Logger: log})
		if err != nil {
			return err
		}
		rc.Log.Lease, rc.Log.PollInterval = f.logLease, f.logPollInterval
	default:
		return usageError{fmt.Errorf("--source %q: want poll or log", f.source)}
	}
	if err := validateRelayConfig(rc); err != nil {
		return err
	}
	// The endpoints first, so that a probe has an answer while the
	// database, the schema or the broker is missing; then each of them in
	// turn. A relay started during an outage (a restart, a rollout) waits
	// for them: see connectWait.
	deps := &relayDeps{}
	wait := connectWait(g, f)
	var ops *relayOps
	if f.httpAddr != "" {
		if ops, err = startRelayOps(f, deps, open.BrokerSystem(f.brokerURL), log); err != nil {
			return err
		}
		defer ops.stop(ctx)
	}
	store, err := openRelayStore(ctx, g, wait, deps, log)
	if err != nil {
		return stoppedOr(ctx, f.drain, err)
	}
	defer store.Close()
	if ops != nil {
		if err := ops.watchOutbox(ctx, f, store); err != nil {
			return err
		}
		defer ops.stopOutbox(ctx)
	}
	if err := awaitSchema(ctx, store, wait == foreverWait, deps, log); err != nil {
		return stoppedOr(ctx, f.drain, err)
	}
	pub, err := openRelayPublisher(ctx, f.brokerURL, bc, wait, deps, log)
	if err != nil {
		return stoppedOr(ctx, f.drain, err)
	}
	defer pub.Close()
	if err := checkDurability(ctx, pub, durability, log); err != nil {
		return err
	}
	var hooks []ferry.Hook
	tracing, stopTracing, err := setupTracing(ctx, open.BrokerSystem(f.brokerURL), log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("tracing: flush at exit failed", "error", err)
		}
	}()
	if tracing != nil {
		hooks = append(hooks, tracing)
	}
	if ops != nil {
		hooks = append(hooks, ops.metrics)
	}
	rc.Hooks = hooks
	relay, err := ferry.NewRelay(store, pub, rc)
	if err != nil {
		return err
	}
	if f.drain {
		dctx, cancel := context.WithTimeout(ctx, f.drainTimeout)
		defer cancel()
		stopProgress := drainProgress(dctx, cmd.ErrOrStderr(), f.drainProgress, store, relay)
		res, err := relay.Drain(dctx)
		stopProgress()
		st := relay.Stats()
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %d published (%s dropped by the broker), %d retried; left: %d new, %d sending, %d dead\n",
			store.Table(), st.Confirmed, plural(st.Duplicates, "duplicate"), st.Retried, res.Stats.New, res.Stats.Sending, res.Stats.Dead)
		if errors.Is(err, ferry.ErrDrainIncomplete) {
			return exitError{exitIncomplete, err}
		}
		if err == nil && st.Dead > 0 {
			return exitError{exitDeadLeft, fmt.Errorf("%s went DEAD during the drain: see ferry dead list", plural(st.Dead, "event"))}
		}
		return err
	}
	// A log relay checks the database's log at start (a replication
	// connection): during an outage that waits as the database does; a
	// database not set up for it (ferrystore.ErrLogSetup) exits 2 at once.
	if _, err := connect(ctx, wait, "database's log", log, func() (struct{}, error) {
		return struct{}{}, relay.Start(ctx)
	}); err != nil {
		return stoppedOr(ctx, false, err)
	}
	if f.statsInterval > 0 {
		statsCtx, stopStats := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			logStats(statsCtx, log, f.statsInterval, relay)
		}()
		defer func() { stopStats(); <-done }()
	}
	<-ctx.Done()
	log.Info("stopping: finishing batches in flight", "timeout", f.shutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	if err := relay.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil // the relay logged "relay stopped" with its counts
}

// drainProgress prints a --drain run's progress on w every interval (0:
// never) until the returned function is called: what is left to send,
// what was sent, and the rate since the start. What is left is a count of
// the table (countLeft): of several relays draining one table, only the
// one that leads its maintenance counts it, the others print what they
// sent.
func drainProgress(ctx context.Context, w io.Writer, interval time.Duration, store ferrystore.Admin, relay *ferry.Relay) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p := newProgress(w, interval)
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !relay.Leading() {
				rs := relay.Stats()
				p.printf("drain: %d sent, %d dead, %s (the relay leading the table's maintenance counts what is left)",
					rs.Confirmed, rs.Dead, p.rate(rs.Confirmed))
				continue
			}
			newN, sending, err := countLeft(ctx, store)
			if err != nil {
				if ctx.Err() == nil {
					p.printf("drain: %d sent so far; the count of what is left failed: %v", relay.Stats().Confirmed, err)
				}
				continue
			}
			rs := relay.Stats()
			p.printf("drain: %d left (%d new, %d sending), %d sent, %d dead, %s", newN+sending, newN, sending,
				rs.Confirmed, rs.Dead, p.rate(rs.Confirmed))
		}
	}()
	return func() { cancel(); <-done }
}

// countLeft counts the NEW and SENDING events from the pending index alone
// (Admin.CountByStatus), without Store.Stats's look at the events next in
// line.
func countLeft(ctx context.Context, store ferrystore.Admin) (newN, sending int64, err error) {
	n, err := store.CountByStatus(ctx, ferrytype.StatusNew, ferrytype.StatusSending)
	return n[ferrytype.StatusNew], n[ferrytype.StatusSending], err
}

// logStats logs the relay's counters every interval until ctx ends.
func logStats(ctx context.Context, log *slog.Logger, interval time.Duration, relay *ferry.Relay) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := relay.Stats()
		log.Info("relay stats", "claimed", st.Claimed, "confirmed", st.Confirmed, "duplicates", st.Duplicates,
			"unknown", st.Unknown, "returned", st.Returned, "rejected", st.Rejected, "retried", st.Retried,
			"dead", st.Dead, "fenced", st.Fenced, "swept", st.Swept, "purged", st.Purged, "errors", st.Errors)
	}
}

// brokerConfig turns the broker flags into the publisher settings of the
// broker --broker-url names, refusing flags of the other brokers. A URL of
// no known broker gets the NATS settings: opening it says what is wrong.
func brokerConfig(f *relayFlags, log *slog.Logger) (*open.BrokerConfig, error) {
	subjects, topics := commaList(f.subjects), commaList(f.topics)
	system := open.BrokerSystem(f.brokerURL)
	for _, c := range []struct {
		name, system, kind string
		set                bool
	}{
		{"--stream", "nats", "NATS (nats:// broker URLs)", f.stream != ""},
		{"--subjects", "nats", "NATS (nats:// broker URLs)", len(subjects) > 0},
		{"--stream-replicas", "nats", "NATS (nats:// broker URLs)", f.streamReplicas != 1},
		{"--exchange", "rabbitmq", "RabbitMQ (amqp:// broker URLs)", f.exchange != ""},
		{"--queue", "rabbitmq", "RabbitMQ (amqp:// broker URLs)", f.queue != ""},
		{"--routing-key", "rabbitmq", "RabbitMQ (amqp:// broker URLs)", len(f.routingKeys) > 0},
		{"--management-url", "rabbitmq", "RabbitMQ (amqp:// broker URLs)", f.managementURL != ""},
		{"--topics", "kafka", "Kafka (kafka:// broker URLs)", len(topics) > 0},
		{"--topic-from", "kafka", "Kafka (kafka:// broker URLs)", f.topicFrom != string(ferrykafka.TopicFromEventType)},
		{"--topic-prefix", "kafka", "Kafka (kafka:// broker URLs)", f.topicPrefix != ""},
		{"--partitions", "kafka", "Kafka (kafka:// broker URLs)", f.partitions != -1},
		{"--replication-factor", "kafka", "Kafka (kafka:// broker URLs)", f.replication != -1},
		{"--min-insync-replicas", "kafka", "Kafka (kafka:// broker URLs)", f.minInsync != -1},
	} {
		if c.set && c.system != system && (system != "" || c.system != "nats") {
			return nil, usageError{fmt.Errorf("%s applies to %s", c.name, c.kind)}
		}
	}
	enc, err := messageEncoding(f, system)
	if err != nil {
		return nil, err
	}
	switch system {
	case "rabbitmq":
		bc, err := amqpConfig(f, log)
		if bc != nil {
			bc.AMQP.Encoding = enc
		}
		return bc, err
	case "kafka":
		bc, err := kafkaConfig(f, topics, log)
		if bc != nil {
			bc.Kafka.Encoding = enc
		}
		return bc, err
	}
	switch {
	case f.declare && f.stream == "":
		return nil, usageError{errors.New("--declare with NATS needs --stream and --subjects: the stream to create or update")}
	case f.declare && len(subjects) == 0:
		return nil, usageError{fmt.Errorf("--declare with NATS needs --subjects: the subjects of stream %s", f.stream)}
	case f.streamReplicas < 1 || f.streamReplicas > 5:
		return nil, usageError{fmt.Errorf("--stream-replicas %d: want 1 to 5, JetStream's bounds", f.streamReplicas)}
	case f.streamReplicas != 1 && !f.declare:
		return nil, usageError{errors.New("--stream-replicas applies to a stream ferry declares (--declare)")}
	}
	return &open.BrokerConfig{NATS: open.NATSConfig{Stream: f.stream, Subjects: subjects, Declare: f.declare,
		Replicas: f.streamReplicas, Encoding: enc}, Logger: log}, nil
}

// messageEncoding is the publisher's Encoding that --message-format,
// --message-format-for and --cloudevents-source name: nil for ferry's own
// form everywhere.
func messageEncoding(f *relayFlags, system string) (ferrybroker.Encoding, error) {
	mode, err := formatMode("--message-format", f.messageFormat)
	if err != nil {
		return nil, err
	}
	dests := map[string]ferrycloudevents.Mode{}
	cloud := mode != ferrycloudevents.Ferry
	for _, kv := range f.formatFor {
		dest, format, ok := strings.Cut(kv, "=")
		if dest = strings.TrimSpace(dest); !ok || dest == "" {
			return nil, usageError{fmt.Errorf("--message-format-for %q: want DESTINATION=FORMAT, e.g. orders.paid=cloudevents", kv)}
		}
		m, err := formatMode("--message-format-for "+dest, strings.TrimSpace(format))
		if err != nil {
			return nil, err
		}
		if _, dup := dests[dest]; dup {
			return nil, usageError{fmt.Errorf("--message-format-for names %s twice", dest)}
		}
		dests[dest] = m
		cloud = cloud || m != ferrycloudevents.Ferry
	}
	if !cloud {
		if f.ceSource != "" {
			return nil, usageError{errors.New("--cloudevents-source applies to --message-format cloudevents or cloudevents-structured")}
		}
		return nil, nil
	}
	what := "--message-format " + f.messageFormat
	if mode == ferrycloudevents.Ferry {
		what = "--message-format-for"
	}
	if system == "redis" {
		return nil, usageError{errors.New(what + " applies to RabbitMQ, NATS and Kafka, not Redis")}
	}
	if f.ceSource == "" {
		return nil, usageError{errors.New(what +
			" needs --cloudevents-source: a URI-reference naming the service or the table, such as /orders-service")}
	}
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: f.ceSource, Mode: mode, Destinations: dests})
	if err != nil {
		return nil, usageError{err}
	}
	return enc, nil
}

// formatMode reads a --message-format value.
func formatMode(flag, v string) (ferrycloudevents.Mode, error) {
	switch v {
	case "ferry", "":
		return ferrycloudevents.Ferry, nil
	case "cloudevents":
		return ferrycloudevents.Binary, nil
	case "cloudevents-structured":
		return ferrycloudevents.Structured, nil
	}
	return "", usageError{fmt.Errorf("%s %q: want ferry, cloudevents or cloudevents-structured", flag, v)}
}

// commaList splits a comma-separated flag value, dropping empty items.
func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// amqpConfig is brokerConfig for RabbitMQ.
func amqpConfig(f *relayFlags, log *slog.Logger) (*open.BrokerConfig, error) {
	if f.confirmWindow < 1 {
		return nil, usageError{errors.New("--confirm-window must be positive")}
	}
	cfg := open.AMQPConfig{Exchange: f.exchange, ExchangeKind: f.exchangeType, Declare: f.declare,
		Window: f.confirmWindow, ManagementURL: f.managementURL, Logger: log}
	if f.queue == "" {
		if len(f.routingKeys) > 0 {
			return nil, usageError{errors.New("--routing-key needs --queue")}
		}
		return &open.BrokerConfig{AMQP: cfg}, nil
	}
	qt := ferryamqp.QueueType(f.queueType)
	if qt != ferryamqp.QueueQuorum && qt != ferryamqp.QueueClassic {
		return nil, usageError{fmt.Errorf("--queue-type %q: want quorum or classic", f.queueType)}
	}
	if f.declare && len(f.routingKeys) == 0 {
		return nil, usageError{errors.New("--declare with --queue needs at least one --routing-key: an unbound queue receives nothing")}
	}
	cfg.Topology.Queues = []ferryamqp.Queue{{Name: f.queue, Type: qt}}
	for _, rk := range f.routingKeys {
		cfg.Topology.Bindings = append(cfg.Topology.Bindings, ferryamqp.Binding{Queue: f.queue, RoutingKey: rk})
	}
	return &open.BrokerConfig{AMQP: cfg}, nil
}

// kafkaConfig is brokerConfig for Kafka. ferrykafka checks the topic names
// before it connects.
func kafkaConfig(f *relayFlags, topics []string, log *slog.Logger) (*open.BrokerConfig, error) {
	from := ferrykafka.TopicFrom(f.topicFrom)
	switch {
	case from != ferrykafka.TopicFromEventType && from != ferrykafka.TopicFromAggregateType:
		return nil, usageError{fmt.Errorf("--topic-from %q: want %s or %s", f.topicFrom,
			ferrykafka.TopicFromEventType, ferrykafka.TopicFromAggregateType)}
	case f.partitions == 0 || f.partitions < -1 || f.partitions > math.MaxInt32:
		return nil, usageError{fmt.Errorf("--partitions %d: want a positive number, or -1 for the brokers' default", f.partitions)}
	case f.replication == 0 || f.replication < -1 || f.replication > math.MaxInt16:
		return nil, usageError{fmt.Errorf("--replication-factor %d: want a positive number up to %d, or -1 for the brokers' default",
			f.replication, math.MaxInt16)}
	case f.declare && len(topics) == 0:
		return nil, usageError{errors.New("--declare with Kafka needs --topics: the topics to create when missing")}
	case f.minInsync == 0 || f.minInsync < -1 || f.minInsync > math.MaxInt16:
		return nil, usageError{fmt.Errorf("--min-insync-replicas %d: want a positive number, or -1 for the brokers' default", f.minInsync)}
	case f.minInsync > 0 && f.replication > 0 && f.minInsync > f.replication:
		return nil, usageError{fmt.Errorf("--min-insync-replicas %d is above --replication-factor %d: the brokers would refuse every write",
			f.minInsync, f.replication)}
	}
	return &open.BrokerConfig{Kafka: open.KafkaConfig{TopicFrom: from, TopicPrefix: f.topicPrefix, Topics: topics,
		Declare: f.declare, Partitions: int32(f.partitions), ReplicationFactor: int16(f.replication),
		MinInsyncReplicas: f.minInsync, Logger: log}}, nil
}

// connect calls dial until it succeeds, fails with a configuration error
// or a cause no retry mends (open.Permanent), ctx ends or timeout passes
// (never when timeout is negative), waiting 200ms, then twice as long each
// time up to 5s, between tries. Each failure is logged; the last one is
// returned.
func connect[T any](ctx context.Context, timeout time.Duration, what string, log *slog.Logger, dial func() (T, error)) (T, error) {
	deadline := time.Now().Add(timeout)
	wait := 200 * time.Millisecond
	for {
		v, err := dial()
		if err == nil || errors.Is(err, ferrytype.ErrInvalidConfig) || errors.Is(err, ferrytype.ErrInvalidIdentifier) ||
			errors.Is(err, ferrystore.ErrLogSetup) || errors.Is(err, ferry.ErrClosed) {
			return v, err
		}
		if perr := open.Permanent(err); perr != nil {
			return v, perr
		}
		if timeout >= 0 && time.Now().Add(wait).After(deadline) {
			return v, err
		}
		log.Warn("cannot reach the "+what+"; retrying", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// stoppedOr returns nil when a daemon's ctx ended (SIGTERM while it waited
// for a dependency: a clean stop), else err. A --drain run that did not
// drain never exits 0.
func stoppedOr(ctx context.Context, drain bool, err error) error {
	if ctx.Err() != nil && !drain {
		return nil
	}
	return err
}
