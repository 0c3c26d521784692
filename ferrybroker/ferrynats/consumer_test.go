package ferrynats_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats/ferrynatstest"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, ferrynatstest.ConsumerHarness(ferrynatstest.NATS))
}

func TestConsumerConfigErrors(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	_, err = ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{Stream: "S", Durable: "d"})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "ParkSubject is required")
	_, err = ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{Stream: "S", Durable: "d", ParkSubject: "p",
		ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: -1}}})
	require.ErrorContains(t, err, "ConsumerConfig.Redelivery: ")
	require.ErrorContains(t, err, "RedeliveryPolicy.MaxDeliveries -1 must be positive")
}
