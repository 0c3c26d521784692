package ferrykafka_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// kafkaConsumerBundle is a fresh cluster with a topic, a park topic and a
// group name.
type kafkaConsumerBundle struct {
	ctx                context.Context
	k                  *testsvc.KafkaCluster
	topic, park, group string
	cl                 *kgo.Client // produces with a manual partitioner
}

func setupKafkaConsumer(t *testing.T, partitions int32) *kafkaConsumerBundle {
	t.Helper()
	k := testsvc.NewKafka(t)
	cl, _ := client(t, k.Seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return &kafkaConsumerBundle{ctx: testsvc.Context(t, 2*time.Minute), k: k,
		topic: testsvc.KafkaTopic(t, k.Seeds, partitions), park: testsvc.KafkaTopic(t, k.Seeds, 1),
		group: testsvc.Name("group-"), cl: cl}
}

// produce stores recs (to the bundle's topic when they name none).
func (b *kafkaConsumerBundle) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = b.topic
		}
	}
	require.NoError(t, b.cl.ProduceSync(b.ctx, recs...).FirstErr())
}

// event returns a record of partition p as a ferry relay writes it.
func event(p int32, id, key string, payload string) *kgo.Record {
	return &kgo.Record{Partition: p, Key: []byte(key), Value: []byte(payload), Headers: []kgo.RecordHeader{
		{Key: ferrybroker.HeaderEventID, Value: []byte(id)}, {Key: ferrybroker.HeaderEventType, Value: []byte("OrderPaid")},
		{Key: ferrybroker.HeaderAggregateID, Value: []byte(key)},
	}}
}

func (b *kafkaConsumerBundle) consumer(t *testing.T, h ferrybroker.Handler, cfg ferrykafka.ConsumerConfig) *ferrykafka.Consumer {
	t.Helper()
	cfg.Group, cfg.Topics, cfg.ParkTopic = b.group, []string{b.topic}, b.park
	if cfg.Redelivery.RetryDelay == 0 {
		cfg.Redelivery = ferrybroker.RedeliveryPolicy{MaxDeliveries: 50, RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}
	}
	return newTestConsumer(t, b.k.Seeds, h, &cfg)
}

func (b *kafkaConsumerBundle) waitUnsettled(t *testing.T, want int) {
	t.Helper()
	var n int
	testsvc.WaitFor(t, 30*time.Second, func() bool { n = unsettled(t, b.cl, b.topic, b.group); return n == want },
		func() string { return fmt.Sprintf("%d records past the committed offsets, want %d", n, want) })
}

func waitStats(t *testing.T, c *ferrykafka.Consumer, cond func(s ferrybroker.ConsumerStats) bool) {
	t.Helper()
	testsvc.WaitFor(t, time.Minute, func() bool { return cond(c.Stats()) }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
}

func TestConsumerKeepsPartitionOrder(t *testing.T) {
	t.Parallel()
	const partitions, keys, perKey = 4, 16, 15
	b := setupKafkaConsumer(t, partitions)
	var recs []*kgo.Record
	for n := 0; n < perKey; n++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("order-%d", k)
			recs = append(recs, event(int32(k%partitions), fmt.Sprintf("evt-%d-%d", k, n), key, fmt.Sprintf(`{"n":%d}`, n)))
		}
	}
	b.produce(t, recs...)

	var (
		mu         sync.Mutex
		busy       = map[int]bool{} // partition -> a handler runs
		seen       = map[string][]int{}
		violations []string
		running    atomic.Int64
		overlap    = make(chan struct{})
		once       sync.Once
	)
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		var k, n int
		_, err := fmt.Sscanf(d.AggregateID, "order-%d", &k)
		require.NoError(t, err)
		var body struct{ N int }
		require.NoError(t, json.Unmarshal(d.Payload, &body))
		n = body.N
		p := k % partitions
		mu.Lock()
		if busy[p] {
			violations = append(violations, fmt.Sprintf("two handlers at once on partition %d", p))
		}
		busy[p] = true
		mu.Unlock()
		if running.Add(1) >= 2 {
			once.Do(func() { close(overlap) })
		}
		if n == 0 {
			// The first record of each key waits until two handlers run
			// at once: Concurrency spreads over partitions.
			select {
			case <-overlap:
			case <-ctx.Done():
			}
		}
		running.Add(-1)
		mu.Lock()
		busy[p] = false
		seen[d.AggregateID] = append(seen[d.AggregateID], n)
		mu.Unlock()
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 4}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == keys*perKey })
	require.NoError(t, c.Stop(b.ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	want := make([]int, perKey)
	for i := range want {
		want[i] = i
	}
	for k := 0; k < keys; k++ {
		require.Equal(t, want, seen[fmt.Sprintf("order-%d", k)], "order-%d's events once each, in order", k)
	}
	b.waitUnsettled(t, 0)
}

// inboxBed is a SQLite inbox with an effect table: each applied event
// inserts one row.
type inboxBed struct {
	db    *sql.DB
	in    *ferry.Inbox[*sql.Tx]
	mu    sync.Mutex
	count map[ferry.InboxOutcome]int
}

func (ib *inboxBed) OnInbox(_ string, o ferry.InboxOutcome, _ time.Duration) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.count[o]++
}

