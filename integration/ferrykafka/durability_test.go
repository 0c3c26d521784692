package ferrykafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
)

// ferrykafka.Publisher.Durability on kfake clusters. The module's own
// tests, which may not depend on kfake, test its rules (rate) on what kfake
// cannot show.

// The last clause of every row of an existing topic produced with acks all
// and Kafka's default flush.
const pageCache = "acknowledged when in the replicas' page cache, fsynced later: replication is the durability"

// quiet drops the publishers' logs (a cluster closed under one is logged).
var quiet = slog.New(slog.DiscardHandler)

// durabilityCluster starts a kfake cluster of opts, closed when the test
// ends, and creates each topic of topics (name → replication factor and
// min.insync.replicas, 0 for the brokers' default) with 3 partitions.
func durabilityCluster(t *testing.T, topics map[string][2]int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	if len(topics) == 0 {
		return c
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, s := range topics {
		var configs map[string]*string
		if s[1] > 0 {
			configs = map[string]*string{"min.insync.replicas": kadm.StringPtr(fmt.Sprint(s[1]))}
		}
		r, err := adm.CreateTopic(ctx, 3, int16(s[0]), configs, name)
		require.NoError(t, err)
		require.NoError(t, r.Err, name)
	}
	return c
}

// dialDurability dials c as the relay does, with topics checked at start.
func dialDurability(t *testing.T, c *kfake.Cluster, topics []string, opts ...kgo.Opt) *ferrykafka.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := ferrykafka.Dial(ctx, "kafka://"+strings.Join(c.ListenAddrs(), ","), &ferrykafka.Config{Topics: topics, ClientOpts: opts, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func readDurability(t *testing.T, p *ferrykafka.Publisher) []ferrybroker.Durability {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := p.Durability(ctx)
	require.NoError(t, err)
	return rows
}

func TestDurabilityReplicationFactor1IsSingle(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {1, 0}}, kfake.NumBrokers(1))
	rows := readDurability(t, dialDurability(t, c, []string{"orders"}))
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic orders",
		Level:       ferrybroker.DurabilitySingle,
		Settings: "replication factor 1, min.insync.replicas 1, in sync 1/1, acks all; with min.insync.replicas 1 " +
			"the in-sync replicas may shrink to the leader alone, which then acknowledges by itself; " + pageCache,
		Fix: "give the topic replication factor 3 (recreate it, or add replicas with kafka-reassign-partitions); " +
			"set min.insync.replicas 2 (kafka-configs --alter --entity-type topics --entity-name orders " +
			"--add-config min.insync.replicas=2)",
	}}, rows)
}

func TestDurabilityReplicationFactor3MinInsync2IsReplicated(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {3, 2}}, kfake.NumBrokers(3))
	rows := readDurability(t, dialDurability(t, c, []string{"orders"}))
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic orders",
		Level:       ferrybroker.DurabilityReplicated,
		Settings:    "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; " + pageCache,
	}}, rows)
}

// The brokers' min.insync.replicas is the topic's when it sets none: the
// effective value DescribeConfigs reports.
func TestDurabilityBrokerDefaultMinInsync(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {3, 0}}, kfake.NumBrokers(3),
		kfake.BrokerConfigs(map[string]string{"min.insync.replicas": "2"}))
	rows := readDurability(t, dialDurability(t, c, []string{"orders"}))
	require.Len(t, rows, 1)
	require.Equal(t, ferrybroker.DurabilityReplicated, rows[0].Level)
	require.Equal(t, "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; "+pageCache, rows[0].Settings)
}

func TestDurabilityReplicationFactor3MinInsync1IsSingle(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {3, 1}}, kfake.NumBrokers(3))
	rows := readDurability(t, dialDurability(t, c, []string{"orders"}))
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic orders",
		Level:       ferrybroker.DurabilitySingle,
		Settings: "replication factor 3, min.insync.replicas 1, in sync 3/3, acks all; with min.insync.replicas 1 " +
			"the in-sync replicas may shrink to the leader alone, which then acknowledges by itself; " + pageCache,
		Fix: "set min.insync.replicas 2 (kafka-configs --alter --entity-type topics --entity-name orders " +
			"--add-config min.insync.replicas=2)",
	}}, rows)
}

