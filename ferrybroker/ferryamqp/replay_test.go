package ferryamqp

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

func refuseAll(context.Context, *ferrybroker.Delivery) error {
	return ferrytype.Poison(errors.New("unknown event type OrderPaid"))
}

// parkAll publishes n messages and lets a consumer whose handler refuses
// every one park them all, through the real consumer path.
func (b *consumerBundle) parkAll(t *testing.T, n int) []ferrytype.Message {
	t.Helper()
	msgs := b.publish(t, n)
	c := b.start(t, b.conn, refuseAll, b.config(ConsumerConfig{}))
	waitUntil(t, time.Minute, func() bool { return c.Stats().Parked == int64(n) })
	require.NoError(t, c.Stop(b.ctx))
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == n })
	return msgs
}

func idSet(msgs []ferrytype.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	sort.Strings(out)
	return out
}

// handledOnce is a fixed handler that records what it handled.
type handledOnce struct {
	mu     sync.Mutex
	counts map[string]int
	last   map[string]*ferrybroker.Delivery
}

func (h *handledOnce) handle(_ context.Context, d *ferrybroker.Delivery) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[d.MessageID]++
	h.last[d.MessageID] = d
	return nil
}

func (h *handledOnce) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.counts)
}

// Messages parked by a consumer whose handler refused them are replayed,
// once the handler is fixed, to the queue they came from: each is handled
// exactly once, with its id, payload and original routing key, and the
// parking queue ends empty.
func TestReplayParkedMovesEachMessageBackOnce(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	msgs := b.parkAll(t, 25)

	h := &handledOnce{counts: map[string]int{}, last: map[string]*ferrybroker.Delivery{}}
	c := b.start(t, b.conn, h.handle, b.config(ConsumerConfig{}))
	var progress []ReplayResult
	res, err := ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, Batch: 10,
		Progress: func(r ReplayResult) { progress = append(progress, r) }})
	require.NoError(t, err)
	require.Equal(t, 25, res.Depth)
	require.Equal(t, 25, res.Examined)
	require.Equal(t, 25, res.Replayed)
	require.Zero(t, res.Skipped)
	require.Zero(t, res.Failed)
	require.Len(t, res.Preview, 10)
	require.Len(t, progress, 3, "one progress report per batch of 10")
	require.Equal(t, []int{10, 20, 25}, []int{progress[0].Replayed, progress[1].Replayed, progress[2].Replayed})

	waitUntil(t, time.Minute, func() bool { return h.distinct() == 25 && c.Stats().Acked == 25 })
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, int64(25), c.Stats().Delivered, "each replayed message delivered once")
	byID := map[string]ferrytype.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for id, n := range h.counts {
		require.Equal(t, 1, n, "message %s handled %d times", id, n)
		d := h.last[id]
		require.Equal(t, string(byID[id].Payload), string(d.Payload))
		require.Equal(t, b.rk, d.Route, "the handler sees the original routing key")
		require.Equal(t, "1", d.Headers[ferrybroker.HeaderReplayCount])
		require.NotEmpty(t, d.Headers[ferrybroker.HeaderReplayedAt])
		require.Contains(t, d.Headers[ferrybroker.HeaderParkReason], "unknown event type", "park headers are kept")
		require.Equal(t, "OrderPaid", d.Type)
	}
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 0 })
	left, _ := b.depth(t, b.queue)
	require.Zero(t, left)
}

// Max bounds the messages one run moves; the rest stay parked for the
// next run, and the two runs together move each message once.
func TestReplayParkedHonoursMax(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	msgs := b.parkAll(t, 10)
	res, err := ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, Max: 4, Batch: 3})
	require.NoError(t, err)
	require.Equal(t, 4, res.Replayed)
	require.Equal(t, 4, res.Examined)
	moved, _ := b.depth(t, b.queue)
	require.Equal(t, 4, moved, "confirmed before ReplayParked returned")
	// Acks are asynchronous: the parking queue's count follows.
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 6 })

	res, err = ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue})
	require.NoError(t, err)
	require.Equal(t, 6, res.Replayed)
	got := ferryamqptest.ReadRabbitMQQueue(t, b.conn, b.queue, 10, time.Minute)
	var gotIDs []string
	for _, d := range got {
		gotIDs = append(gotIDs, d.MessageId)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		require.Equal(t, "", d.Exchange, "straight to the queue through the default exchange")
	}
	sort.Strings(gotIDs)
	require.Equal(t, idSet(msgs), gotIDs, "each message moved once")
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 0 })
}