func (ib *inboxBed) outcomes(o ferry.InboxOutcome) int {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return ib.count[o]
}

func newInboxBed(t *testing.T) *inboxBed {
	t.Helper()
	return newInboxBedOn(t, testsvc.SQLite(t), true)
}

// newInboxBedOn returns the inbox bed on db, creating its tables when
// create is set.
func newInboxBedOn(t *testing.T, db *sql.DB, create bool) *inboxBed {
	t.Helper()
	ctx := testsvc.Context(t, time.Minute)
	ib := &inboxBed{db: db, count: map[ferry.InboxOutcome]int{}}
	store, err := ferrysqlite.NewInbox(ib.db, nil)
	require.NoError(t, err)
	if create {
		require.NoError(t, store.Migrate(ctx))
		_, err = ib.db.ExecContext(ctx, `CREATE TABLE effect (event_id TEXT NOT NULL)`)
		require.NoError(t, err)
	}
	ib.in, err = ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "kafka-test", Hooks: []ferry.Hook{ib}})
	require.NoError(t, err)
	return ib
}

// handler applies each delivery once through the inbox, keyed by its
// event id.
func (ib *inboxBed) handler() ferrybroker.Handler {
	return ferry.InboxHandler(ib.in, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		return ferry.Operation{Key: "effect:" + d.MessageID, Fields: map[string]string{"payload": string(d.Payload)}}, nil
	}, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		return ferry.ExpectResult(tx.ExecContext(ctx, `INSERT INTO effect (event_id) VALUES (?)`, d.MessageID))
	})
}

