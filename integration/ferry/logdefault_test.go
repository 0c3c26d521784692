package ferry_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A relay given no Logger logs to slog.Default(): an event that goes DEAD
// because nothing takes its subject is an error on stderr, not silence.
func TestRelayWithoutALoggerLogsToTheDefaultLogger(t *testing.T) {
	// serial: slog.SetDefault replaces the process's default logger, which parallel tests share.
	var buf syncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	ctx := testsvc.Context(t, time.Minute)
	st := testsvc.Store(t, "sqlite")
	outbox, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	tx, err := st.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = outbox.EnqueueTx(ctx, tx, ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{}`),
		Destination: testsvc.Name("nowhere") + ".paid"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	pub, err := ferrynats.New(ctx, testsvc.EmbeddedNATS(t), nil)
	require.NoError(t, err)
	relay, err := ferry.NewRelay(st.Driver, pub, &ferry.RelayConfig{
		Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 1}})
	require.NoError(t, err)
	_, err = relay.Drain(ctx)
	require.NoError(t, err)

	out := buf.String()
	require.Contains(t, out, "level=ERROR")
	require.Contains(t, out, "publish not confirmed")
	require.Contains(t, out, "dead=true")
}
