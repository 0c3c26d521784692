package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// gatedPublisher holds every publish until the test opens the gate.
type gatedPublisher struct {
	ferrybroker.Publisher
	gate chan struct{}
}

func (p *gatedPublisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	select {
	case <-p.gate:
	case <-ctx.Done():
	}
	return p.Publisher.Publish(ctx, msgs)
}

// relayRow returns the heartbeat row of relay id, and whether there is one.
func relayRow(t testing.TB, b *relayBundle, id string) (ferrystore.RelayBeat, bool) {
	t.Helper()
	beats, err := b.st.Driver.Relays(b.ctx)
	require.NoError(t, err)
	for _, r := range beats {
		if r.ID == id {
			return r, true
		}
	}
	return ferrystore.RelayBeat{}, false
}

// waitRow waits until relay id's heartbeat row satisfies cond.
func waitRow(t testing.TB, b *relayBundle, id string, cond func(r ferrystore.RelayBeat) bool) ferrystore.RelayBeat {
	t.Helper()
	var (
		row ferrystore.RelayBeat
		ok  bool
	)
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		row, ok = relayRow(t, b, id)
		return ok && cond(row)
	}, func() string { return fmt.Sprintf("heartbeat row of %s: %v %+v", id, ok, row) })
	return row
}

// A running relay's heartbeat row says who it is and what it does: its
// settings, the events it holds between claim and outcome, and that its
// broker is connected; a relay stopped cleanly deletes its row.
func TestRelayHeartbeatShowsTheRelay(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			pub := &gatedPublisher{Publisher: b.publisher(t), gate: make(chan struct{})}
			r := b.relay(t, pub, &ferry.RelayConfig{
				ID: "relay-" + kind, Lanes: 3, Ordered: true, PollInterval: 10 * time.Millisecond,
				Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond, Version: "v9.8.7",
					Broker: "nats://ferry:s3cr3tpw@broker:4222"},
				PublishTimeout: 25 * time.Second, // the gate stays shut while the test looks
			})
			require.Equal(t, "relay-"+kind, r.ID())
			host, _ := os.Hostname()

			row := waitRow(t, b, r.ID(), func(ferrystore.RelayBeat) bool { return true })
			require.Equal(t, host, row.Host)
			require.Equal(t, os.Getpid(), row.PID)
			require.Equal(t, "v9.8.7", row.Version)
			require.Equal(t, 3, row.Lanes)
			require.True(t, row.Ordered)
			require.True(t, row.BrokerConnected)
			require.Empty(t, row.BrokerError)
			require.Equal(t, "nats://ferry:xxxxx@broker:4222", row.Broker, "the broker URL is stored without its password")
			require.Zero(t, row.InFlight)
			require.Zero(t, row.Sent)

			// Five events claimed, their publish held: five in flight.
			ids := b.enqueue(t, 5, func(i int) string { return fmt.Sprint(i) })
			waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool { return row.InFlight == 5 })
			close(pub.gate)
			b.waitSettled(t, time.Minute)
			// All five marked SENT, within the last minute.
			waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool {
				return row.InFlight == 0 && row.Sent == 5 && row.SentLastMinute == 5
			})
			for _, id := range ids {
				got, err := b.st.Driver.Get(b.ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusSent, got.Status)
			}
			require.Positive(t, r.Stats().Heartbeats)
			require.Zero(t, r.Stats().HeartbeatErrors)

			require.NoError(t, r.Stop(b.ctx))
			_, ok := relayRow(t, b, r.ID())
			require.False(t, ok, "a relay stopped cleanly deletes its heartbeat row")
		})
	}
}

// While the broker is unreachable (a cut proxy in front of NATS), the
// relay's heartbeat row says so, with the cause; once it is back, the row
// says connected again.
func TestRelayHeartbeatFollowsBrokerOutage(t *testing.T) {
	// serial: it cuts the broker's network and waits for the heartbeat to follow.
	b := setupRelay(t, "postgres")
	url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	pub, err := ferrynats.Dial(b.ctx, url, &ferrynats.DialConfig{
		Config:  ferrynats.Config{Stream: b.stream},
		Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	r := b.relay(t, pub, &ferry.RelayConfig{PollInterval: 20 * time.Millisecond, Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond}})
	waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool { return row.BrokerConnected })

	proxy.Cut()
	row := waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool { return !row.BrokerConnected })
	require.NotEmpty(t, row.BrokerError, "the row says why")
	require.Equal(t, "*ferrynats.Publisher", row.Broker, "by default, the publisher's type")
	// The beat reads the publisher's connection; the relay's own count of
	// the outage comes from its next probe: wait for it while the broker is
	// still cut, so that a restore before that probe cannot hide it.
	testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Outages > 0 },
		func() string { return "the relay never counted the outage" })

	proxy.Restore()
	row = waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool { return row.BrokerConnected })
	require.Empty(t, row.BrokerError)
	require.Positive(t, r.Stats().Outages)
}

