package ferry_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/internal/relaytest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// NATS is unreachable (a cut proxy) for a few seconds while 300 events
// wait, with a retry policy that kills an event at its second failed
// attempt: no event goes DEAD, none spends an attempt on the outage, all
// are delivered once NATS is back, and the relay logs the outage twice
// (start and end), not once per event.
func TestRelayBrokerOutageSpendsNoAttempt(t *testing.T) {
	// serial: it cuts the broker's network and counts attempts over the outage.
	b := setupRelay(t, "postgres")
	url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	pub, err := ferrynats.Dial(b.Ctx, url, &ferrynats.DialConfig{
		Config:  ferrynats.Config{Stream: b.stream},
		Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	logs := &testsvc.LogBuffer{}
	r := b.Relay(t, pub, &ferry.RelayConfig{
		BatchSize: 20, PollInterval: 20 * time.Millisecond,
		Retry:  ferry.ExponentialBackoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 2},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})

	before := b.Enqueue(t, 20, func(i int) string { return fmt.Sprint(i) })
	b.WaitSettled(t, time.Minute)

	proxy.Cut()
	testsvc.WaitFor(t, 30*time.Second, func() bool { return !pub.Connected() }, nil)
	during := b.Enqueue(t, 300, func(i int) string { return fmt.Sprint(i % 17) })
	// The outage lasts three seconds: ample time, on the code before
	// this test, for every event to spend both its attempts.
	outageEnd := time.Now().Add(3 * time.Second)
	for time.Now().Before(outageEnd) {
		st, err := b.st.Driver.Stats(b.Ctx)
		require.NoError(t, err)
		require.Zero(t, st.Dead, "an event went DEAD during the outage")
		require.Equal(t, int64(len(during)), st.New+st.Sending, "nothing can be sent during the outage")
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Restore()
	restored := time.Now()
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Confirmed > int64(len(before)) },
		func() string { return fmt.Sprintf("nothing confirmed since the broker came back: %+v", r.Stats()) })
	resumed := time.Since(restored)

	st := b.WaitSettled(t, 2*time.Minute)
	require.Zero(t, st.Dead)
	for _, id := range during {
		row, err := b.st.Driver.Get(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, "SENT", string(row.Status), "event %s", id)
		require.Equal(t, 1, row.Attempt, "event %s spent attempts on the outage", id)
	}
	got := b.ReadAll(t, len(before)+len(during))
	require.Len(t, got, len(before)+len(during))

	s := r.Stats()
	require.Equal(t, int64(1), s.Outages, "%+v", s)
	require.Zero(t, s.Unknown+s.Dead, "%+v", s)
	require.Len(t, logs.Lines("broker unreachable"), 1, "the outage's start is logged once")
	require.Len(t, logs.Lines("broker reachable again", "outage=", "held_back="), 1, "its end is logged once")
	warn := logs.Lines("level=WARN")
	require.LessOrEqual(t, len(warn), 3, "the outage floods the log: %d warnings:\n%s", len(warn), strings.Join(warn, "\n"))
	t.Logf("first confirm %s after the broker came back; stats %+v; log:\n%s", resumed, s, strings.Join(logs.Lines(), "\n"))
}

func TestRelayNotSentBacksOffWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	relaytest.RelayNotSentBacksOffWithoutSpendingAttempts(t, sqlSetup("sqlite"))
}