// effects returns how many times each event's effect was applied.
func (ib *inboxBed) effects(t *testing.T) map[string]int {
	t.Helper()
	rows, err := ib.db.Query(`SELECT event_id, COUNT(*) FROM effect GROUP BY event_id`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func (ib *inboxBed) requireOnce(t *testing.T, ids []string) {
	t.Helper()
	got := ib.effects(t)
	require.Len(t, got, len(ids), "an effect for every event, and no other")
	for _, id := range ids {
		require.Equal(t, 1, got[id], "event %s applied once", id)
	}
}

func TestConsumerRebalanceLosesNothingAndAppliesOnce(t *testing.T) {
	t.Parallel()
	const partitions, n = 8, 400
	b := setupKafkaConsumer(t, partitions)
	ib := newInboxBed(t)
	ids := make([]string, n)
	var recs []*kgo.Record
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%d", i)
		recs = append(recs, event(int32(i%partitions), ids[i], "order-"+strconv.Itoa(i%50), fmt.Sprintf(`{"i":%d}`, i)))
	}
	b.produce(t, recs...)
	applied := func() int { return ib.outcomes(ferry.InboxApplied) }

	// A takes every partition. Once an eighth of the records is applied,
	// A's handlers hold after their inbox transaction committed, so that
	// B joins while A has records in flight: the rebalance waits for those
	// of the partitions it moves, cancels them at RevokeTimeout and
	// commits what A finished; B gets the rest, a cancelled record coming
	// again as an inbox duplicate. Once B acked a record, A's handlers go
	// on; then A stops while B runs, and B takes every partition.
	release := make(chan struct{})
	inner := ib.handler()
	a := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if err := inner(ctx, d); err != nil {
			return err
		}
		if applied() >= n/8 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 3, Name: "a"}})
	require.NoError(t, a.Start(b.ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { return applied() >= n/8 }, func() string { return fmt.Sprintf("%+v", a.Stats()) })
	c2 := b.consumer(t, ib.handler(), ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 3, Name: "b"}})
	require.NoError(t, c2.Start(b.ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { return c2.Stats().Acked > 0 }, func() string { return fmt.Sprintf("b: %+v", c2.Stats()) })
	close(release)
	require.NoError(t, a.Stop(b.ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { return len(ib.effects(t)) == n },
		func() string {
			return fmt.Sprintf("%d effects; a %+v, b %+v", len(ib.effects(t)), a.Stats(), c2.Stats())
		})
	b.waitUnsettled(t, 0)
	require.NoError(t, c2.Stop(b.ctx))
	ib.requireOnce(t, ids)
	sa, sb := a.Stats(), c2.Stats()
	require.Zero(t, sa.InFlight+sb.InFlight)
	require.Zero(t, sa.Parked+sb.Parked, "a: %+v, b: %+v", sa, sb)
	require.Equal(t, int64(n), sa.Acked+sb.Acked, "each record's offset committed once: a: %+v, b: %+v", sa, sb)
	require.Equal(t, n, applied())
	t.Logf("a: %+v; b: %+v; inbox duplicates: %d", sa, sb, ib.outcomes(ferry.InboxDuplicate))
}

func TestConsumerCrashAfterHandleIsAnInboxDuplicate(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	ib := newInboxBed(t)
	ids := []string{"evt-1", "evt-2", "evt-3", "evt-4", "evt-5"}
	for _, id := range ids {
		b.produce(t, event(0, id, "order-1", `{"amount":10}`))
	}
	var calls atomic.Int64
	a := b.consumer(t, ib.handler(), ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1}})
	require.NoError(t, a.Start(ferryfault.With(b.ctx, func(_ context.Context, point string) error {
		if point == ferryfault.ConsumerAfterHandle && calls.Add(1) == 3 {
			return errors.New("crash after the inbox committed evt-3")
		}
		return nil
	})))
	waitStats(t, a, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 2 && s.Left == 1 })
	b.waitUnsettled(t, 3) // evt-3's offset was never committed, nor anything after it
	require.NoError(t, a.Stop(b.ctx))
	st := a.Stats()
	require.Equal(t, ferrybroker.ConsumerStats{Delivered: 3, Handled: 3, Acked: 2, Left: 1}, st,
		"nothing past the crashed record was handled")
	require.Equal(t, 3, ib.outcomes(ferry.InboxApplied))

	c2 := b.consumer(t, ib.handler(), ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1}})
	require.NoError(t, c2.Start(b.ctx))
	waitStats(t, c2, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 3 })
	require.NoError(t, c2.Stop(b.ctx))
	require.Equal(t, 1, ib.outcomes(ferry.InboxDuplicate), "evt-3 came again and the inbox found its marker")
	require.Equal(t, 5, ib.outcomes(ferry.InboxApplied))
	ib.requireOnce(t, ids)
	b.waitUnsettled(t, 0)
}

// parked reads the park topic's records, waiting for want of them.
func (b *kafkaConsumerBundle) parked(t *testing.T, want int) []*kgo.Record {
	t.Helper()
	return testsvc.ReadKafka(t, b.k.Seeds, b.park, want, 30*time.Second)
}

func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

func TestConsumerParksPoisonAndThePartitionMovesOn(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.produce(t, event(0, "evt-a", "order-1", `{"n":1}`), event(0, "evt-b", "order-1", `{"n":2}`),
		event(0, "evt-c", "order-1", `{"n":3}`))
	var mu sync.Mutex
	var handled []string
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		handled = append(handled, d.MessageID)
		mu.Unlock()
		if d.MessageID == "evt-b" {
			return ferrytype.Poison(errors.New("unknown currency XXX"))
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 2 && s.Parked == 1 })
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, []string{"evt-a", "evt-b", "evt-c"}, handled, "handled once each, in order")
	b.waitUnsettled(t, 0)

	p := b.parked(t, 1)
	require.Len(t, p, 1)
	h := headers(p[0])
	require.Equal(t, "order-1", string(p[0].Key), "the key is kept")
	require.JSONEq(t, `{"n":2}`, string(p[0].Value))
	require.Equal(t, "evt-b", h[ferrybroker.HeaderEventID])
	require.Contains(t, h[ferrybroker.HeaderParkReason], "unknown currency XXX")
	require.Equal(t, b.topic, h[ferrybroker.HeaderParkRoute])
	require.Equal(t, b.topic+"/0", h[ferrybroker.HeaderParkSource])
	require.Equal(t, "1", h[ferrykafka.HeaderParkOffset])
	require.Equal(t, "0", h[ferrykafka.HeaderParkPartition])
	require.Equal(t, b.group, h[ferrykafka.HeaderParkGroup])
	require.Equal(t, "1", h[ferrybroker.HeaderParkDeliveryCount])
}

