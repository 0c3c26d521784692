package ferrynatstest

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
	"github.com/ferrydev/ferry/internal/testenv"
)

// PublisherHarness runs ferrybrokertest.Exercise on fresh streams of the
// server connect reaches; url is that server's URL, for the publisher's
// own connection.
func PublisherHarness(connect func(t testing.TB) *nats.Conn, url func(t testing.TB) string) ferrybrokertest.Harness {
	return ferrybrokertest.Harness{New: func(t *testing.T) ferrybrokertest.Setup {
		nc := connect(t)
		stream, prefix := JetStreamStream(t, nc)
		// The publisher gets its own connection, so that Break does not
		// cut the test's reader.
		pubConn, err := nats.Connect(url(t))
		require.NoError(t, err)
		t.Cleanup(pubConn.Close)
		p, err := ferrynats.New(testenv.Context(t, 10*time.Second), pubConn, &ferrynats.Config{Stream: stream})
		require.NoError(t, err)
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      prefix + ".orders",
			Unroutable: testenv.Name("nostream") + ".orders",
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				for _, m := range ReadStream(t, nc, stream, want, d) {
					h := map[string]string{}
					for k := range m.Header {
						h[k] = m.Header.Get(k)
					}
					out = append(out, ferrybrokertest.Received{ID: m.ID, Route: m.Subject, Payload: m.Data, Headers: h})
				}
				return out
			},
			Break:             func(*testing.T) { pubConn.Close() },
			DetectsDuplicates: true,
		}
	}, NewDialed: func(t *testing.T) ferrybrokertest.Setup {
		nc := connect(t)
		stream, prefix := JetStreamStream(t, nc)
		proxied, proxy := testenv.Proxy(t, url(t))
		p, err := ferrynats.Dial(testenv.Context(t, 10*time.Second), proxied, &ferrynats.DialConfig{
			Config:  ferrynats.Config{Stream: stream},
			Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
		})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      prefix + ".orders",
			Unroutable: testenv.Name("nostream") + ".orders",
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				for _, m := range ReadStream(t, nc, stream, want, d) {
					out = append(out, ferrybrokertest.Received{ID: m.ID, Route: m.Subject, Payload: m.Data})
				}
				return out
			},
			Cut:               func(*testing.T) { proxy.Cut() },
			Restore:           func(*testing.T) { proxy.Restore() },
			DetectsDuplicates: true,
		}
	}}
}

// ConsumerHarness runs ferrybrokertest.ExerciseConsumer, the consumer
// suite, the consumer suite on fresh streams: a work-queue
// stream of the consumed subject, consumed by one durable, and a stream of
// the park subject.
func ConsumerHarness(connect func(t testing.TB) *nats.Conn) ferrybrokertest.ConsumerHarness {
	return ferrybrokertest.ConsumerHarness{New: func(t *testing.T) ferrybrokertest.ConsumerSetup {
		nc := connect(t)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		ctx := testenv.Context(t, 5*time.Minute)
		// The consumed stream keeps a message until it is acked (or
		// terminated), so its size is what is not settled; parked copies
		// go to a stream of their own.
		stream, parkStream, prefix := testenv.Name("FC_"), testenv.Name("FP_"), testenv.Name("fc")
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
					ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: o.Concurrency, Redelivery: o.Redelivery, Hooks: o.Hooks, Validate: o.Validate,
						// Warnings and errors on stderr, which go test
						// shows when the package fails.
						Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))},

					// Short, so that a delivery left by a fault comes
					// back soon; handlers in flight keep theirs with
					// progress signals.
					AckWait: 10 * time.Second,
				})
				require.NoError(t, err)
				return c
			},
			Parked: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				testenv.WaitFor(t, d, func() bool {
					out = out[:0]
					for _, m := range ReadStream(t, nc, parkStream, 0, d) {
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
