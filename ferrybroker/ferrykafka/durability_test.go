package ferrykafka

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ferrydev/ferry/ferrybroker"
)

// The last clause of every row of an existing topic produced with acks all
// and Kafka's default flush.
const pageCache = "acknowledged when in the replicas' page cache, fsynced later: replication is the durability"

// rate's rules on what kfake cannot show: in-sync replicas below the
// replication factor, flush.messages, unclean leader elections,
// partitions of different replication, a min.insync.replicas above the replication factor, and
// configs not read.
func TestDurabilityRate(t *testing.T) {
	t.Parallel()
	base := topicFacts{topic: "orders", partitions: 3, rf: 3, maxRF: 3, isr: 3, isrOf: 3, minISR: 2}
	for name, tc := range map[string]struct {
		change   func(f *topicFacts)
		level    ferrybroker.DurabilityLevel
		settings string
		fix      string
	}{
		"ReplicaOutOfSync": {
			change:   func(f *topicFacts) { f.isr = 2 },
			level:    ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 2/3, acks all; " + pageCache,
		},
		"FewerInSyncThanMinInsync": {
			change: func(f *topicFacts) { f.isr = 1 },
			level:  ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 1/3, acks all; fewer replicas in sync " +
				"than min.insync.replicas: writes are refused (NOT_ENOUGH_REPLICAS) until they catch up; " + pageCache,
		},
		"FlushEveryRecord": {
			change: func(f *topicFacts) { f.flushMessages = 1 },
			level:  ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; each replica fsyncs a " +
				"record as it appends it (flush.messages 1)",
		},
		"FlushEvery1000Records": {
			change: func(f *topicFacts) { f.flushMessages = 1000 },
			level:  ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; acknowledged when in the " +
				"replicas' page cache, fsynced every 1000 records (flush.messages): replication is the durability",
		},
		"FlushDefault": {
			change:   func(f *topicFacts) { f.flushMessages = 1<<63 - 1 },
			level:    ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; " + pageCache,
		},
		"UncleanLeaderElection": {
			change: func(f *topicFacts) { f.unclean = true },
			level:  ferrybroker.DurabilityReplicated,
			settings: "replication factor 3, min.insync.replicas 2, in sync 3/3, acks all; unclean.leader.election.enable: " +
				"a replica out of sync may become the leader and drop acknowledged records; " + pageCache,
		},
		"MixedReplication": {
			change: func(f *topicFacts) { f.rf, f.isr, f.isrOf = 1, 1, 1 },
			level:  ferrybroker.DurabilitySingle,
			settings: "replication factor 1 (3 on some partitions), min.insync.replicas 2, in sync 1/1, acks all; " +
				"min.insync.replicas is above the replication factor: every write is refused (NOT_ENOUGH_REPLICAS); " +
				pageCache,
			fix: fixRF,
		},
		"MinInsyncNotRead": {
			change: func(f *topicFacts) {
				f.minISR, f.cfgErr = 0, &kadm.AuthError{Err: kerr.TopicAuthorizationFailed}
			},
			level: ferrybroker.DurabilityUnknown,
			settings: "replication factor 3, min.insync.replicas not read (" + kerr.TopicAuthorizationFailed.Error() +
				"), in sync 3/3, acks all; " + pageCache,
			fix: "let ferry's user describe the topic's configs (ACL DescribeConfigs on topic orders) to read " +
				"min.insync.replicas",
		},
		"MinInsyncNotReported": {
			change:   func(f *topicFacts) { f.minISR = 0 },
			level:    ferrybroker.DurabilityUnknown,
			settings: "replication factor 3, min.insync.replicas not reported, in sync 3/3, acks all; " + pageCache,
			fix: "check that min.insync.replicas is 2 or more (kafka-configs --describe --all --entity-type topics " +
				"--entity-name orders)",
		},
		"MinInsyncNotReportedLeaderAck": {
			change: func(f *topicFacts) { f.minISR, f.acks = 0, acksLeader },
			level:  ferrybroker.DurabilitySingle,
			settings: "replication factor 3, min.insync.replicas not reported, in sync 3/3, acks 1 (the leader's); " +
				"the leader acknowledges before any follower holds the record; acknowledged when in the leader's " +
				"page cache, fsynced later: replication is the durability",
			fix: "check that min.insync.replicas is 2 or more (kafka-configs --describe --all --entity-type topics " +
				"--entity-name orders); " + fixAcks,
		},
		"NotAuthorized": {
			change: func(f *topicFacts) { f.metaErr = kerr.TopicAuthorizationFailed },
			level:  ferrybroker.DurabilityUnknown,
			settings: "the brokers do not describe the topic: " + kerr.TopicAuthorizationFailed.Error() +
				"; acks all",
			fix: "let ferry's user describe the topic (ACL Describe on topic orders)",
		},
		"NoPartition": {
			change:   func(f *topicFacts) { f.partitions = 0 },
			level:    ferrybroker.DurabilityUnknown,
			settings: "the brokers describe no partition of the topic; acks all",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := base
			tc.change(&f)
			d := f.rate()
			require.Equal(t, "topic orders", d.Destination)
			require.Equal(t, tc.level, d.Level)
			require.Equal(t, tc.settings, d.Settings)
			require.Equal(t, tc.fix, d.Fix)
			if d.Level == ferrybroker.DurabilityReplicated {
				require.Empty(t, d.Fix)
			}
		})
	}
}
