package ferrynats_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
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