func TestConsumerParksTombstones(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.produce(t, &kgo.Record{Partition: 0, Key: []byte("order-1")}, event(0, "evt-after", "order-2", `{}`))
	var seen []string
	var mu sync.Mutex
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d.MessageID)
		return nil
	}, ferrykafka.ConsumerConfig{})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 1 && s.Parked == 1 })
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, []string{"evt-after"}, seen, "the handler never sees a tombstone")
	p := b.parked(t, 1)
	require.Len(t, p, 1)
	require.Nil(t, p[0].Value)
	require.Equal(t, "order-1", string(p[0].Key))
	require.Contains(t, headers(p[0])[ferrybroker.HeaderParkReason], "malformed message: tombstone")
	b.waitUnsettled(t, 0)
}

// TestConsumerAcceptsDebeziumRecords feeds records shaped as Debezium's
// outbox event router writes them from ferry's outbox_event table (see the
// package doc): the event id in the id header, the aggregate id as the
// key, the topic outbox.event.<aggregate type>, the payload as JSON or, with
// Kafka Connect's JsonConverter, as a JSON string holding the JSON.
func TestConsumerAcceptsDebeziumRecords(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.topic = "outbox.event.Order"
	adm := kadm.NewClient(b.cl)
	resp, err := adm.CreateTopic(b.ctx, 1, 1, nil, b.topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	deb := func(id, key, value string, h ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Partition: 0, Key: []byte(key), Value: []byte(value),
			Headers: append([]kgo.RecordHeader{{Key: "id", Value: []byte(id)}}, h...)}
	}
	b.produce(t,
		// StringConverter: the payload column as it is.
		deb("5f0c-1", "42", `{"order_id":42,"amount":10}`),
		// JsonConverter without schemas: the JSON column as a JSON string;
		// the event type placed in ferry's header.
		deb("5f0c-2", `"43"`, `"{\"order_id\":43,\"amount\":11}"`,
			kgo.RecordHeader{Key: ferrybroker.HeaderEventType, Value: []byte("OrderPaid")}),
		// A header written by a JSON header converter.
		deb(`"5f0c-3"`, "44", `{"order_id":44}`),
	)
	got := make(chan ferrybroker.Delivery, 3)
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		got <- *d
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 3 })
	require.NoError(t, c.Stop(b.ctx))
	close(got)
	var ds []ferrybroker.Delivery
	for d := range got {
		ds = append(ds, d)
	}
	require.Len(t, ds, 3)
	require.Equal(t, "5f0c-1", ds[0].MessageID)
	require.Equal(t, "42", ds[0].AggregateID)
	require.Equal(t, "Order", ds[0].AggregateType)
	require.Equal(t, "outbox.event.Order", ds[0].Route)
	require.JSONEq(t, `{"order_id":42,"amount":10}`, string(ds[0].Payload))
	require.Equal(t, "5f0c-2", ds[1].MessageID)
	require.Equal(t, "43", ds[1].AggregateID)
	require.Equal(t, "OrderPaid", ds[1].Type)
	require.JSONEq(t, `{"order_id":43,"amount":11}`, string(ds[1].Payload), "the JSON string is unwrapped")
	require.Equal(t, "5f0c-3", ds[2].MessageID)
	b.waitUnsettled(t, 0)
}

// rewindRecorder records the rewinds a consumer reports to its hooks.
type rewindRecorder struct {
	mu  sync.Mutex
	got []ferrybroker.Rewind
}

func (r *rewindRecorder) OnRewound(_ string, rw ferrybroker.Rewind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rw)
}

func (r *rewindRecorder) all() []ferrybroker.Rewind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ferrybroker.Rewind(nil), r.got...)
}

