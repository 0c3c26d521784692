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
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/relaytest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestRelayHeartbeatShowsTheRelay(t *testing.T) {
	t.Parallel()
	onKinds(t, testsvc.Kinds, true, relaytest.RelayHeartbeatShowsTheRelay)
}

// While the broker is unreachable (a cut proxy in front of NATS), the
// relay's heartbeat row says so, with the cause; once it is back, the row
// says connected again.
func TestRelayHeartbeatFollowsBrokerOutage(t *testing.T) {
	// serial: it cuts the broker's network and waits for the heartbeat to follow.
	b := setupRelay(t, "postgres")
	url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	pub, err := ferrynats.Dial(b.Ctx, url, &ferrynats.DialConfig{
		Config:  ferrynats.Config{Stream: b.stream},
		Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	r := b.Relay(t, pub, &ferry.RelayConfig{PollInterval: 20 * time.Millisecond, Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond}})
	b.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool { return row.BrokerConnected })

	proxy.Cut()
	row := b.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool { return !row.BrokerConnected })
	require.NotEmpty(t, row.BrokerError, "the row says why")
	require.Equal(t, url, row.Broker, "by default, the broker's address, as the publisher describes it")
	// The beat reads the publisher's connection; the relay's own count of
	// the outage comes from its next probe: wait for it while the broker is
	// still cut, so that a restore before that probe cannot hide it.
	testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Outages > 0 },
		func() string { return "the relay never counted the outage" })

	proxy.Restore()
	row = b.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool { return row.BrokerConnected })
	require.Empty(t, row.BrokerError)
	require.Positive(t, r.Stats().Outages)
}

func TestRelayHeartbeatShowsOutageSeenInResults(t *testing.T) {
	t.Parallel()
	relaytest.RelayHeartbeatShowsOutageSeenInResults(t, sqlSetup("sqlite"))
}

func TestRelayKilledLeavesAgeingRowThatIsPruned(t *testing.T) {
	t.Parallel()
	relaytest.RelayKilledLeavesAgeingRowThatIsPruned(t, sqlSetup("mysql"))
}

// A failing heartbeat (the table was migrated by hand without 0003) never
// stops the relay: events are published, failures are counted and logged
// once (with the fix), not once per beat.
func TestRelayHeartbeatFailureDoesNotStopTheRelay(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	_, err := b.st.DB.ExecContext(b.Ctx, "DROP TABLE "+b.st.Driver.Table()+"_relay")
	require.NoError(t, err)
	logs := &testsvc.LogBuffer{}
	r := b.Relay(t, b.CountingPublisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Heartbeat:    ferry.HeartbeatConfig{Interval: 5 * time.Millisecond},
	})
	b.Enqueue(t, 20, func(i int) string { return fmt.Sprint(i) })
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().HeartbeatErrors >= 10 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	st := b.WaitSettled(t, time.Minute)
	require.Zero(t, st.Dead)
	// The relay counts a batch after its SENT mark commits: wait for the
	// count, not only for the rows.
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Confirmed == 20 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	require.Zero(t, r.Stats().Heartbeats)
	warn := logs.Lines("relay heartbeat failed")
	require.Len(t, warn, 1, "one line, not one per beat:\n%s", strings.Join(warn, "\n"))
	require.Contains(t, warn[0], "run ferry migrate")
}

func TestRelayHeartbeatConfig(t *testing.T) {
	t.Parallel()
	relaytest.RelayHeartbeatConfig(t, sqlSetup("sqlite"))
}
