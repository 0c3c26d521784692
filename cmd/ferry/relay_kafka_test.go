package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// kafkaRelay is a SQLite outbox table and an in-process Kafka cluster.
type kafkaRelay struct {
	*opsBundle
	seeds []string
	url   string
}

func setupKafkaRelay(t *testing.T) *kafkaRelay {
	t.Helper()
	seeds := testsvc.Kafka(t)
	return &kafkaRelay{opsBundle: setupOps(t, "sqlite"), seeds: seeds, url: "kafka://" + strings.Join(seeds, ",")}
}

func (k *kafkaRelay) relay(t *testing.T, extra ...string) (int, string, string) {
	t.Helper()
	return k.cli(t, append([]string{"relay", "--broker-url", k.url, "--poll-interval", "50ms", "--drain",
		"--drain-timeout", "1m"}, extra...)...)
}

// checkRecords requires that records hold exactly the events ids, each
// keyed by its aggregate id (ids[i] has aggregate id aggs[i]).
func checkRecords(t *testing.T, records []*kgo.Record, ids, aggs []string) {
	t.Helper()
	require.Len(t, records, len(ids))
	want := map[string]string{}
	for i, id := range ids {
		want[id] = aggs[i]
	}
	for _, r := range records {
		var id string
		for _, h := range r.Headers {
			if h.Key == ferrybroker.HeaderEventID {
				id = string(h.Value)
			}
		}
		agg, ok := want[id]
		require.True(t, ok, "record with event id %q", id)
		require.Equal(t, agg, string(r.Key), "event %s is keyed by its aggregate id", id)
		delete(want, id)
	}
	require.Empty(t, want, "events not published")
}

// ferry relay publishes each event to its destination topic as one
// record keyed by its aggregate id; a topic named by --topics that does
// not exist stops it at start (exit 2, naming the topic) until --declare
// creates it.
func TestRelayCLIToKafka(t *testing.T) {
	t.Parallel()
	t.Run("DestinationTopic", func(t *testing.T) {
		k := setupKafkaRelay(t)
		topic := testsvc.KafkaTopic(t, k.seeds, 3)
		var events []ferry.Event
		var aggs []string
		for i := range 40 {
			aggs = append(aggs, fmt.Sprint(i%7))
			events = append(events, orderPaid(aggs[i], topic))
		}
		ids := k.enqueue(t, events...)
		code, out, errOut := k.relay(t, "--topics", topic)
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "40 published")
		require.Contains(t, out, "left: 0 new, 0 sending, 0 dead")
		checkRecords(t, testsvc.ReadKafka(t, k.seeds, topic, 40, time.Minute), ids, aggs)
	})

	t.Run("MissingTopicThenDeclared", func(t *testing.T) {
		k := setupKafkaRelay(t)
		prefix := testsvc.Name("ferry-") + "."
		topic := prefix + "OrderPaid"
		var events []ferry.Event
		var aggs []string
		for i := range 10 {
			aggs = append(aggs, fmt.Sprint(i%3))
			events = append(events, orderPaid(aggs[i], ""))
		}
		ids := k.enqueue(t, events...)

		code, out, errOut := k.relay(t, "--topic-prefix", prefix, "--topics", topic)
		require.Equal(t, exitUsage, code, "%s\n%s", out, errOut)
		require.Contains(t, errOut, "topic "+topic+" does not exist: create it, or let ferry declare it (--declare)")
		require.NotContains(t, errOut, "retrying", "a missing topic is no cause to wait for")

		code, out, errOut = k.relay(t, "--topic-prefix", prefix, "--topics", topic, "--declare",
			"--partitions", "4", "--replication-factor", "3", "--min-insync-replicas", "2")
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "10 published")
		checkRecords(t, testsvc.ReadKafka(t, k.seeds, topic, 10, time.Minute), ids, aggs)

		cl, err := kgo.NewClient(kgo.SeedBrokers(k.seeds...))
		require.NoError(t, err)
		defer cl.Close()
		details, err := kadm.NewClient(cl).ListTopics(testsvc.Context(t, 30*time.Second), topic)
		require.NoError(t, err)
		d := details[topic]
		require.NoError(t, d.Err)
		require.Len(t, d.Partitions, 4)
		require.Len(t, d.Partitions[0].Replicas, 3)
		configs, err := kadm.NewClient(cl).DescribeTopicConfigs(testsvc.Context(t, 30*time.Second), topic)
		require.NoError(t, err)
		mi, err := configs.On(topic, nil)
		require.NoError(t, err)
		var minInsync string
		for _, c := range mi.Configs {
			if c.Key == "min.insync.replicas" && c.Value != nil {
				minInsync = *c.Value
			}
		}
		require.Equal(t, "2", minInsync, "--min-insync-replicas 2")

		code, out, errOut = k.relay(t, "--topic-prefix", prefix, "--topics", topic)
		require.Equal(t, exitOK, code, "the declared topic passes the check: %s\n%s", out, errOut)
	})

	t.Run("CloudEvents", func(t *testing.T) {
		k := setupKafkaRelay(t)
		topic, plain := testsvc.KafkaTopic(t, k.seeds, 1), testsvc.KafkaTopic(t, k.seeds, 1)
		ids := k.enqueue(t, orderPaid("a", topic), orderPaid("b", topic))
		plainID := k.enqueue(t, orderPaid("c", plain))
		code, out, errOut := k.relay(t, "--topics", topic+","+plain, "--message-format", "cloudevents",
			"--cloudevents-source", "/orders-service", "--message-format-for", plain+"=ferry")
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		rec := testsvc.ReadKafka(t, k.seeds, plain, 1, time.Minute)[0]
		var ferryID string
		for _, h := range rec.Headers {
			require.False(t, strings.HasPrefix(h.Key, "ce_"), "--message-format-for %s=ferry: %s", plain, h.Key)
			if h.Key == ferrybroker.HeaderEventID {
				ferryID = string(h.Value)
			}
		}
		require.Equal(t, plainID[0], ferryID)
		recs := testsvc.ReadKafka(t, k.seeds, topic, 2, time.Minute)
		var got []string
		for _, r := range recs {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			require.Equal(t, "1.0", h["ce_specversion"])
			require.Equal(t, "/orders-service", h["ce_source"])
			require.Equal(t, "OrderPaid", h["ce_type"])
			require.Equal(t, string(r.Key), h["ce_subject"], "the subject is the aggregate id")
			require.Equal(t, "application/json", h["content-type"])
			require.NotContains(t, h, ferrybroker.HeaderEventID, "no ferry header in CloudEvents form")
			got = append(got, h["ce_id"])
		}
		require.ElementsMatch(t, ids, got)
	})

	t.Run("AggregateTypeTopic", func(t *testing.T) {
		k := setupKafkaRelay(t)
		prefix := testsvc.Name("ferry-") + "."
		topic := prefix + "order"
		ids := k.enqueue(t, orderPaid("a", ""), orderPaid("b", ""))
		code, out, errOut := k.relay(t, "--topic-prefix", prefix, "--topic-from", "aggregate-type", "--topics", topic, "--declare")
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		checkRecords(t, testsvc.ReadKafka(t, k.seeds, topic, 2, time.Minute), ids, []string{"a", "b"})
	})
}