// The partition's leader moves under a running consumer, and the new
// leader's log ends before what the consumer read (the brokers lost
// records: an unclean election). franz-go resets the partition to where
// the logs agree and reads again from there; the consumer makes it
// visible — a WARN line with the partition and both offsets, the hooks
// (ferryprom's rewind counters), Stats — and the records come again, for
// the inbox to absorb.
func TestConsumerRewindAfterLeaderMoveIsVisible(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	const n, lost = 20, 5
	const commitEvery = 50 * time.Millisecond
	for i := range n {
		b.produce(t, event(0, fmt.Sprintf("ev-%d", i), "agg", `{"n":1}`))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	rec := &rewindRecorder{}
	logs := &testsvc.LogBuffer{}
	var held atomic.Bool
	c := b.consumer(t, func(_ context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		seen[d.MessageID]++
		again := seen[d.MessageID] == 2
		mu.Unlock()
		if again && held.CompareAndSwap(false, true) {
			// Commit ticks fall between the rewind and the mark of
			// what is read again: they must not commit the offset the
			// partition was at before it, or what is read again
			// never settles.
			time.Sleep(4 * commitEvery)
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1, Hooks: []ferrybroker.Hook{rec}, Logger: slog.New(slog.NewTextHandler(logs, nil))}, CommitInterval: commitEvery})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == n })

	// The new leader answers the consumer's check of its epoch with an end
	// offset before what it read.
	var answered atomic.Bool
	b.k.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetForLeaderEpochRequest)
		resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, n-lost
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		answered.Store(true)
		return resp, nil, true
	})
	leader := b.k.LeaderFor(b.topic, 0)
	require.NoError(t, b.k.MoveTopicPartition(b.topic, 0, (leader+1)%3))

	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Rewinds == 1 && s.Acked == n+lost })
	require.True(t, answered.Load())
	st := c.Stats()
	require.Equal(t, int64(lost), st.Rewound, "%+v", st)
	require.Equal(t, []ferrybroker.Rewind{{Route: b.topic, Partition: 0, From: n, To: n - lost}}, rec.all())
	mu.Lock()
	for i := range n {
		want := 1
		if i >= n-lost {
			want = 2 // read again after the reset
		}
		require.Equal(t, want, seen[fmt.Sprintf("ev-%d", i)], "ev-%d", i)
	}
	mu.Unlock()
	lines := logs.Lines("lost records", "reset_to=15", "consumed_to=20", "records_again=5")
	require.Len(t, lines, 1, "one WARN line names the partition and its offsets: %q", logs.Lines())
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "partition=0")
}

// Debezium's records read the same whichever Kafka Connect converter
// wrote their headers and key: plain (SimpleHeaderConverter and
// StringConverter), JSON (JsonConverter, schemas off) or JSON in a schema
// envelope (JsonConverter, schemas on). Every header ferry reads lands
// decoded, on the right aggregate; the handler's Headers are decoded too.
func TestConsumerDecodesDebeziumHeadersOfEveryConverter(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.topic = "outbox.event.wallet" + strings.ReplaceAll(t.Name(), "/", "_")
	adm := kadm.NewClient(b.cl)
	resp, err := adm.CreateTopic(b.ctx, 1, 1, nil, b.topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	str := func(v string) string {
		return `{"schema":{"type":"string","optional":false},"payload":` + strconv.Quote(v) + `}`
	}
	converters := []struct {
		name            string
		id, key, typ    string
		aggType, seq, x string
	}{
		{"SimpleHeaderConverter", "e-1", "w-1", "Credited", "wallet", "7", "trace 1"},
		{"JsonConverter", `"e-2"`, `"w-2"`, `"Credited"`, `"wallet"`, `7`, `"trace 2"`},
		{"JsonConverter with schemas", str("e-3"), str("w-3"), str("Credited"), str("wallet"),
			`{"schema":{"type":"int64","optional":false},"payload":7}`, str("trace 3")},
	}
	var recs []*kgo.Record
	for _, c := range converters {
		recs = append(recs, &kgo.Record{Partition: 0, Key: []byte(c.key), Value: []byte(`{"amount":5}`), Headers: []kgo.RecordHeader{
			{Key: ferrykafka.HeaderDebeziumID, Value: []byte(c.id)},
			{Key: ferrybroker.HeaderEventType, Value: []byte(c.typ)},
			{Key: ferrybroker.HeaderAggregateType, Value: []byte(c.aggType)},
			{Key: ferrybroker.HeaderSequence, Value: []byte(c.seq)},
			{Key: "x-trace", Value: []byte(c.x)},
		}})
	}
	b.produce(t, recs...)
	got := make(chan ferrybroker.Delivery, len(recs))
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		got <- *d
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == int64(len(recs)) })
	require.NoError(t, c.Stop(b.ctx))
	close(got)
	i := 0
	for d := range got {
		n := strconv.Itoa(i + 1)
		name := converters[i].name
		require.Equal(t, "e-"+n, d.MessageID, name)
		require.Equal(t, "w-"+n, d.AggregateID, name)
		require.Equal(t, "wallet", d.AggregateType, name)
		require.Equal(t, "Credited", d.Type, name)
		require.Equal(t, int64(7), d.Sequence, name)
		require.Equal(t, "trace "+n, d.Headers["x-trace"], name)
		require.Equal(t, "wallet", d.Headers[ferrybroker.HeaderAggregateType], name)
		i++
	}
	require.Equal(t, len(recs), i)
	b.waitUnsettled(t, 0)
}

