package ferrywatermill_test

import (
	"context"
	"errors"
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
