package ferrynats_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats/ferrynatstest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, ferrynatstest.PublisherHarness(ferrynatstest.NATS, func(testing.TB) string { return testenv.URL(testenv.EnvNATS) }))
}

func TestVerifyMissingStream(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	_, err := ferrynats.New(testenv.Context(t, 10*time.Second), nc, &ferrynats.Config{Stream: "NO_SUCH_STREAM"})
	require.ErrorContains(t, err, "stream NO_SUCH_STREAM does not exist")
}

func TestDeclareStream(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	name := testenv.Name("DECL_")
	cfg := &ferrynats.Config{Stream: name, Subjects: []string{name + ".>"}, Declare: true}
	_, err := ferrynats.New(testenv.Context(t, 10*time.Second), nc, cfg)
	require.NoError(t, err)
	// Verify mode now finds it, subjects included.
	cfg.Declare = false
	_, err = ferrynats.New(testenv.Context(t, 10*time.Second), nc, cfg)
	require.NoError(t, err)
	cfg.Subjects = []string{"other.>"}
	_, err = ferrynats.New(testenv.Context(t, 10*time.Second), nc, cfg)
	require.ErrorContains(t, err, `does not list subject "other.>"`)
}

// A stream the server refuses as asked is a configuration error, which no
// retry mends: three replicas on a server that is not clustered, subjects
// another stream holds.
func TestDeclareRefusedIsInvalidConfig(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	name := testenv.Name("DECL_")
	_, err := ferrynats.New(testenv.Context(t, 10*time.Second), nc,
		&ferrynats.Config{Stream: name, Subjects: []string{name + ".>"}, Declare: true, Replicas: 3})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "replicas > 1 not supported in non-clustered mode")

	taken, prefix := ferrynatstest.JetStreamStream(t, nc)
	_, err = ferrynats.New(testenv.Context(t, 10*time.Second), nc,
		&ferrynats.Config{Stream: name, Subjects: []string{prefix + ".>"}, Declare: true})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "the subjects of %s", taken)
}

func TestDialRedactsPassword(t *testing.T) {
	t.Parallel()
	_, err := ferrynats.Dial(testenv.Context(t, 10*time.Second), "nats://user:s3cret@127.0.0.1:1", nil)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

// A subject no stream is bound to is unroutable, and the error names the
// subject, as RabbitMQ's names the exchange and routing key.
func TestUnroutableNamesTheSubject(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	p, err := ferrynats.New(testenv.Context(t, 10*time.Second), nc, nil)
	require.NoError(t, err)
	subject := testenv.Name("nostream") + ".orders.paid"
	res := p.Publish(testenv.Context(t, 10*time.Second), []ferrytype.Message{{ID: "e1", Type: "OrderPaid",
		Payload: []byte(`{}`), Destination: subject}})
	require.Equal(t, ferrytype.OutcomeReturned, res[0].Outcome, "%v", res[0].Err)
	require.ErrorContains(t, res[0].Err, fmt.Sprintf("subject %q", subject))
}

// A publisher whose connection is closed publishes nothing: every message
// is not sent, and Connected says why.
func TestClosedConnectionIsNotSent(t *testing.T) {
	t.Parallel()
	nc := ferrynatstest.NATS(t)
	stream, prefix := ferrynatstest.JetStreamStream(t, nc)
	pubConn, err := nats.Connect(nc.ConnectedUrl())
	require.NoError(t, err)
	p, err := ferrynats.New(testenv.Context(t, 10*time.Second), pubConn, &ferrynats.Config{Stream: stream})
	require.NoError(t, err)
	require.True(t, p.Connected())
	pubConn.Close()
	require.False(t, p.Connected())
	require.ErrorContains(t, p.Disconnected(), "CLOSED")
	res := p.Publish(testenv.Context(t, 10*time.Second), []ferrytype.Message{{ID: "e1", Type: "T",
		Payload: []byte(`{}`), Destination: prefix + ".x"}})
	require.True(t, res[0].NotSent(), "%v", res[0].Err)
	require.ErrorIs(t, res[0].Err, ferrytype.ErrNotSent)
}