func TestConsumerMessageIDFallsBackToTheRecordsPosition(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 2)
	b.produce(t, &kgo.Record{Partition: 1, Value: []byte(`"a JSON string stays as it is"`)})
	got := make(chan ferrybroker.Delivery, 1)
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		got <- *d
		return nil
	}, ferrykafka.ConsumerConfig{})
	require.NoError(t, c.Start(b.ctx))
	d := <-got
	require.Equal(t, b.topic+"/1/0", d.MessageID)
	require.Equal(t, `"a JSON string stays as it is"`, string(d.Payload), "only a Debezium record is unwrapped")
	require.Empty(t, d.AggregateID)
}

func TestConsumerConfigIsChecked(t *testing.T) {
	t.Parallel()
	conn := []kgo.Opt{kgo.SeedBrokers("localhost:9092")}
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	for name, cfg := range map[string]*ferrykafka.ConsumerConfig{
		"Group":            {Topics: []string{"t"}, ParkTopic: "p"},
		"Topics":           {Group: "g", ParkTopic: "p"},
		"ParkTopic":        {Group: "g", Topics: []string{"t"}},
		"Concurrency":      {Group: "g", Topics: []string{"t"}, ParkTopic: "p", ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: -1}},
		"is also consumed": {Group: "g", Topics: []string{"t"}, ParkTopic: "t"},
		"RedeliveryPolicy": {Group: "g", Topics: []string{"t"}, ParkTopic: "p",
			ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: -1}}},
	} {
		_, err := ferrykafka.NewConsumer(conn, h, cfg)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, name)
		require.ErrorContains(t, err, name)
	}
	_, err := ferrykafka.NewConsumer(conn, h, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = ferrykafka.NewConsumer(nil, h, &ferrykafka.ConsumerConfig{Group: "g", Topics: []string{"t"}, ParkTopic: "p"})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
}

func TestConsumerStartNeedsTheTopics(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	c, err := ferrykafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(b.k.Seeds...)},
		func(context.Context, *ferrybroker.Delivery) error { return nil },
		&ferrykafka.ConsumerConfig{Group: b.group, Topics: []string{b.topic}, ParkTopic: "no-such-park-topic"})
	require.NoError(t, err)
	require.ErrorContains(t, c.Start(b.ctx), "topic no-such-park-topic does not exist")
	require.NoError(t, c.Stop(b.ctx))

	_, err = ferrykafka.DialConsumer(b.ctx, "kafka://user:s3cret@"+b.k.Seeds[0], nil, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.NotContains(t, err.Error(), "s3cret")
	d, err := ferrykafka.DialConsumer(b.ctx, seedURL(b.k.Seeds), func(context.Context, *ferrybroker.Delivery) error { return nil },
		&ferrykafka.ConsumerConfig{Group: b.group, Topics: []string{b.topic}, ParkTopic: b.park})
	require.NoError(t, err)
	require.NoError(t, d.Start(b.ctx))
	require.NoError(t, d.Stop(b.ctx))
}