// A dry run counts and shows what would move and moves nothing; ListParked
// shows the first messages and leaves them parked.
func TestReplayParkedDryRunMovesNothing(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	msgs := b.parkAll(t, 10)
	res, err := ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, DryRun: true, Preview: 3})
	require.NoError(t, err)
	require.True(t, res.DryRun)
	require.Equal(t, 10, res.Replayed)
	require.Len(t, res.Preview, 3)
	p := res.Preview[0]
	var orig *ferrytype.Message
	for i := range msgs {
		if msgs[i].ID == p.MessageID {
			orig = &msgs[i]
		}
	}
	require.NotNil(t, orig, "preview of a parked message")
	require.Equal(t, b.queue, p.Source)
	require.Equal(t, "amq.topic", p.Exchange)
	require.Equal(t, b.rk, p.RoutingKey)
	require.Contains(t, p.Reason, "unknown event type")
	require.False(t, p.DeadLettered)
	require.Equal(t, 1, p.DeliveryCount)
	require.WithinDuration(t, time.Now(), p.ParkedAt, time.Hour)
	require.Equal(t, string(orig.Payload), string(p.Payload))

	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 10 })
	moved, _ := b.depth(t, b.queue)
	require.Zero(t, moved)

	list, err := ListParked(b.ctx, b.conn, b.queue+".parking", 4)
	require.NoError(t, err)
	require.Equal(t, 10, list.Depth)
	require.Len(t, list.Messages, 4)
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 10 })
	// Everything is still there, once.
	got := ferryamqptest.ReadRabbitMQQueue(t, b.conn, b.queue+".parking", 10, time.Minute)
	var gotIDs []string
	for _, d := range got {
		gotIDs = append(gotIDs, d.MessageId)
	}
	sort.Strings(gotIDs)
	require.Equal(t, idSet(msgs), gotIDs)
}

// A message parked from another queue (a shared parking queue) stays
// parked.
func TestReplayParkedSkipsAnotherQueuesMessages(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	b.parkAll(t, 3)
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(b.ctx, "", b.queue+".parking", true, false, amqp.Publishing{
		MessageId: "foreign-1", Body: []byte(`{}`), DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{ferrybroker.HeaderParkSource: "another_queue", ferrybroker.HeaderParkReason: "poison"}})
	require.NoError(t, err)
	ok, err := dc.WaitContext(b.ctx)
	require.NoError(t, err)
	require.True(t, ok)

	res, err := ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue})
	require.NoError(t, err)
	require.Equal(t, 3, res.Replayed)
	require.Equal(t, 1, res.Skipped)
	require.Equal(t, 4, res.Examined)
	waitUntil(t, time.Minute, func() bool { m, _ := b.depth(t, b.queue+".parking"); return m == 1 })
	left := ferryamqptest.ReadRabbitMQQueue(t, b.conn, b.queue+".parking", 1, time.Minute)
	require.Len(t, left, 1)
	require.Equal(t, "foreign-1", left[0].MessageId)
}

// A replayed message whose handler still fails is parked again with the
// routing key it was first published with, and the run ends: it takes no
// more messages than the parking queue held when it began.
func TestReplayParkedMessageParkedAgainKeepsItsOrigin(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	b.parkAll(t, 5)
	c := b.start(t, b.conn, refuseAll, b.config(ConsumerConfig{}))
	res, err := ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, Batch: 2})
	require.NoError(t, err)
	require.Equal(t, 5, res.Replayed)
	require.Equal(t, 5, res.Examined)
	waitUntil(t, time.Minute, func() bool { return c.Stats().Parked == 5 })
	require.NoError(t, c.Stop(b.ctx))
	got := ferryamqptest.ReadRabbitMQQueue(t, b.conn, b.queue+".parking", 5, time.Minute)
	require.Len(t, got, 5)
	for _, d := range got {
		require.Equal(t, b.rk, d.Headers[ferrybroker.HeaderParkRoute])
		require.Equal(t, "amq.topic", d.Headers[HeaderParkExchange])
		require.Equal(t, b.queue, d.Headers[ferrybroker.HeaderParkSource])
		require.Equal(t, "1", d.Headers[ferrybroker.HeaderReplayCount])
	}
}

