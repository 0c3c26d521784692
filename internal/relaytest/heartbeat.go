package relaytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RelayHeartbeatShowsTheRelay: a running relay's heartbeat row says who it
// is and what it does: its settings, the events it holds between claim and
// outcome, and that its broker is connected; a relay stopped cleanly
// deletes its row.
func RelayHeartbeatShowsTheRelay[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	pub := &gatedPublisher{Publisher: e.CountingPublisher(t), gate: make(chan struct{})}
	r := e.Relay(t, pub, &ferry.RelayConfig{
		ID: "relay-" + e.Kind, Lanes: 3, Ordered: true, PollInterval: 10 * time.Millisecond,
		Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond, Version: "v9.8.7",
			Broker: "nats://ferry:s3cr3tpw@broker:4222"},
		PublishTimeout: 25 * time.Second, // the gate stays shut while the test looks
	})
	require.Equal(t, "relay-"+e.Kind, r.ID())
	host, _ := os.Hostname()

	// A relay starts with one lane, and runs its share (all three: it is
	// alone) from its second round of beats on.
	row := e.WaitRelayRow(t, r.ID(), func(b ferrystore.RelayBeat) bool { return b.Lanes == 3 })
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
	ids := e.Enqueue(t, 5, func(i int) string { return fmt.Sprint(i) })
	e.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool { return row.InFlight == 5 })
	close(pub.gate)
	e.WaitSettled(t, time.Minute)
	// All five marked SENT, within the last minute.
	e.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool {
		return row.InFlight == 0 && row.Sent == 5 && row.SentLastMinute == 5
	})
	for _, id := range ids {
		got, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusSent, got.Status)
	}
	require.Positive(t, r.Stats().Heartbeats)
	require.Zero(t, r.Stats().HeartbeatErrors)

	require.NoError(t, r.Stop(e.Ctx))
	_, ok := e.RelayRow(t, r.ID())
	require.False(t, ok, "a relay stopped cleanly deletes its heartbeat row")
}

// RelayHeartbeatShowsOutageSeenInResults: a publisher without
// ferrybroker.Connectivity whose publishes come back not sent: the outage
// the relay sees in its results shows in its row.
func RelayHeartbeatShowsOutageSeenInResults[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	e.Enqueue(t, 3, func(i int) string { return fmt.Sprint(i) })
	r := e.Relay(t, &notSentPublisher{}, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond}})
	row := e.WaitRelayRow(t, r.ID(), func(row ferrystore.RelayBeat) bool { return !row.BrokerConnected })
	require.Contains(t, row.BrokerError, "no connection")
}

// RelayKilledLeavesAgeingRowThatIsPruned: a relay that dies without Stop
// (ferryfault.RelayBeforeForget stands for the kill) leaves its row: it
// stops beating, and its last beat ages by the database clock. Another
// relay of the table deletes it once it is ForgetAfter old.
func RelayKilledLeavesAgeingRowThatIsPruned[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	killed := e.RelayFault(t, e.CountingPublisher(t), &ferry.RelayConfig{
		ID:        "killed",
		Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond},
	}, func(_ context.Context, point string) error {
		if point == ferryfault.RelayBeforeForget {
			return errors.New("killed")
		}
		return nil
	})
	e.WaitRelayRow(t, "killed", func(ferrystore.RelayBeat) bool { return true })
	require.NoError(t, killed.Stop(e.Ctx))
	_, ok := e.RelayRow(t, "killed")
	require.True(t, ok, "a killed relay's row stays")
	beats := killed.Stats().Heartbeats

	// It ages: no beat moves its last beat any more.
	e.WaitRelayRow(t, "killed", func(r ferrystore.RelayBeat) bool { return time.Since(r.LastSeen) > 300*time.Millisecond })
	require.Equal(t, beats, killed.Stats().Heartbeats)

	// A live relay with a short ForgetAfter prunes it, and keeps its own.
	live := e.Relay(t, e.CountingPublisher(t), &ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond, ForgetAfter: 200 * time.Millisecond}})
	testenv.WaitFor(t, 30*time.Second, func() bool { _, ok := e.RelayRow(t, "killed"); return !ok },
		func() string { return "the killed relay's row was never pruned" })
	_, ok = e.RelayRow(t, live.ID())
	require.True(t, ok, "a live relay is never pruned")
}

// RelayHeartbeatConfig: the heartbeat's settings are validated, naming the
// field, and each relay has an id of its own.
func RelayHeartbeatConfig[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	pub := &notSentPublisher{}
	for _, c := range []struct {
		cfg  ferry.RelayConfig
		want string
	}{
		{ferry.RelayConfig{ID: strings.Repeat("x", ferrystore.MaxRelayIDLen+1)}, "RelayConfig.ID"},
		{ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: time.Second, ForgetAfter: 2 * time.Second}}, "RelayConfig.Heartbeat.ForgetAfter"},
	} {
		_, err := ferry.NewRelay(e.Store, pub, &c.cfg)
		require.ErrorIs(t, err, ferry.ErrInvalidConfig)
		require.ErrorContains(t, err, c.want)
	}
	// Disabled, the ForgetAfter bound does not apply.
	_, err := ferry.NewRelay(e.Store, pub, &ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: -1, ForgetAfter: time.Millisecond}})
	require.NoError(t, err)

	r, err := ferry.NewRelay(e.Store, pub, nil)
	require.NoError(t, err)
	host, _ := os.Hostname()
	require.True(t, strings.HasPrefix(r.ID(), fmt.Sprintf("%s-%d-", host, os.Getpid())), r.ID())
	other, err := ferry.NewRelay(e.Store, pub, nil)
	require.NoError(t, err)
	require.NotEqual(t, r.ID(), other.ID(), "two relays of one process have two ids")
}

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

// RelayRow returns the heartbeat row of relay id, and whether there is one.
func (e *Env[TTx]) RelayRow(t testing.TB, id string) (ferrystore.RelayBeat, bool) {
	t.Helper()
	beats, err := e.Store.Relays(e.Ctx)
	require.NoError(t, err)
	for _, r := range beats {
		if r.ID == id {
			return r, true
		}
	}
	return ferrystore.RelayBeat{}, false
}

// WaitRelayRow waits until relay id's heartbeat row satisfies cond, and
// returns it.
func (e *Env[TTx]) WaitRelayRow(t testing.TB, id string, cond func(r ferrystore.RelayBeat) bool) ferrystore.RelayBeat {
	t.Helper()
	var (
		row ferrystore.RelayBeat
		ok  bool
	)
	testenv.WaitFor(t, 30*time.Second, func() bool {
		row, ok = e.RelayRow(t, id)
		return ok && cond(row)
	}, func() string { return fmt.Sprintf("heartbeat row of %s: %v %+v", id, ok, row) })
	return row
}