// The group fences the member (a heartbeat answered UNKNOWN_MEMBER_ID)
// while a handler runs whose inbox transaction committed: its partition is
// lost, the handler's context is cancelled, and what it did is not
// committed, even though it returns nil. The consumer rejoins, the record
// comes again, and the inbox finds it applied.
func TestConsumerLostPartitionCommitsNothingInFlight(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	ib := newInboxBed(t)
	ids := []string{"evt-1", "evt-2", "evt-3"}
	for _, id := range ids {
		b.produce(t, event(0, id, "order-1", `{"amount":10}`))
	}
	inner := ib.handler()
	var first atomic.Bool
	lostSeen := make(chan struct{})
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if err := inner(ctx, d); err != nil {
			return err
		}
		if d.MessageID == "evt-1" && first.CompareAndSwap(false, true) {
			b.k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: b.group, Err: kerr.UnknownMemberID})
			select {
			case <-ctx.Done(): // the partition was lost
				close(lostSeen)
			case <-time.After(30 * time.Second):
				return errors.New("the partition was not lost within 30s")
			}
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1}, ClientOpts: []kgo.Opt{kgo.HeartbeatInterval(50 * time.Millisecond)}})
	require.NoError(t, c.Start(b.ctx))
	select {
	case <-lostSeen:
	case <-b.ctx.Done():
		t.Fatal("the partition was not lost")
	}
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 3 })
	require.NoError(t, c.Stop(b.ctx))
	st := c.Stats()
	require.Equal(t, int64(4), st.Delivered, "evt-1 twice: %+v", st)
	require.Equal(t, int64(1), st.Left, "evt-1's first handling was not committed: %+v", st)
	require.Equal(t, 1, ib.outcomes(ferry.InboxDuplicate))
	ib.requireOnce(t, ids)
	b.waitUnsettled(t, 0)
}

// A transient failure is retried in place: the partition waits, and the
// records after it are handled after it, in order.
func TestConsumerRetriesInPlaceAndThePartitionWaits(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.produce(t, event(0, "evt-a", "order-1", `{}`), event(0, "evt-b", "order-1", `{}`))
	var mu sync.Mutex
	var calls []string
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, fmt.Sprintf("%s#%d redelivered=%v", d.MessageID, d.DeliveryCount, d.Redelivered))
		if d.MessageID == "evt-a" && d.DeliveryCount < 3 {
			return errors.New("points service unavailable")
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 4}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 2 })
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, []string{"evt-a#1 redelivered=false", "evt-a#2 redelivered=true", "evt-a#3 redelivered=true",
		"evt-b#1 redelivered=false"}, calls)
	require.Equal(t, ferrybroker.ConsumerStats{Delivered: 4, Handled: 4, Acked: 2, Retried: 2}, c.Stats())
	b.waitUnsettled(t, 0)
}

