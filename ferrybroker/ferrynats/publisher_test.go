package ferrynats_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func harness(connect func(t testing.TB) *nats.Conn, url func(t testing.TB) string) ferrybrokertest.Harness {
	return ferrybrokertest.Harness{New: func(t *testing.T) ferrybrokertest.Setup {
		nc := connect(t)
		stream, prefix := testsvc.JetStreamStream(t, nc)
		// The publisher gets its own connection, so that Break does not
		// cut the test's reader.
		pubConn, err := nats.Connect(url(t))
		require.NoError(t, err)
		t.Cleanup(pubConn.Close)
		p, err := ferrynats.New(testsvc.Context(t, 10*time.Second), pubConn, &ferrynats.Config{Stream: stream})
		require.NoError(t, err)
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      prefix + ".orders",
			Unroutable: testsvc.Name("nostream") + ".orders",
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				for _, m := range testsvc.ReadStream(t, nc, stream, want, d) {
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
		stream, prefix := testsvc.JetStreamStream(t, nc)
		proxied, proxy := testsvc.Proxy(t, url(t))
		p, err := ferrynats.Dial(testsvc.Context(t, 10*time.Second), proxied, &ferrynats.DialConfig{
			Config:  ferrynats.Config{Stream: stream},
			Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
		})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return ferrybrokertest.Setup{
			Publisher:  p,
			Route:      prefix + ".orders",
			Unroutable: testsvc.Name("nostream") + ".orders",
			Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
				var out []ferrybrokertest.Received
				for _, m := range testsvc.ReadStream(t, nc, stream, want, d) {
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

func TestConformance(t *testing.T) {
	ferrybrokertest.Exercise(t, harness(testsvc.NATS, func(testing.TB) string { return testsvc.URL(testsvc.EnvNATS) }))
}

func TestConformanceEmbedded(t *testing.T) {
	ferrybrokertest.Exercise(t, harness(testsvc.EmbeddedNATS, func(t testing.TB) string { return testsvc.EmbeddedNATS(t).ConnectedUrl() }))
}

func TestVerifyMissingStream(t *testing.T) {
	nc := testsvc.EmbeddedNATS(t)
	_, err := ferrynats.New(testsvc.Context(t, 10*time.Second), nc, &ferrynats.Config{Stream: "NO_SUCH_STREAM"})
	require.ErrorContains(t, err, "stream NO_SUCH_STREAM does not exist")
}

func TestDeclareStream(t *testing.T) {
	nc := testsvc.EmbeddedNATS(t)
	name := testsvc.Name("DECL_")
	cfg := &ferrynats.Config{Stream: name, Subjects: []string{name + ".>"}, Declare: true}
	_, err := ferrynats.New(testsvc.Context(t, 10*time.Second), nc, cfg)
	require.NoError(t, err)
	// Verify mode now finds it, subjects included.
	cfg.Declare = false
	_, err = ferrynats.New(testsvc.Context(t, 10*time.Second), nc, cfg)
	require.NoError(t, err)
	cfg.Subjects = []string{"other.>"}
	_, err = ferrynats.New(testsvc.Context(t, 10*time.Second), nc, cfg)
	require.ErrorContains(t, err, `does not list subject "other.>"`)
}

func TestDialRedactsPassword(t *testing.T) {
	_, err := ferrynats.Dial(testsvc.Context(t, 10*time.Second), "nats://user:s3cret@127.0.0.1:1", nil)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

// A subject no stream is bound to is unroutable, and the error names the
// subject, as RabbitMQ's names the exchange and routing key.
func TestUnroutableNamesTheSubject(t *testing.T) {
	nc := testsvc.EmbeddedNATS(t)
	p, err := ferrynats.New(testsvc.Context(t, 10*time.Second), nc, nil)
	require.NoError(t, err)
	subject := testsvc.Name("nostream") + ".orders.paid"
	res := p.Publish(testsvc.Context(t, 10*time.Second), []ferrytype.Message{{ID: "e1", Type: "OrderPaid",
		Payload: []byte(`{}`), Destination: subject}})
	require.Equal(t, ferrytype.OutcomeReturned, res[0].Outcome, "%v", res[0].Err)
	require.ErrorContains(t, res[0].Err, fmt.Sprintf("subject %q", subject))
}

// A publisher whose connection is closed publishes nothing: every message
// is not sent, and Connected says why.
func TestClosedConnectionIsNotSent(t *testing.T) {
	nc := testsvc.EmbeddedNATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	pubConn, err := nats.Connect(nc.ConnectedUrl())
	require.NoError(t, err)
	p, err := ferrynats.New(testsvc.Context(t, 10*time.Second), pubConn, &ferrynats.Config{Stream: stream})
	require.NoError(t, err)
	require.True(t, p.Connected())
	pubConn.Close()
	require.False(t, p.Connected())
	require.ErrorContains(t, p.Disconnected(), "CLOSED")
	res := p.Publish(testsvc.Context(t, 10*time.Second), []ferrytype.Message{{ID: "e1", Type: "T",
		Payload: []byte(`{}`), Destination: prefix + ".x"}})
	require.True(t, res[0].NotSent(), "%v", res[0].Err)
	require.ErrorIs(t, res[0].Err, ferrytype.ErrNotSent)
}
