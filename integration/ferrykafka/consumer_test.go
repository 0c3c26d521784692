package ferrykafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// suitePartitions is the number of partitions of the suite's topic. The
// suite treats its messages as independent, as a queue holds them: it
// holds one handler and expects the others acked meanwhile, and counts
// what is not acked one by one. Kafka orders a partition and commits an
// offset for all that comes before it, so the harness publishes each
// message to a partition of its own, round robin over more partitions
// than any subtest publishes messages. What one partition's order means
// is tested by TestConsumerKeepsPartitionOrder.
const suitePartitions = 64

// consumerHarness runs the consumer suite on a fresh kfake cluster, with a
// topic, a park topic and a consumer group of its own per subtest.
func consumerHarness() ferrybrokertest.ConsumerHarness {
	return ferrybrokertest.ConsumerHarness{New: func(t *testing.T) ferrybrokertest.ConsumerSetup {
		k := testsvc.NewKafka(t)
		topic := testsvc.KafkaTopic(t, k.Seeds, suitePartitions)
		park := testsvc.KafkaTopic(t, k.Seeds, 1)
		group := testsvc.Name("group-")
		cl, _ := client(t, k.Seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var seq atomic.Int32
		return ferrybrokertest.ConsumerSetup{
			Route: topic,
			Publish: func(t *testing.T, m ferrybrokertest.RawMessage) {
				// Kafka has no message id: the suite's id is the key,
				// which a parked copy keeps.
				rec := &kgo.Record{Topic: topic, Partition: (seq.Add(1) - 1) % suitePartitions, Key: []byte(m.ID), Value: m.Payload}
				for k, v := range m.Headers {
					rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
				}
				require.NoError(t, cl.ProduceSync(testsvc.Context(t, 30*time.Second), rec).FirstErr())
			},
			NewConsumer: func(t *testing.T, h ferrybroker.Handler, o ferrybrokertest.ConsumerOptions) ferrybroker.Consumer {
				return newTestConsumer(t, k.Seeds, h, &ferrykafka.ConsumerConfig{
					Group: group, Topics: []string{topic}, ParkTopic: park,
					ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: o.Concurrency, Redelivery: o.Redelivery, Hooks: o.Hooks, Validate: o.Validate},
				})
			},
			Parked: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				recs := testsvc.ReadKafka(t, k.Seeds, park, want, d)
				out := received(recs)
				for i, r := range recs {
					out[i].ID = string(r.Key)
				}
				return out
			},
			Unsettled: func(t *testing.T) int { return unsettled(t, cl, topic, group) },
			Outage: func(t *testing.T) ferrybrokertest.Outage {
				k.Cut()
				return ferrybrokertest.Outage{Refused: k.Refused, Restore: k.Restore}
			},
			BreakParking: func(t *testing.T) {
				resp, err := kadm.NewClient(cl).DeleteTopics(testsvc.Context(t, 30*time.Second), park)
				require.NoError(t, err)
				require.NoError(t, resp.Error())
			},
		}
	}}
}

// newTestConsumer returns a consumer on the cluster at seeds with cfg's
// zero fields set for a test: a short commit interval and revoke
// timeout, short fetch waits. It is stopped when the test ends.
func newTestConsumer(t testing.TB, seeds []string, h ferrybroker.Handler, cfg *ferrykafka.ConsumerConfig) *ferrykafka.Consumer {
	t.Helper()
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = 50 * time.Millisecond
	}
	if cfg.RevokeTimeout == 0 {
		cfg.RevokeTimeout = 3 * time.Second
	}
	cfg.ClientOpts = append([]kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond), kgo.MetadataMinAge(100 * time.Millisecond)},
		cfg.ClientOpts...)
	c, err := ferrykafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(seeds...)}, h, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// unsettled returns how many records of topic lie past group's committed
// offsets.
func unsettled(t testing.TB, cl *kgo.Client, topic, group string) int {
	t.Helper()
	ctx := testsvc.Context(t, 30*time.Second)
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	committed, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		at := int64(0)
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.At >= 0 {
			at = c.At
		}
		n += o.Offset - at
	})
	return int(n)
}

func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, consumerHarness())
}
