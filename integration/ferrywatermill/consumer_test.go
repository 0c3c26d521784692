package ferrywatermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// declareQueue declares a durable classic queue as watermill-amqp's
// durable queue config does, deleted when the test ends.
func declareQueue(t *testing.T, conn *amqp.Connection, name string) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	testsvc.DeleteRabbitMQQueue(t, name)
}

// publishRaw publishes m to queue as a Watermill application would (its
// id in watermill-amqp's UUID header too) and waits for the confirm.
func publishRaw(t *testing.T, conn *amqp.Connection, queue string, m ferrybrokertest.RawMessage) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	h := amqp.Table{}
	for k, v := range m.Headers {
		h[k] = v
	}
	if m.ID != "" {
		h[wamqp.DefaultMessageUUIDHeaderKey] = m.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		MessageId: m.ID, Headers: h, Body: m.Payload, DeliveryMode: amqp.Persistent})
	require.NoError(t, err)
	ok, err := conf.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "publish to %s nacked", queue)
}

// Any Watermill subscriber as a ferry consumer, here watermill-amqp's on a
// durable queue (one message prefetched per subscription), parking
// through a watermill-amqp publisher with confirms.
func TestConsumerConformanceRabbitMQ(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, ferrybrokertest.ConsumerHarness{New: func(t *testing.T) ferrybrokertest.ConsumerSetup {
		conn := testsvc.RabbitMQ(t)
		queue, park := testsvc.Name("ferry.wm.q."), testsvc.Name("ferry.wm.park.")
		declareQueue(t, conn, queue)
		declareQueue(t, conn, park)
		// The park publisher reaches RabbitMQ through a proxy that
		// BreakParking cuts.
		parkURL, parkProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvAMQP))
		parkPub := amqpPublisher(t, parkURL)
		s := ferrybrokertest.ConsumerSetup{
			Route:   queue,
			Publish: func(t *testing.T, m ferrybrokertest.RawMessage) { publishRaw(t, conn, queue, m) },
			NewConsumer: func(t *testing.T, h ferrybroker.Handler, o ferrybrokertest.ConsumerOptions) ferrybroker.Consumer {
				sub, err := wamqp.NewSubscriber(amqpConfig(testsvc.URL(testsvc.EnvAMQP)), watermill.NopLogger{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Close() })
				c, err := ferrywatermill.NewConsumer(sub, h, &ferrywatermill.ConsumerConfig{
					Topic: queue, Park: parkPub, ParkTopic: park, ConsumerOptions: ferrybroker.ConsumerOptions{ParkTimeout: 5 * time.Second, Concurrency: o.Concurrency, Redelivery: o.Redelivery, Hooks: o.Hooks, Validate: o.Validate},
				})
				require.NoError(t, err)
				return c
			},
			Parked: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return receivedAMQP(testsvc.ReadRabbitMQQueue(t, conn, park, want, d))
			},
			Unsettled: func(t *testing.T) int {
				ch, err := conn.Channel()
				require.NoError(t, err)
				defer ch.Close()
				q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
				require.NoError(t, err)
				return q.Messages
			},
			BreakParking: func(*testing.T) { parkProxy.Cut() },
		}
		if raceBuild {
			s.BreakParking = nil // see upstreamRace
		}
		return s
	}})
}