// A partition whose first record keeps failing holds its records, past a
// few hundred of them without fetching more, while the other partition is
// handled to its end; once the record succeeds, its partition follows, in
// order.
func TestConsumerWaitingPartitionDoesNotHoldTheOthers(t *testing.T) {
	t.Parallel()
	const n = 700 // per partition: more than a partition buffers
	b := setupKafkaConsumer(t, 2)
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, event(0, fmt.Sprintf("p0-%d", i), "order-0", fmt.Sprintf(`{"n":%d}`, i)),
			event(1, fmt.Sprintf("p1-%d", i), "order-1", fmt.Sprintf(`{"n":%d}`, i)))
	}
	b.produce(t, recs...)
	var released atomic.Bool
	var mu sync.Mutex
	next := map[string]int{}
	var violations []string
	var p1Done atomic.Int64
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if d.AggregateID == "order-0" && !released.Load() {
			return errors.New("not yet")
		}
		var body struct{ N int }
		require.NoError(t, json.Unmarshal(d.Payload, &body))
		mu.Lock()
		defer mu.Unlock()
		if body.N != next[d.AggregateID] {
			violations = append(violations, fmt.Sprintf("%s: got %d, want %d", d.AggregateID, body.N, next[d.AggregateID]))
		}
		next[d.AggregateID] = body.N + 1
		if d.AggregateID == "order-1" {
			p1Done.Add(1)
		}
		return nil
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 1 << 20,
		RetryDelay: 2 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond}}})
	require.NoError(t, c.Start(b.ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { return p1Done.Load() == n }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
	testsvc.WaitFor(t, 30*time.Second, func() bool { return unsettledOf(t, b, 1) == 0 },
		func() string { return "partition 1 not committed to its end" })
	require.Equal(t, n, unsettledOf(t, b, 0), "partition 0 waits on its first record")
	released.Store(true)
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Acked == 2*n })
	require.NoError(t, c.Stop(b.ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	require.Equal(t, map[string]int{"order-0": n, "order-1": n}, next)
	b.waitUnsettled(t, 0)
}

// unsettledOf returns how many records of partition p lie past the
// group's committed offset.
func unsettledOf(t *testing.T, b *kafkaConsumerBundle, p int32) int {
	t.Helper()
	ctx := testsvc.Context(t, 30*time.Second)
	adm := kadm.NewClient(b.cl)
	ends, err := adm.ListEndOffsets(ctx, b.topic)
	require.NoError(t, err)
	committed, err := adm.FetchOffsets(ctx, b.group)
	require.NoError(t, err)
	end, ok := ends.Lookup(b.topic, p)
	require.True(t, ok)
	at := int64(0)
	if c, ok := committed.Lookup(b.topic, p); ok && c.At >= 0 {
		at = c.At
	}
	return int(end.Offset - at)
}

// A rebalance that moves a partition whose handler is running waits for
// it (up to RevokeTimeout, here longer than the test needs) and commits
// what it did before the partition moves: the new owner starts after it,
// and no record is handled twice.
func TestConsumerRevokeWaitsForHandlersAndCommitsThem(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 2)
	b.produce(t, event(0, "a0", "order-0", `{}`), event(0, "a1", "order-0", `{}`),
		event(1, "b0", "order-1", `{}`), event(1, "b1", "order-1", `{}`))
	var seen counts
	gate := make(chan struct{})
	held := make(chan string, 2)
	handler := func(ctx context.Context, d *ferrybroker.Delivery) error {
		if d.MessageID == "a0" || d.MessageID == "b0" {
			held <- d.MessageID
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		seen.add(d.MessageID)
		return nil
	}
	slowRevoke := []kgo.Opt{kgo.RebalanceTimeout(45 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	revoking := &logSignal{msg: "partitions revoking: waiting for their handlers in flight", ch: make(chan struct{})}
	a := b.consumer(t, handler, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Logger: slog.New(revoking)}, RevokeTimeout: 30 * time.Second, ClientOpts: slowRevoke})
	require.NoError(t, a.Start(b.ctx))
	<-held
	<-held
	c2 := b.consumer(t, handler, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2}, RevokeTimeout: 30 * time.Second, ClientOpts: slowRevoke})
	require.NoError(t, c2.Start(b.ctx))
	select {
	case <-revoking.ch: // B joined, and A's revoke waits for its handlers
	case <-b.ctx.Done():
		t.Fatal("no partition of A was revoked")
	}
	close(gate)
	testsvc.WaitFor(t, time.Minute, func() bool { return seen.total() == 4 && a.Stats().InFlight == 0 && c2.Stats().InFlight == 0 },
		func() string { return fmt.Sprintf("a %+v, b %+v", a.Stats(), c2.Stats()) })
	b.waitUnsettled(t, 0)
	require.NoError(t, a.Stop(b.ctx))
	require.NoError(t, c2.Stop(b.ctx))
	for _, id := range []string{"a0", "a1", "b0", "b1"} {
		require.Equal(t, 1, seen.get(id), "%s handled once", id)
	}
	require.Zero(t, a.Stats().Left, "no handler was cut off: %+v", a.Stats())
	require.Positive(t, c2.Stats().Acked, "B took the revoked partition after its first record: %+v", c2.Stats())
	require.Equal(t, int64(4), a.Stats().Acked+c2.Stats().Acked)
}

// logSignal is a slog.Handler that closes ch on the first record with
// message msg: a test's way to know that the consumer got somewhere.
type logSignal struct {
	msg  string
	ch   chan struct{}
	once sync.Once
}

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logSignal) WithGroup(string) slog.Handler            { return l }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.ch) })
	}
	return nil
}

// counts counts handler calls per message id.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[id]++
}

func (c *counts) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *counts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.m {
		n += v
	}
	return n
}

// HandlerTimeout ends a handler through its context; that is a transient
// failure, parked at the delivery limit.
func TestConsumerHandlerTimeout(t *testing.T) {
	t.Parallel()
	b := setupKafkaConsumer(t, 1)
	b.produce(t, event(0, "evt-slow", "order-1", `{}`))
	c := b.consumer(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	}, ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{HandlerTimeout: 20 * time.Millisecond, Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 2, RetryDelay: time.Millisecond}}})
	require.NoError(t, c.Start(b.ctx))
	waitStats(t, c, func(s ferrybroker.ConsumerStats) bool { return s.Parked == 1 })
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, ferrybroker.ConsumerStats{Delivered: 2, Handled: 2, Retried: 1, Parked: 1}, c.Stats())
	p := b.parked(t, 1)
	require.Contains(t, headers(p[0])[ferrybroker.HeaderParkReason], "failed on delivery 2 of at most 2: context deadline exceeded")
	b.waitUnsettled(t, 0)
}
