package ferrykafka_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// pingEvery is the publishers' ping interval in tests: an outage shows
// within a few of them.
const pingEvery = 50 * time.Millisecond

// received turns Kafka records into what the conformance suite compares.
func received(recs []*kgo.Record) []ferrybrokertest.Received {
	out := make([]ferrybrokertest.Received, 0, len(recs))
	for _, r := range recs {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		out = append(out, ferrybrokertest.Received{ID: h[ferrybroker.HeaderEventID], Route: r.Topic, Payload: r.Value, Headers: h})
	}
	return out
}

func seedURL(seeds []string) string { return "kafka://" + strings.Join(seeds, ",") }

// client returns a franz-go client on the cluster at seeds, closed when
// the test ends (or earlier by the returned func, once).
func client(t testing.TB, seeds []string, opts ...kgo.Opt) (*kgo.Client, func()) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	var once sync.Once
	closeIt := func() { once.Do(cl.Close) }
	t.Cleanup(closeIt)
	return cl, closeIt
}

func harness() ferrybrokertest.Harness {
	return ferrybrokertest.Harness{New: func(t *testing.T) ferrybrokertest.Setup {
		k := testsvc.NewKafka(t)
		topic := testsvc.KafkaTopic(t, k.Seeds, 3)
		cl, closeClient := client(t, k.Seeds)
		p, err := ferrykafka.New(testsvc.Context(t, 10*time.Second), cl,
			&ferrykafka.Config{Topics: []string{topic}, PingInterval: pingEvery})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      topic,
			Unroutable: testsvc.Name("nosuchtopic-"),
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(testsvc.ReadKafka(t, k.Seeds, topic, want, d))
			},
			// The test's reader has a client of its own: closing the
			// publisher's breaks every connection it has.
			Break: func(*testing.T) { closeClient() },
		}
	}, NewDialed: func(t *testing.T) ferrybrokertest.Setup {
		k := testsvc.NewKafka(t)
		// One partition: the suite reads what it published in order.
		topic := testsvc.KafkaTopic(t, k.Seeds, 1)
		p, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), seedURL(k.Seeds),
			&ferrykafka.Config{Topics: []string{topic}, PingInterval: pingEvery})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      topic,
			Unroutable: testsvc.Name("nosuchtopic-"),
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(testsvc.ReadKafka(t, k.Seeds, topic, want, d))
			},
			Cut:     func(*testing.T) { k.Cut() },
			Restore: func(*testing.T) { k.Restore() },
		}
	}}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, harness())
}

// msgs returns n messages to topic, of aggregates "a0".."a<aggs-1>", with
// consecutive sequence numbers within each aggregate.
func msgs(topic string, n, aggs int) []ferrytype.Message {
	out := make([]ferrytype.Message, n)
	for i := range out {
		out[i] = ferrytype.Message{
			ID:            fmt.Sprintf("evt-%d-%d", time.Now().UnixNano(), i),
			AggregateType: "order",
			AggregateID:   fmt.Sprintf("a%d", i%aggs),
			Sequence:      int64(i/aggs + 1),
			Type:          "OrderPaid",
			Payload:       []byte(fmt.Sprintf(`{"i":%d}`, i)),
			Destination:   topic,
			Attempt:       1,
			CreatedAt:     time.Now(),
		}
	}
	return out
}

func outcomes(res []ferrytype.PublishResult) map[ferrytype.Outcome]int {
	m := map[ferrytype.Outcome]int{}
	for _, r := range res {
		m[r.Outcome]++
	}
	return m
}

func requireAll(t testing.TB, want ferrytype.Outcome, res []ferrytype.PublishResult) {
	t.Helper()
	for i, r := range res {
		require.Equal(t, want, r.Outcome, "message %d: %v", i, r.Err)
	}
}

// Every event of one aggregate lands in one partition, in sequence order,
// keyed by the aggregate id.
func TestAggregateOrderWithinPartition(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 6)
	p, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), seedURL(k.Seeds), &ferrykafka.Config{PingInterval: pingEvery})
	require.NoError(t, err)
	defer p.Close()
	ctx := testsvc.Context(t, time.Minute)
	all := msgs(topic, 600, 12)
	for start := 0; start < len(all); start += 100 {
		requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, all[start:start+100]))
	}
	requireAggregateOrder(t, testsvc.ReadKafka(t, k.Seeds, topic, len(all), 30*time.Second), 12)
}

// requireAggregateOrder checks that the records of each aggregate are in
// one partition, keyed by the aggregate id, and that the first copy of
// each event comes in sequence order.
func requireAggregateOrder(t testing.TB, recs []*kgo.Record, aggs int) {
	t.Helper()
	partition := map[string]int32{}
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range recs {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		agg := h[ferrybroker.HeaderAggregateID]
		require.Equal(t, agg, string(r.Key), "the key is the aggregate id")
		if p, ok := partition[agg]; ok {
			require.Equal(t, p, r.Partition, "aggregate %s is in two partitions", agg)
		}
		partition[agg] = r.Partition
		id := h[ferrybroker.HeaderEventID]
		if seen[id] {
			continue // a republished event: its first copy holds its place
		}
		seen[id] = true
		var seq int64
		_, err := fmt.Sscan(h[ferrybroker.HeaderSequence], &seq)
		require.NoError(t, err)
		require.Greater(t, seq, last[agg], "aggregate %s: sequence %d after %d", agg, seq, last[agg])
		last[agg] = seq
	}
	require.Len(t, partition, aggs)
}