// Replication factor 2 with min.insync.replicas 2 loses no acknowledged
// record when a broker's disk is lost, but stops the writes while a
// replica is out of sync: replicated, the cost said.
func TestDurabilityReplicationFactor2MinInsync2IsReplicated(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {2, 2}}, kfake.NumBrokers(3))
	rows := readDurability(t, dialDurability(t, c, []string{"orders"}))
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic orders",
		Level:       ferrybroker.DurabilityReplicated,
		Settings: "replication factor 2, min.insync.replicas 2, in sync 2/2, acks all; one replica out of sync stops " +
			"the writes (NOT_ENOUGH_REPLICAS) until it catches up: replication factor 3 keeps them going; " + pageCache,
	}}, rows)
}

func TestDurabilityNoTopicsIsUnknown(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, nil, kfake.NumBrokers(1))
	rows := readDurability(t, dialDurability(t, c, nil))
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topics (none named)",
		Level:       ferrybroker.DurabilityUnknown,
		Settings:    "acks all; the events name their topics, none of which was read",
		Fix:         "name the topics (--topics) so ferry can read their replication",
	}}, rows)
}

// A topic deleted after start is a row of its own, DurabilityUnknown; the
// other topics are read as ever, in the order of Config.Topics.
func TestDurabilityMissingTopicIsUnknown(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {3, 2}, "payments": {3, 2}}, kfake.NumBrokers(3))
	p := dialDurability(t, c, []string{"payments", "orders", "payments"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := kadm.NewClient(p.Client()).DeleteTopic(ctx, "payments")
	require.NoError(t, err)
	require.NoError(t, r.Err)

	rows := readDurability(t, p)
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic payments",
		Level:       ferrybroker.DurabilityUnknown,
		Settings:    "the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION); acks all",
		Fix: "create the topic with replication factor 3 and min.insync.replicas 2 (kafka-topics --create " +
			"--topic payments --replication-factor 3 --config min.insync.replicas=2), acks all (ferry's default)",
	}, {
		Destination: "topic orders",
		Level:       ferrybroker.DurabilityReplicated,
		Settings:    "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; " + pageCache,
	}}, rows)
}

// A client given to New that produces with acks from the leader alone
// makes every topic single, whatever its replication.
func TestDurabilityLeaderAckIsSingle(t *testing.T) {
	t.Parallel()
	c := durabilityCluster(t, map[string][2]int{"orders": {3, 2}}, kfake.NumBrokers(3))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite())
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := ferrykafka.New(ctx, cl, &ferrykafka.Config{Topics: []string{"orders"}, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	rows := readDurability(t, p)
	require.Equal(t, []ferrybroker.Durability{{
		Destination: "topic orders",
		Level:       ferrybroker.DurabilitySingle,
		Settings: "replication factor 3, min.insync.replicas 2, in sync 3/3, acks 1 (the leader's); the leader " +
			"acknowledges before any follower holds the record; acknowledged when in the leader's page cache, " +
			"fsynced later: replication is the durability",
		Fix: "produce with acks all (ferry's default: the client sets kgo.RequiredAcks(kgo.LeaderAck()))",
	}}, rows)

	// Dial's client takes the same acks from Config.ClientOpts.
	d := dialDurability(t, c, []string{"orders"}, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	require.Equal(t, rows, readDurability(t, d))
}

// Brokers that cannot be reached are an error, without the URL's
// password; a closed publisher says so.
func TestDurabilityUnreachableIsAnError(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "relay", "c0rrect-horse"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "kafka://relay:c0rrect-horse@" + c.ListenAddrs()[0] + "?sasl=plain&insecure_sasl=true"
	p, err := ferrykafka.Dial(ctx, url, &ferrykafka.Config{Topics: []string{"orders"}, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.Len(t, readDurability(t, p), 1)

	c.Close()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	rows, err := p.Durability(short)
	require.Error(t, err)
	require.Nil(t, rows)
	require.NotContains(t, err.Error(), "c0rrect-horse")

	require.NoError(t, p.Close())
	_, err = p.Durability(ctx)
	require.ErrorIs(t, err, ferrytype.ErrClosed)
}
