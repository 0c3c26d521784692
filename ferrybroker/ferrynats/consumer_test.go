package ferrynats_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// consumerHarness runs the consumer suite on fresh streams: a work-queue
// stream of the consumed subject, consumed by one durable, and a stream of
// the park subject.
func consumerHarness(connect func(t testing.TB) *nats.Conn) ferrybrokertest.ConsumerHarness {
	return ferrybrokertest.ConsumerHarness{New: func(t *testing.T) ferrybrokertest.ConsumerSetup {
		nc := connect(t)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		ctx := testsvc.Context(t, 5*time.Minute)
		// The consumed stream keeps a message until it is acked (or
		// terminated), so its size is what is not settled; parked copies
		// go to a stream of their own.
		stream, parkStream, prefix := testsvc.Name("FC_"), testsvc.Name("FP_"), testsvc.Name("fc")
		subject, park, durable := prefix+".orders", prefix+".parked", "points"
		for _, sc := range []jetstream.StreamConfig{
			{Name: stream, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute},
			{Name: parkStream, Subjects: []string{park}, Duplicates: 2 * time.Minute},
		} {
			_, err := js.CreateStream(ctx, sc)
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = js.DeleteStream(ctx, sc.Name)
			})
		}
		return ferrybrokertest.ConsumerSetup{
			Route: subject,
			Publish: func(t *testing.T, m ferrybrokertest.RawMessage) {
				msg := nats.NewMsg(subject)
				msg.Data = m.Payload
				for k, v := range m.Headers {
					msg.Header.Set(k, v)
				}
				var opts []jetstream.PublishOpt
				if m.ID != "" {
					opts = append(opts, jetstream.WithMsgID(m.ID))
				}
				_, err := js.PublishMsg(ctx, msg, opts...)
				require.NoError(t, err)
			},
			NewConsumer: func(t *testing.T, h ferrybroker.Handler, o ferrybrokertest.ConsumerOptions) ferrybroker.Consumer {
				c, err := ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{
					Stream: stream, Durable: durable, FilterSubjects: []string{subject}, Declare: true, ParkSubject: park,
					Concurrency: o.Concurrency, Retry: o.Retry, Hooks: o.Hooks, Validate: o.Validate, FaultPoint: o.FaultPoint,
					// Short, so that a delivery left by a fault comes
					// back soon; handlers in flight keep theirs with
					// progress signals.
					AckWait: 10 * time.Second,
					// Warnings and errors on stderr, which go test shows
					// when the package fails.
					Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
				})
				require.NoError(t, err)
				return c
			},
			Parked: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				testsvc.WaitFor(t, d, func() bool {
					out = out[:0]
					for _, m := range testsvc.ReadStream(t, nc, parkStream, 0, d) {
						h := map[string]string{}
						for k := range m.Header {
							h[k] = m.Header.Get(k)
						}
						out = append(out, ferrybrokertest.Received{ID: h[ferrynats.HeaderParkMsgID], Route: m.Subject, Payload: m.Data, Headers: h})
					}
					return len(out) >= want
				}, nil)
				return out
			},
			BreakParking: func(t *testing.T) {
				require.NoError(t, js.DeleteStream(ctx, parkStream))
			},
			Unsettled: func(t *testing.T) int {
				st, err := js.Stream(ctx, stream)
				require.NoError(t, err)
				return int(st.CachedInfo().State.Msgs)
			},
		}
	}}
}

func TestConsumerConformance(t *testing.T) {
	ferrybrokertest.ExerciseConsumer(t, consumerHarness(testsvc.NATS))
}

func TestConsumerConfigErrors(t *testing.T) {
	nc := testsvc.EmbeddedNATS(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	_, err = ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{Stream: "S", Durable: "d"})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "ParkSubject is required")
	_, err = ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{Stream: "S", Durable: "d", ParkSubject: "p",
		Retry: ferrybroker.RetryPolicy{MaxDeliveries: -1}})
	require.ErrorContains(t, err, "ConsumerConfig.Retry: ")
	require.ErrorContains(t, err, "RetryPolicy.MaxDeliveries -1 must be positive")
}
