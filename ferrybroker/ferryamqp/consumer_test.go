package ferryamqp_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/internal/testenv"
)

// consumerHarness runs the consumer suite on a fresh queue of type typ bound
// to amq.topic, declared (with its parking queue) by the consumers.
func consumerHarness(typ ferryamqp.QueueType) ferrybrokertest.ConsumerHarness {
	return ferrybrokertest.ConsumerHarness{New: func(t *testing.T) ferrybrokertest.ConsumerSetup {
		conn := dial(t)
		ctx := testenv.Context(t, 5*time.Minute)
		queue, rk := testenv.Name("ferry_cq_"), testenv.Name("ferry.rk.")
		ferryamqptest.DeleteRabbitMQQueue(t, queue)
		ferryamqptest.DeleteRabbitMQQueue(t, queue+".parking")
		config := func(o ferrybrokertest.ConsumerOptions) *ferryamqp.ConsumerConfig {
			return &ferryamqp.ConsumerConfig{
				ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: o.Concurrency, Redelivery: o.Redelivery, Hooks: o.Hooks, Validate: o.Validate},
				Declare:         true,
				Topology:        ferryamqp.Topology{Bindings: []ferryamqp.Binding{{Queue: queue, Exchange: "amq.topic", RoutingKey: rk}}},
			}
		}
		// Declare the queue now, as consumers will, so that publishes
		// route.
		c, err := ferryamqp.NewConsumer(conn, queue, func(context.Context, *ferrybroker.Delivery) error { return nil },
			config(ferrybrokertest.ConsumerOptions{}))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Stop(ctx))

		ch, err := conn.Channel()
		require.NoError(t, err)
		require.NoError(t, ch.Confirm(false))
		t.Cleanup(func() { _ = ch.Close() })
		return ferrybrokertest.ConsumerSetup{
			Route: rk,
			Publish: func(t *testing.T, m ferrybrokertest.RawMessage) {
				h := amqp.Table{}
				for k, v := range m.Headers {
					h[k] = v
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", rk, true, false, amqp.Publishing{
					MessageId: m.ID, Headers: h, Body: m.Payload, DeliveryMode: amqp.Persistent})
				require.NoError(t, err)
				ok, err := dc.WaitContext(ctx)
				require.NoError(t, err)
				require.True(t, ok, "RabbitMQ nacked the publish")
			},
			NewConsumer: func(t *testing.T, h ferrybroker.Handler, o ferrybrokertest.ConsumerOptions) ferrybroker.Consumer {
				c, err := ferryamqp.NewConsumer(conn, queue, h, config(o))
				require.NoError(t, err)
				return c
			},
			Parked: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(ferryamqptest.ReadRabbitMQQueue(t, conn, queue+".parking", want, d))
			},
			BreakParking: func(t *testing.T) {
				ch, err := conn.Channel()
				require.NoError(t, err)
				defer ch.Close()
				_, err = ch.QueueDelete(queue+".parking", false, false, false)
				require.NoError(t, err)
			},
			Unsettled: func(t *testing.T) int {
				ch, err := conn.Channel()
				require.NoError(t, err)
				defer ch.Close()
				q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
				require.NoError(t, err)
				return q.Messages
			},
		}
	}}
}

func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, consumerHarness(ferryamqp.QueueQuorum))
}

// Classic queues keep no delivery count: the consumer counts failures per
// message id.
func TestConsumerConformanceClassicQueue(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, consumerHarness(ferryamqp.QueueClassic))
}

// A consumer started on a queue that does not exist says so, naming the
// queue it was given (not its parking queue) and how to declare it; with
// Declare it declares both.
func TestConsumerMissingQueue(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	ctx := testenv.Context(t, time.Minute)
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }

	t.Run("NamesTheQueue", func(t *testing.T) {
		queue := testenv.Name("ferry_missing_")
		c, err := ferryamqp.NewConsumer(conn, queue, h, nil)
		require.NoError(t, err)
		err = c.Start(ctx)
		require.Error(t, err)
		require.ErrorContains(t, err, "queue "+queue+" does not exist")
		require.NotContains(t, err.Error(), ferryamqp.ParkingSuffix)
		require.ErrorContains(t, err, "Declare")
		var ae *amqp.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, amqp.NotFound, ae.Code)
	})
	t.Run("NamesTheMissingParkingQueue", func(t *testing.T) {
		queue := testenv.Name("ferry_noparking_")
		ferryamqptest.DeleteRabbitMQQueue(t, queue)
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		require.NoError(t, err)
		require.NoError(t, ch.Close())
		c, err := ferryamqp.NewConsumer(conn, queue, h, nil)
		require.NoError(t, err)
		err = c.Start(ctx)
		require.ErrorContains(t, err, "parking queue "+queue+ferryamqp.ParkingSuffix+" of queue "+queue+" does not exist")
	})
	t.Run("DeclareCreatesIt", func(t *testing.T) {
		queue := testenv.Name("ferry_declared_")
		ferryamqptest.DeleteRabbitMQQueue(t, queue)
		ferryamqptest.DeleteRabbitMQQueue(t, queue+ferryamqp.ParkingSuffix)
		c, err := ferryamqp.NewConsumer(conn, queue, h, &ferryamqp.ConsumerConfig{Declare: true})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Stop(ctx))
	})
}