// A publisher without ferrybroker.Connectivity whose publishes come back
// not sent: the outage the relay sees in its results shows in its row.
func TestRelayHeartbeatShowsOutageSeenInResults(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	b.enqueue(t, 3, func(i int) string { return fmt.Sprint(i) })
	r := b.relay(t, &notSentPublisher{}, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond}})
	row := waitRow(t, b, r.ID(), func(row ferrystore.RelayBeat) bool { return !row.BrokerConnected })
	require.Contains(t, row.BrokerError, "no connection")
}

// A relay that dies without Stop (FaultBeforeForget stands for the kill)
// leaves its row: it stops beating, and its last beat ages by the database
// clock. Another relay of the table deletes it once it is ForgetAfter old.
func TestRelayKilledLeavesAgeingRowThatIsPruned(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "mysql")
	killed := b.relayFault(t, b.publisher(t), &ferry.RelayConfig{
		ID:        "killed",
		Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond},
	}, func(_ context.Context, point string) error {
		if point == ferryfault.RelayBeforeForget {
			return errors.New("killed")
		}
		return nil
	})
	waitRow(t, b, "killed", func(ferrystore.RelayBeat) bool { return true })
	require.NoError(t, killed.Stop(b.ctx))
	_, ok := relayRow(t, b, "killed")
	require.True(t, ok, "a killed relay's row stays")
	beats := killed.Stats().Heartbeats

	// It ages: no beat moves its last beat any more.
	waitRow(t, b, "killed", func(r ferrystore.RelayBeat) bool { return time.Since(r.LastSeen) > 300*time.Millisecond })
	require.Equal(t, beats, killed.Stats().Heartbeats)

	// A live relay with a short ForgetAfter prunes it, and keeps its own.
	live := b.relay(t, b.publisher(t), &ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond, ForgetAfter: 200 * time.Millisecond}})
	testsvc.WaitFor(t, 30*time.Second, func() bool { _, ok := relayRow(t, b, "killed"); return !ok },
		func() string { return "the killed relay's row was never pruned" })
	_, ok = relayRow(t, b, live.ID())
	require.True(t, ok, "a live relay is never pruned")
}

// A failing heartbeat (the table was migrated by hand without 0003) never
// stops the relay: events are published, failures are counted and logged
// once (with the fix), not once per beat.
func TestRelayHeartbeatFailureDoesNotStopTheRelay(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	_, err := b.st.DB.ExecContext(b.ctx, "DROP TABLE "+b.st.Driver.Table()+"_relay")
	require.NoError(t, err)
	logs := &testsvc.LogBuffer{}
	r := b.relay(t, b.publisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Heartbeat:    ferry.HeartbeatConfig{Interval: 5 * time.Millisecond},
	})
	b.enqueue(t, 20, func(i int) string { return fmt.Sprint(i) })
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().HeartbeatErrors >= 10 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	st := b.waitSettled(t, time.Minute)
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
	b := setupRelay(t, "sqlite")
	pub := &notSentPublisher{}
	for _, c := range []struct {
		cfg  ferry.RelayConfig
		want string
	}{
		{ferry.RelayConfig{ID: strings.Repeat("x", ferrystore.MaxRelayIDLen+1)}, "RelayConfig.ID"},
		{ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: time.Second, ForgetAfter: 2 * time.Second}}, "RelayConfig.Heartbeat.ForgetAfter"},
	} {
		_, err := ferry.NewRelay(b.st.Driver, pub, &c.cfg)
		require.ErrorIs(t, err, ferry.ErrInvalidConfig)
		require.ErrorContains(t, err, c.want)
	}
	// Disabled, the ForgetAfter bound does not apply.
	_, err := ferry.NewRelay(b.st.Driver, pub, &ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: -1, ForgetAfter: time.Millisecond}})
	require.NoError(t, err)

	r, err := ferry.NewRelay(b.st.Driver, pub, nil)
	require.NoError(t, err)
	host, _ := os.Hostname()
	require.True(t, strings.HasPrefix(r.ID(), fmt.Sprintf("%s-%d-", host, os.Getpid())), r.ID())
	other, err := ferry.NewRelay(b.st.Driver, pub, nil)
	require.NoError(t, err)
	require.NotEqual(t, r.ID(), other.ID(), "two relays of one process have two ids")
}
