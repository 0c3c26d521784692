package ferryamqp_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// dial opens a connection of the test's own, closed when the test ends.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	testsvc.UseRabbitMQ(t)
	conn, err := amqp.Dial(testsvc.URL(testsvc.EnvAMQP))
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func received(ds []amqp.Delivery) []ferrybrokertest.Received {
	out := make([]ferrybrokertest.Received, 0, len(ds))
	for _, d := range ds {
		h := map[string]string{}
		for k, v := range d.Headers {
			if s, ok := v.(string); ok {
				h[k] = s
			}
		}
		out = append(out, ferrybrokertest.Received{ID: d.MessageId, Route: d.RoutingKey, Payload: d.Body, Headers: h})
	}
	return out
}

func harness(queueType string) ferrybrokertest.Harness {
	return ferrybrokertest.Harness{New: func(t *testing.T) ferrybrokertest.Setup {
		reader := testsvc.RabbitMQ(t)
		q := testsvc.RabbitMQQueue(t, reader, queueType, nil)
		// The publisher gets its own connection, so that Break does not
		// cut the test's reader.
		pubConn := dial(t)
		p, err := ferryamqp.New(testsvc.Context(t, 10*time.Second), pubConn, &ferryamqp.Config{
			Topology: ferryamqp.Topology{Queues: []ferryamqp.Queue{{Name: q.Name}}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      q.RoutingKey,
			Unroutable: testsvc.Name("ferry.unbound."),
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(testsvc.ReadRabbitMQQueue(t, reader, q.Name, want, d))
			},
			Break: func(*testing.T) { _ = pubConn.Close() },
		}
	}}
}

func TestConformance(t *testing.T) {
	t.Run("Quorum", func(t *testing.T) { ferrybrokertest.Exercise(t, harness("quorum")) })
	t.Run("Classic", func(t *testing.T) { ferrybrokertest.Exercise(t, harness("classic")) })
}