// Flags of one broker given with another's URL, and bad Kafka flags, are
// usage errors found before anything is connected.
func TestRelayCLIKafkaUsageErrors(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	db := "sqlite:///" + t.TempDir() + "/x.db"
	amqpURL, natsURL, kafkaURL := "amqp://guest:guest@127.0.0.1:1/", "nats://127.0.0.1:1", "kafka://127.0.0.1:1"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"TopicsWithAMQP", []string{"--broker-url", amqpURL, "--topics", "orders"}, "--topics applies to Kafka (kafka:// broker URLs)"},
		{"PartitionsWithAMQP", []string{"--broker-url", amqpURL, "--partitions", "3"}, "--partitions applies to Kafka"},
		{"TopicFromWithNATS", []string{"--broker-url", natsURL, "--topic-from", "aggregate-type"}, "--topic-from applies to Kafka"},
		{"ReplicationWithNATS", []string{"--broker-url", natsURL, "--replication-factor", "3"}, "--replication-factor applies to Kafka"},
		{"QueueWithKafka", []string{"--broker-url", kafkaURL, "--queue", "q"}, "--queue applies to RabbitMQ"},
		{"StreamWithKafka", []string{"--broker-url", kafkaURL, "--stream", "S"}, "--stream applies to NATS"},
		{"DeclareWithoutTopics", []string{"--broker-url", kafkaURL, "--declare"}, "--declare with Kafka needs --topics"},
		{"BadTopicFrom", []string{"--broker-url", kafkaURL, "--topic-from", "type"}, `--topic-from "type": want event-type or aggregate-type`},
		{"ZeroPartitions", []string{"--broker-url", kafkaURL, "--partitions", "0"}, "--partitions 0: want a positive number"},
		{"ReplicationTooLarge", []string{"--broker-url", kafkaURL, "--replication-factor", "40000"}, "--replication-factor 40000"},
		{"BadMessageFormat", []string{"--broker-url", kafkaURL, "--message-format", "avro"}, `--message-format "avro": want ferry, cloudevents or cloudevents-structured`},
		{"CloudEventsWithoutSource", []string{"--broker-url", natsURL, "--message-format", "cloudevents"}, "needs --cloudevents-source"},
		{"SourceWithoutCloudEvents", []string{"--broker-url", amqpURL, "--cloudevents-source", "/o"}, "--cloudevents-source applies to --message-format cloudevents"},
		{"BadSource", []string{"--broker-url", kafkaURL, "--message-format", "cloudevents-structured", "--cloudevents-source", "%zz"}, "is not a URI-reference"},
		{"StreamReplicasWithKafka", []string{"--broker-url", kafkaURL, "--stream-replicas", "3"}, "--stream-replicas applies to NATS"},
		{"StreamReplicasRange", []string{"--broker-url", natsURL, "--stream", "S", "--subjects", "s.>", "--declare", "--stream-replicas", "7"},
			"--stream-replicas 7: want 1 to 5"},
		{"StreamReplicasWithoutDeclare", []string{"--broker-url", natsURL, "--stream", "S", "--stream-replicas", "3"},
			"--stream-replicas applies to a stream ferry declares (--declare)"},
		{"MinInsyncWithNATS", []string{"--broker-url", natsURL, "--min-insync-replicas", "2"}, "--min-insync-replicas applies to Kafka"},
		{"MinInsyncZero", []string{"--broker-url", kafkaURL, "--min-insync-replicas", "0"}, "--min-insync-replicas 0: want a positive number"},
		{"MinInsyncAboveReplication", []string{"--broker-url", kafkaURL, "--replication-factor", "2", "--min-insync-replicas", "3"},
			"--min-insync-replicas 3 is above --replication-factor 2"},
		{"BadFormatFor", []string{"--broker-url", kafkaURL, "--message-format-for", "orders=avro"}, `--message-format-for orders "avro"`},
		{"FormatForWithoutEquals", []string{"--broker-url", kafkaURL, "--message-format-for", "orders"}, "want DESTINATION=FORMAT"},
		{"FormatForNeedsSource", []string{"--broker-url", kafkaURL, "--message-format-for", "orders=cloudevents"}, "--message-format-for needs --cloudevents-source"},
		{"CloudEventsWithRedis", []string{"--broker-url", "redis://127.0.0.1:1", "--message-format", "cloudevents", "--cloudevents-source", "/o"}, "not Redis"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runQuick(t, append([]string{"relay", "--database-url", db, "--connect-timeout", "2m"}, c.args...)...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "retrying")
		})
	}
	t.Run("EnvAndConfigFile", func(t *testing.T) {
		t.Setenv("FERRY_KAFKA_TOPICS", "orders")
		code, _, errOut := runQuick(t, "relay", "--database-url", db, "--broker-url", amqpURL, "--connect-timeout", "2m")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "--topics applies to Kafka")

		t.Setenv("FERRY_KAFKA_TOPICS", "")
		cfg := writeFile(t, "ferry.yaml", "relay:\n  partitions: 6\n")
		code, _, errOut = runQuick(t, "relay", "--config", cfg, "--database-url", db, "--broker-url", natsURL, "--connect-timeout", "2m")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "--partitions applies to Kafka")
	})
}