func TestReplayParkedErrors(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	_, err := ReplayParked(b.ctx, b.conn, ReplayOptions{})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, ParkingQueue: b.queue})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: b.queue, Batch: 20000})
	require.ErrorContains(t, err, "ReplayOptions.Batch")
	missing := testenv.Name("ferry_missing_")
	_, err = ReplayParked(b.ctx, b.conn, ReplayOptions{Queue: missing})
	require.ErrorContains(t, err, "queue "+missing+" does not exist")
	var ae *amqp.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, amqp.NotFound, ae.Code)
	_, err = ListParked(b.ctx, b.conn, missing, 10)
	require.ErrorContains(t, err, "does not exist")
	_, err = ListParked(b.ctx, b.conn, b.queue+".parking", 0)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = Connect(b.ctx, "amqp://u:s3cr3tpw@127.0.0.1:1/", &ConnectionConfig{DialTimeout: time.Second})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cr3tpw")
}

// A message RabbitMQ dead-lettered itself (past the delivery limit) is
// described from x-death, and its replayed copy records where it came
// from, as a consumer's park headers would.
func TestParkedMessageFromXDeath(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 2, 40, 44, 0, time.UTC)
	d := &amqp.Delivery{MessageId: "evt-1", Type: "OrderPaid", Body: []byte(`{"i":1}`), DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{
			"x-delivery-count": int64(3),
			"x-death": []any{amqp.Table{"queue": "points", "exchange": "amq.topic", "reason": "delivery_limit",
				"routing-keys": []any{"orders.42.paid"}, "count": int64(1), "time": at}},
			"x-first-death-queue": "points", "x-first-death-reason": "delivery_limit",
		}}
	pm := parkedMessage(d)
	require.True(t, pm.DeadLettered)
	require.Equal(t, "points", pm.Source)
	require.Equal(t, "amq.topic", pm.Exchange)
	require.Equal(t, "orders.42.paid", pm.RoutingKey)
	require.Equal(t, "dead-lettered by RabbitMQ: delivery_limit", pm.Reason)
	require.Equal(t, at, pm.ParkedAt)
	require.Equal(t, 3, pm.Returns)

	cp := replayCopy(d, &pm, at)
	require.Equal(t, "points", cp.Headers[ferrybroker.HeaderParkSource])
	require.Equal(t, "orders.42.paid", cp.Headers[ferrybroker.HeaderParkRoute])
	require.Equal(t, "amq.topic", cp.Headers[HeaderParkExchange])
	require.Equal(t, "1", cp.Headers[ferrybroker.HeaderReplayCount])
	require.NotContains(t, cp.Headers, "x-delivery-count")
	require.Equal(t, "evt-1", cp.MessageId)
	require.Equal(t, amqp.Persistent, cp.DeliveryMode)

	// Parked by a consumer after an earlier dead-lettering: the consumer's
	// record is the later one.
	d.Headers[ferrybroker.HeaderParkSource] = "points"
	d.Headers[ferrybroker.HeaderParkRoute] = "orders.42.paid"
	d.Headers[ferrybroker.HeaderParkReason] = "poison: bad amount"
	d.Headers[ferrybroker.HeaderParkedAt] = at.Add(time.Hour).Format(time.RFC3339Nano)
	d.Headers[ferrybroker.HeaderReplayCount] = "2"
	pm = parkedMessage(d)
	require.False(t, pm.DeadLettered)
	require.Equal(t, "poison: bad amount", pm.Reason)
	require.Equal(t, 2, pm.Replays)
	require.Equal(t, "3", replayCopy(d, &pm, at).Headers[ferrybroker.HeaderReplayCount])

	// A replayed delivery is routed to the queue by name; the consumer
	// restores the original routing key from the headers, and only then.
	rd := &amqp.Delivery{Exchange: "", RoutingKey: "points", Headers: replayCopy(d, &pm, at).Headers}
	ex, key, ok := replayedRoute(rd, "points")
	require.True(t, ok)
	require.Equal(t, "orders.42.paid", key)
	require.Equal(t, "", ex)
	_, _, ok = replayedRoute(&amqp.Delivery{Exchange: "amq.topic", RoutingKey: "points", Headers: rd.Headers}, "points")
	require.False(t, ok)
	_, _, ok = replayedRoute(&amqp.Delivery{RoutingKey: "points", Headers: amqp.Table{ferrybroker.HeaderParkRoute: "x"}}, "points")
	require.False(t, ok, "not replayed")
}
