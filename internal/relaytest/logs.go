package relaytest

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RelayWithoutALoggerLogsToTheDefaultLogger: a relay given no Logger logs
// to slog.Default(): an event that goes DEAD because nothing takes its
// route is an error on stderr, not silence. It replaces the process's
// default logger while it runs: its caller must not run it in parallel.
func RelayWithoutALoggerLogsToTheDefaultLogger[TTx any](t *testing.T, setup Setup[TTx]) {
	var buf testenv.LogBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	e := setup(t)
	e.EnqueueEvents(t, ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{}`),
		Destination: "nowhere." + e.Destination})
	relay, err := ferry.NewRelay(e.Store, e.Publisher(t), &ferry.RelayConfig{
		Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 1}})
	require.NoError(t, err)
	_, err = relay.Drain(e.Ctx)
	require.NoError(t, err)

	out := buf.String()
	require.Contains(t, out, "level=ERROR")
	require.Contains(t, out, "publish not confirmed")
	require.Contains(t, out, "dead=true")
}