// /readyz follows the Kafka publisher's connectivity: 503 naming the
// broker while the cluster is cut off, 200 again once it is back.
func TestRelayKafkaReadiness(t *testing.T) {
	// serial: it cuts the broker's network and waits for readiness to follow.
	k := testsvc.NewKafka(t)
	b := setupOps(t, "sqlite")
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	id := b.enqueue(t, orderPaid("1", topic))
	addr := freePort(t)
	cmd, out := child(t, nil, append([]string{"relay", "--broker-url", "kafka://" + strings.Join(k.Seeds, ","),
		"--topics", topic, "--http-addr", addr, "--ready-timeout", "1s", "--poll-interval", "20ms"}, b.args...)...)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := "http://" + addr

	var code int
	var body string
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, body = get(t, base+"/readyz"); return code == 200 },
		func() string { return fmt.Sprintf("ready: %d %s\n%s", code, body, out) })
	require.JSONEq(t, `{"status":"ready","checks":{"database":{"ok":true},"broker":{"ok":true}}}`, body)
	checkRecords(t, testsvc.ReadKafka(t, k.Seeds, topic, 1, time.Minute), id, []string{"1"})

	k.Cut()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, body = get(t, base+"/readyz"); return code == 503 },
		func() string { return fmt.Sprintf("unready without the brokers: %d %s", code, body) })
	require.Contains(t, body, `"broker":{"ok":false,"error":`)
	require.Contains(t, body, `"database":{"ok":true}`)
	k.Restore()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 },
		func() string { return "ready again" })

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
}
