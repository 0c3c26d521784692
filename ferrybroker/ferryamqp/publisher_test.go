package ferryamqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// dial opens a connection of the test's own, closed when the test ends.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	ferryamqptest.UseRabbitMQ(t)
	conn, err := amqp.Dial(testenv.URL(testenv.EnvAMQP))
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
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
		reader := ferryamqptest.RabbitMQ(t)
		q := ferryamqptest.RabbitMQQueue(t, reader, queueType, nil)
		// The publisher gets its own connection, so that Break does not
		// cut the test's reader.
		pubConn := dial(t)
		p, err := ferryamqp.New(testenv.Context(t, 10*time.Second), pubConn, &ferryamqp.Config{
			Topology: ferryamqp.Topology{Queues: []ferryamqp.Queue{{Name: q.Name}}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      q.RoutingKey,
			Unroutable: testenv.Name("ferry.unbound."),
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(ferryamqptest.ReadRabbitMQQueue(t, reader, q.Name, want, d))
			},
			Break: func(*testing.T) { _ = pubConn.Close() },
		}
	}, NewDialed: func(t *testing.T) ferrybrokertest.Setup {
		reader := ferryamqptest.RabbitMQ(t)
		q := ferryamqptest.RabbitMQQueue(t, reader, queueType, nil)
		url, proxy := testenv.Proxy(t, testenv.URL(testenv.EnvAMQP))
		p, err := ferryamqp.Dial(testenv.Context(t, 10*time.Second), url, &ferryamqp.Config{
			Topology:      ferryamqp.Topology{Queues: []ferryamqp.Queue{{Name: q.Name}}},
			ReconnectWait: 100 * time.Millisecond,
			Connection: ferryamqp.ConnectionConfig{DialTimeout: 2 * time.Second,
				ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond},
		})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      q.RoutingKey,
			Unroutable: testenv.Name("ferry.unbound."),
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				return received(ferryamqptest.ReadRabbitMQQueue(t, reader, q.Name, want, d))
			},
			Cut:     func(*testing.T) { proxy.Cut() },
			Restore: func(*testing.T) { proxy.Restore() },
		}
	}}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("Quorum", func(t *testing.T) { ferrybrokertest.Exercise(t, harness("quorum")) })
	t.Run("Classic", func(t *testing.T) { ferrybrokertest.Exercise(t, harness("classic")) })
}

// The named fault point between writing a batch and reading its confirms:
// an error there makes every message unknown, although RabbitMQ stores
// them all — the window a relay crash leaves open.
func TestFaultBeforeConfirmIsUnknownAndStored(t *testing.T) {
	t.Parallel()
	reader := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, reader, "quorum", nil)
	var hit atomic.Int64
	crash := func(_ context.Context, point string) error {
		if point == ferryfault.PublishBeforeConfirm {
			hit.Add(1)
			return errors.New("crash")
		}
		return nil
	}
	p, err := ferryamqp.New(testenv.Context(t, 10*time.Second), dial(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	// Confirms of the first messages may come back while the last are
	// written, and on a fast broker all of them may come back before the
	// fault point: such a run shows nothing, so batches are published
	// until one leaves messages unknown (each run is checked in full).
	sent, unknown := 0, 0
	for round := 0; unknown == 0; round++ {
		require.Less(t, round, 20, "every batch was confirmed before the fault point")
		msgs := make([]ferrytype.Message, 200)
		for i := range msgs {
			msgs[i] = ferrytype.Message{ID: fmt.Sprintf("fault-%d-%d", round, i), Type: "T", Payload: []byte(`{}`),
				Destination: q.RoutingKey}
		}
		for i, r := range p.Publish(ferryfault.With(testenv.Context(t, 10*time.Second), crash), msgs) {
			if r.Outcome == ferrytype.OutcomeConfirmed {
				continue
			}
			require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome, "message %d", i)
			require.ErrorContains(t, r.Err, "fault before confirm")
			unknown++
		}
		sent += len(msgs)
		require.Equal(t, int64(round+1), hit.Load(), "one fault point per batch")
	}
	require.Len(t, ferryamqptest.ReadRabbitMQQueue(t, reader, q.Name, sent, 10*time.Second), sent,
		"the broker has every message whose outcome was reported unknown")
}
