package ferrynats_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// startServer runs a nats-server of the test's own, with or without
// JetStream, and connects to it.
func startServer(t *testing.T, jetStream bool) *nats.Conn {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: jetStream,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// A publisher refuses, when it is made, a server on which no publish could
// be confirmed (JetStream off), instead of sending every event to DEAD as
// unroutable later; a server with JetStream and no stream yet is accepted
// (the stream may come with another deployment; until then each publish is
// unroutable, and logged).
func TestNewRefusesAServerWithoutJetStream(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)

	_, err := ferrynats.New(ctx, startServer(t, false), nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "JetStream is not enabled on this server")
	require.ErrorContains(t, err, "-js")

	p, err := ferrynats.New(ctx, startServer(t, true), nil)
	require.NoError(t, err)
	require.NoError(t, p.Close())
}
