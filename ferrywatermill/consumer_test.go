package ferrywatermill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrywatermill"
)

// A message without an id is still counted (by its payload), so a
// transient failure ends parked at the delivery limit rather than retried
// for ever. GoChannel stands in for a broker: this is the counting logic;
// the consumer's guarantees are proven on RabbitMQ in
// integration/ferrywatermill.
func TestConsumerCountsMessagesWithoutAnID(t *testing.T) {
	pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer pubsub.Close()
	parked, err := pubsub.Subscribe(context.Background(), "parked")
	require.NoError(t, err)
	counts := make(chan int, 10)
	c, err := ferrywatermill.NewConsumer(pubsub, func(_ context.Context, d *ferrybroker.Delivery) error {
		counts <- d.DeliveryCount
		return errors.New("points service down")
	}, &ferrywatermill.ConsumerConfig{Topic: "orders", Park: pubsub, ParkTopic: "parked", ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1, Logger: quiet(), Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	defer c.Stop(context.Background())
	require.NoError(t, pubsub.Publish("orders", message.NewMessage("", []byte(`{"order":42}`))))
	select {
	case p := <-parked:
		p.Ack()
		require.Contains(t, p.Metadata.Get(ferrybroker.HeaderParkReason), "failed on delivery 3 of at most 3: points service down")
	case <-time.After(30 * time.Second):
		t.Fatalf("not parked: %+v", c.Stats())
	}
	require.Equal(t, []int{1, 2, 3}, []int{<-counts, <-counts, <-counts})
}

// panickySub is a Watermill subscriber whose Subscribe panics from its
// call number panicAt on; the subscriptions made before stay open until
// their context ends.
type panickySub struct {
	mu      sync.Mutex
	calls   int
	panicAt int
	ctxs    []context.Context
}

func (s *panickySub) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.panicAt > 0 && s.calls >= s.panicAt {
		panic("subscribe on a closed channel")
	}
	s.ctxs = append(s.ctxs, ctx)
	ch := make(chan *message.Message)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch, nil
}

func (s *panickySub) Close() error { return nil }

// A panic in the Watermill subscriber's Subscribe is Start's error, as a
// panic of the publisher is Publish's and Close's: the subscriptions made
// before it are cancelled, and the consumer can be started again.
func TestConsumerStartRecoversAPanicOfSubscribe(t *testing.T) {
	sub := &panickySub{panicAt: 2}
	c, err := ferrywatermill.NewConsumer(sub, func(context.Context, *ferrybroker.Delivery) error { return nil },
		&ferrywatermill.ConsumerConfig{Topic: "orders", Park: &fakePub{}, ParkTopic: "parked",
			ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Logger: quiet()}})
	require.NoError(t, err)
	require.NotPanics(t, func() { err = c.Start(context.Background()) })
	require.EqualError(t, err, `ferrywatermill: subscribe to "orders": the Watermill subscriber panicked: subscribe on a closed channel`)
	require.Len(t, sub.ctxs, 1)
	select {
	case <-sub.ctxs[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription made before the panic was not cancelled")
	}

	sub.mu.Lock()
	sub.panicAt = 0
	sub.mu.Unlock()
	require.NoError(t, c.Start(context.Background()))
	require.NoError(t, c.Stop(context.Background()))
}
