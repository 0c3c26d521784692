package ferrynats_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

type consumerBundle struct {
	ctx     context.Context
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
	park    string
}

func setupConsumer(t *testing.T) *consumerBundle {
	t.Helper()
	b := &consumerBundle{ctx: testsvc.Context(t, 2*time.Minute), nc: testsvc.NATS(t)}
	var prefix string
	b.stream, prefix = testsvc.JetStreamStream(t, b.nc)
	b.subject, b.park = prefix+".orders", prefix+".parked"
	var err error
	b.js, err = jetstream.New(b.nc)
	require.NoError(t, err)
	return b
}

func (b *consumerBundle) publish(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		msg := nats.NewMsg(b.subject)
		msg.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		msg.Header.Set(ferrybroker.HeaderEventType, "OrderPaid")
		_, err := b.js.PublishMsg(b.ctx, msg, jetstream.WithMsgID(fmt.Sprintf("evt-%d", i)))
		require.NoError(t, err)
	}
}

func (b *consumerBundle) consumer(t *testing.T, h ferrybroker.Handler, mod func(*ferrynats.ConsumerConfig)) *ferrynats.Consumer {
	t.Helper()
	cfg := &ferrynats.ConsumerConfig{
		Stream: b.stream, Durable: "points", FilterSubjects: []string{b.subject}, Declare: true, ParkSubject: b.park,
		RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
	}
	if mod != nil {
		mod(cfg)
	}
	c, err := ferrynats.NewConsumer(b.js, h, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func (b *consumerBundle) settled(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		cons, err := b.js.Consumer(b.ctx, b.stream, "points")
		require.NoError(t, err)
		info, err := cons.Info(b.ctx)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	testsvc.WaitFor(t, d, cond, nil)
}

func TestConsumerAcksHandledMessages(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 50)
	var mu sync.Mutex
	seen := map[string]int{}
	c := b.consumer(t, func(_ context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		seen[d.MessageID]++
		mu.Unlock()
		require.Equal(t, "OrderPaid", d.Type)
		return nil
	}, nil)
	b.settled(t)
	require.NoError(t, c.Stop(b.ctx))
	require.Len(t, seen, 50)
	for id, n := range seen {
		require.Equal(t, 1, n, id)
	}
	require.Equal(t, int64(50), c.Stats().Acked)
}

func TestConsumerRetriesTransientFailures(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 1)
	var deliveries []int
	var mu sync.Mutex
	c := b.consumer(t, func(_ context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		deliveries = append(deliveries, d.DeliveryCount)
		if d.DeliveryCount < 3 {
			return errors.New("database unavailable")
		}
		return nil
	}, nil)
	waitFor(t, 30*time.Second, func() bool { return c.Stats().Acked == 1 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, deliveries)
	require.Equal(t, int64(2), c.Stats().Retried)
}

func parked(t *testing.T, b *consumerBundle, want int) []jetstream.Msg {
	t.Helper()
	cons, err := b.js.OrderedConsumer(b.ctx, b.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.park}})
	require.NoError(t, err)
	var out []jetstream.Msg
	for len(out) < want {
		batch, err := cons.Fetch(want-len(out), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := len(out)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		require.Greater(t, len(out), n, "parked messages did not arrive")
	}
	return out
}

func TestConsumerParksPoisonWithItsReason(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 3)
	var calls atomic.Int64
	c := b.consumer(t, func(_ context.Context, d *ferrybroker.Delivery) error {
		calls.Add(1)
		if d.MessageID == "evt-1" {
			return ferrytype.Poison(errors.New("payload: unknown currency XXX"))
		}
		return nil
	}, nil)
	b.settled(t)
	require.NoError(t, c.Stop(b.ctx))
	require.Equal(t, int64(3), calls.Load(), "poison is parked at once, not retried")
	got := parked(t, b, 1)
	require.Equal(t, "payload: unknown currency XXX", got[0].Headers().Get(ferrynats.HeaderParkReason))
	require.Equal(t, b.subject, got[0].Headers().Get(ferrynats.HeaderParkSubject))
	require.Equal(t, `{"n":1}`, string(got[0].Data()))
	st := c.Stats()
	require.Equal(t, int64(1), st.Parked)
	require.Equal(t, int64(2), st.Acked)
}

func TestConsumerParksAfterMaxDeliver(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 1)
	var calls atomic.Int64
	c := b.consumer(t, func(context.Context, *ferrybroker.Delivery) error {
		calls.Add(1)
		return errors.New("still failing")
	}, func(c *ferrynats.ConsumerConfig) { c.MaxDeliver = 3 })
	waitFor(t, 30*time.Second, func() bool { return c.Stats().Parked == 1 })
	b.settled(t)
	require.Equal(t, int64(3), calls.Load())
	got := parked(t, b, 1)
	require.Equal(t, "failed 3 deliveries: still failing", got[0].Headers().Get(ferrynats.HeaderParkReason))
	require.Equal(t, "3", got[0].Headers().Get(ferrynats.HeaderParkDeliveries))
}

func TestConsumerStopFinishesInFlightAndLosesNothing(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 20)
	release := make(chan struct{})
	started := make(chan struct{}, 20)
	var mu sync.Mutex
	handled := map[string]int{}
	handler := func(_ context.Context, d *ferrybroker.Delivery) error {
		started <- struct{}{}
		<-release
		mu.Lock()
		handled[d.MessageID]++
		mu.Unlock()
		return nil
	}
	first := b.consumer(t, handler, func(c *ferrynats.ConsumerConfig) { c.Concurrency = 2 })
	<-started
	<-started
	stopped := make(chan error)
	go func() { stopped <- first.Stop(b.ctx) }()
	close(release)
	require.NoError(t, <-stopped)
	acked := first.Stats().Acked
	require.GreaterOrEqual(t, acked, int64(2), "in-flight handlers finished and acked")
	// A new consumer on the same durable takes the rest.
	second := b.consumer(t, handler, nil)
	b.settled(t)
	require.NoError(t, second.Stop(b.ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, handled, 20, "nothing lost across the stop")
	require.Equal(t, int64(20), acked+second.Stats().Acked)
}