// The record carries the event's headers, sorted, then ferry's; an event
// header that would pass for one of ferry's is dropped.
func TestRecordHeadersAndKey(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	p, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), seedURL(k.Seeds), nil)
	require.NoError(t, err)
	defer p.Close()
	m := msgs(topic, 1, 1)[0]
	m.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"b": "2", "ferry-event-id": "spoofed"}
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(testsvc.Context(t, 30*time.Second), []ferrytype.Message{m}))
	recs := testsvc.ReadKafka(t, k.Seeds, topic, 1, 30*time.Second)
	require.Len(t, recs, 1)
	var keys []string
	for _, h := range recs[0].Headers {
		keys = append(keys, h.Key)
		if h.Key == ferrybroker.HeaderEventID {
			require.Equal(t, m.ID, string(h.Value))
		}
	}
	require.Equal(t, []string{"b", "traceparent", ferrybroker.HeaderEventID, ferrybroker.HeaderEventType,
		ferrybroker.HeaderAggregateType, ferrybroker.HeaderAggregateID, ferrybroker.HeaderSequence,
		ferrybroker.HeaderCreatedAt}, keys)
	require.Equal(t, "a0", string(recs[0].Key))
	require.Equal(t, m.Payload, recs[0].Value)
}

// Without a destination, the topic is derived from the event type or the
// aggregate type, after the prefix.
func TestTopicFrom(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	ctx := testsvc.Context(t, time.Minute)
	for _, c := range []struct {
		from  ferrykafka.TopicFrom
		topic string
	}{{ferrykafka.TopicFromEventType, "ev.OrderPaid"}, {ferrykafka.TopicFromAggregateType, "ev.order"}} {
		p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{TopicFrom: c.from, TopicPrefix: "ev.",
			Topics: []string{c.topic}, Declare: true, Partitions: 2})
		require.NoError(t, err)
		m := msgs("", 1, 1)[0]
		requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, []ferrytype.Message{m}))
		got := testsvc.ReadKafka(t, k.Seeds, c.topic, 1, 30*time.Second)
		require.Len(t, got, 1, c.from)
		if c.from == ferrykafka.TopicFromAggregateType {
			m.AggregateType, m.AggregateID = "", ""
			r := p.Publish(ctx, []ferrytype.Message{m})[0]
			require.Equal(t, ferrytype.OutcomeReturned, r.Outcome, "%v", r.Err)
			require.ErrorContains(t, r.Err, "no aggregate type")
		}
		require.NoError(t, p.Close())
	}
}

// A name Kafka refuses as a topic is rejected before anything is sent.
func TestInvalidTopicNameIsRejected(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	p, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), seedURL(k.Seeds), nil)
	require.NoError(t, err)
	defer p.Close()
	r := p.Publish(testsvc.Context(t, 10*time.Second), msgs("orders/paid", 1, 1))[0]
	require.Equal(t, ferrytype.OutcomeRejected, r.Outcome, "%v", r.Err)
	require.ErrorContains(t, r.Err, "not a valid Kafka topic name")
}

// A topic that does not exist is unroutable, and the error names it.
func TestUnroutableNamesTheTopic(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	p, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), seedURL(k.Seeds), nil)
	require.NoError(t, err)
	defer p.Close()
	topic := testsvc.Name("nosuchtopic-")
	r := p.Publish(testsvc.Context(t, 10*time.Second), msgs(topic, 1, 1))[0]
	require.Equal(t, ferrytype.OutcomeReturned, r.Outcome, "%v", r.Err)
	require.ErrorContains(t, r.Err, fmt.Sprintf("topic %q", topic))
}

// Topics are checked at start, and created with Declare.
func TestTopicsCheckedOrDeclared(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	ctx := testsvc.Context(t, time.Minute)
	topic := testsvc.Name("decl-")
	_, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}})
	require.ErrorContains(t, err, "topic "+topic+" does not exist")
	p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}, Declare: true, Partitions: 5})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	p, err = ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err, "the declared topic is found")
	defer p.Close()
	msgsOut := msgs(topic, 50, 50)
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, msgsOut))
	parts := map[int32]bool{}
	for _, r := range testsvc.ReadKafka(t, k.Seeds, topic, 50, 30*time.Second) {
		parts[r.Partition] = true
	}
	require.LessOrEqual(t, len(parts), 5)
	require.Greater(t, len(parts), 1, "50 keys over 5 partitions")
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	ctx := testsvc.Context(t, time.Minute)
	for name, cfg := range map[string]*ferrykafka.Config{
		"TopicFrom":         {TopicFrom: "payload"},
		"Declare":           {Declare: true},
		"TopicPrefix":       {TopicPrefix: "a b"},
		"Partitions":        {Partitions: -2},
		"Ping":              {PingInterval: time.Millisecond},
		"MinInsyncReplicas": {MinInsyncReplicas: -3},
	} {
		_, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), cfg)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "Config."+name, name)
	}
	_, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{ReplicationFactor: 2, MinInsyncReplicas: 3})
	require.ErrorContains(t, err, "Config.MinInsyncReplicas 3 is above ReplicationFactor 2")
	cl, _ := client(t, k.Seeds, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	_, err = ferrykafka.New(ctx, cl, nil)
	require.ErrorContains(t, err, "NoAck")
}
