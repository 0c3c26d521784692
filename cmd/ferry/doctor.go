package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/internal/open"
)

// durabilityTimeout bounds the reading of what a broker's confirm is worth.
const durabilityTimeout = 10 * time.Second

type doctorFlags struct {
	relay relayFlags
	json  bool
}

func newDoctor(g *globals) *cobra.Command {
	f := &doctorFlags{relay: relayFlags{exchangeType: "topic", queueType: "quorum", confirmWindow: 1000,
		topicFrom: string(ferrykafka.TopicFromEventType), partitions: -1, replication: -1, messageFormat: "ferry", streamReplicas: 1, minInsync: -1}}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Say what the broker's confirm of each destination is worth",
		Long: `Reads from the broker what its settings make a confirm mean for each
destination the relay publishes to, and prints one row per destination: the
level (replicated, single, volatile, unknown), what was read, and what to
change for a replicated guarantee. The relay marks an event SENT on the
confirm: a confirm given before the message is safe on more than one node is
the weak link of the chain.

  RabbitMQ  --queue, and --management-url (the management API: AMQP 0-9-1
            cannot tell a queue's type): quorum queue of 3 members or more,
            a majority online, is replicated; classic or 1 member, single
  NATS      --stream: R3 file storage is replicated, R1 single, memory
            storage volatile (JetStream fsyncs every sync_interval unless
            the server sets it to always)
  Kafka     --topics: min.insync.replicas 2 or more (replication factor 3
            keeps writes going with a broker down) with acks from all
            in-sync replicas (ferry's default) is replicated

It takes the relay's settings (flags, FERRY_* variables, the relay: section
of --config), and changes nothing. With --require-durability it exits 2 when
a destination is below that level, as ferry relay does at start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDoctor(cmd, g, f) },
	}
	fl := cmd.Flags()
	r := &f.relay
	shared := func(p *string, name, env, usage string) {
		fl.StringVar(p, name, "", usage)
		bindShared(fl, name, env, "relay."+strings.ReplaceAll(name, "-", "_"))
	}
	shared(&r.brokerURL, "broker-url", "FERRY_BROKER_URL", "broker URL, as ferry relay takes it")
	shared(&r.stream, "stream", "FERRY_NATS_STREAM", "the JetStream stream the events go to")
	shared(&r.exchange, "exchange", "FERRY_AMQP_EXCHANGE", "the RabbitMQ exchange of events that name none (default amq.topic)")
	shared(&r.queue, "queue", "FERRY_AMQP_QUEUE", "the RabbitMQ queue the events go to")
	shared(&r.managementURL, "management-url", "FERRY_AMQP_MANAGEMENT_URL",
		"RabbitMQ's management API, http://user:pass@host:15672 (https:// for TLS; several nodes' APIs comma-separated), to read --queue's type")
	shared(&r.topics, "topics", "FERRY_KAFKA_TOPICS", "comma-separated Kafka topics the events go to")
	shared(&r.requireDurability, "require-durability", "FERRY_REQUIRE_DURABILITY",
		"exit 2 when a destination is below this level: replicated, single, volatile")
	fl.BoolVar(&f.json, "json", false, "print the rows as JSON")
	return cmd
}

func runDoctor(cmd *cobra.Command, g *globals, f *doctorFlags) error {
	ctx := cmd.Context()
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if f.relay.brokerURL == "" {
		return usageError{errors.New("--broker-url is required")}
	}
	want, err := requiredDurability(f.relay.requireDurability)
	if err != nil {
		return err
	}
	bc, err := brokerConfig(&f.relay, log)
	if err != nil {
		return err
	}
	pub, err := open.Publisher(ctx, f.relay.brokerURL, bc)
	if err != nil {
		return err
	}
	defer pub.Close()
	rows, err := readDurability(ctx, pub)
	if err != nil {
		return err
	}
	if f.json {
		if err := writeJSON(cmd.OutOrStdout(), rows); err != nil {
			return err
		}
	} else {
		printDurability(cmd.OutOrStdout(), rows)
	}
	return belowDurability(rows, want)
}

// readDurability asks pub what its confirms are worth, within
// durabilityTimeout. A publisher that cannot tell (Redis Streams) is one
// row of DurabilityUnknown.
func readDurability(ctx context.Context, pub ferrybroker.Publisher) ([]ferrybroker.Durability, error) {
	dr, ok := pub.(ferrybroker.DurabilityReader)
	if !ok {
		return []ferrybroker.Durability{{Destination: "broker", Level: ferrybroker.DurabilityUnknown,
			Settings: "this broker's publisher does not read its settings"}}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, durabilityTimeout)
	defer cancel()
	rows, err := dr.Durability(ctx)
	if err != nil {
		return nil, fmt.Errorf("read what the broker's confirm is worth: %w", err)
	}
	return rows, nil
}

func printDurability(w io.Writer, rows []ferrybroker.Durability) {
	lines := make([]string, 0, len(rows))
	for _, r := range rows {
		lines = append(lines, r.Destination+"\t"+string(r.Level)+"\t"+r.Settings+"\t"+r.Fix)
	}
	table(w, "", "DESTINATION\tLEVEL\tSETTINGS\tFIX", lines)
}

// requiredDurability reads --require-durability: "" requires nothing.
func requiredDurability(v string) (ferrybroker.DurabilityLevel, error) {
	if v == "" {
		return "", nil
	}
	l, err := ferrybroker.ParseDurabilityLevel(v)
	if err != nil || l == ferrybroker.DurabilityUnknown {
		return "", usageError{fmt.Errorf("--require-durability %q: want replicated, single or volatile", v)}
	}
	return l, nil
}

// belowDurability is the error (exit code 2) naming the rows below want,
// nil when want is "" or every row holds it.
func belowDurability(rows []ferrybroker.Durability, want ferrybroker.DurabilityLevel) error {
	if want == "" {
		return nil
	}
	var below []string
	for _, r := range rows {
		if !r.Level.AtLeast(want) {
			below = append(below, fmt.Sprintf("%s is %s (%s)", r.Destination, r.Level, r.Settings))
		}
	}
	if len(below) == 0 {
		return nil
	}
	return usageError{fmt.Errorf("--require-durability %s: %s", want, strings.Join(below, "; "))}
}

var levelWarning = map[ferrybroker.DurabilityLevel]string{
	ferrybroker.DurabilityUnknown:  "what a confirm is worth: the broker does not say",
	ferrybroker.DurabilityVolatile: "what a confirm is worth: a confirmed event may be in memory only",
	ferrybroker.DurabilitySingle:   "what a confirm is worth: a confirmed event is on one node only",
}

// checkDurability is the relay's start-up report: a WARN for each
// destination below replicated, naming the fix, an INFO for the others;
// with want set, an error (exit 2) when one is below it. A broker that
// cannot be asked is a WARN, and an error only with want set.
func checkDurability(ctx context.Context, pub ferrybroker.Publisher, want ferrybroker.DurabilityLevel, log *slog.Logger) error {
	rows, err := readDurability(ctx, pub)
	if err != nil {
		if want != "" {
			return usageError{fmt.Errorf("--require-durability %s: %w", want, err)}
		}
		log.Warn("cannot tell what the broker's confirm is worth", "error", err)
		return nil
	}
	for _, r := range rows {
		if r.Level == ferrybroker.DurabilityReplicated {
			log.Info("what a confirm is worth", "destination", r.Destination, "level", r.Level, "settings", r.Settings)
			continue
		}
		log.Warn(levelWarning[r.Level], "destination", r.Destination, "level", r.Level, "settings", r.Settings, "fix", r.Fix)
	}
	return belowDurability(rows, want)
}
