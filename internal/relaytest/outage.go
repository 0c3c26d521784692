package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RelayBrokerOutageSpendsNoAttempt: the broker is unreachable (Env.Outage)
// for a few seconds while 300 events wait, with a retry policy that kills
// an event at its second failed attempt: no event goes DEAD, none spends
// an attempt on the outage, all are delivered once the broker is back, and
// the relay logs the outage twice (start and end), not once per event.
func RelayBrokerOutageSpendsNoAttempt[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	needs(t, e.Kind, e.Outage != nil, "Outage", "the broker is cut off from the relay's publisher")
	pub, cut, restore := e.Outage(t)
	logs := &testenv.LogBuffer{}
	r := e.Relay(t, pub, &ferry.RelayConfig{
		BatchSize: 20, PollInterval: 20 * time.Millisecond,
		Retry:  ferry.ExponentialBackoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 2},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})

	before := e.Enqueue(t, 20, func(i int) string { return fmt.Sprint(i) })
	e.WaitSettled(t, time.Minute)

	cut()
	testenv.WaitFor(t, 30*time.Second, func() bool { return !pub.Connected() }, nil)
	during := e.Enqueue(t, 300, func(i int) string { return fmt.Sprint(i % 17) })
	// The outage lasts three seconds: ample time, on the code before
	// this test, for every event to spend both its attempts.
	outageEnd := time.Now().Add(3 * time.Second)
	for time.Now().Before(outageEnd) {
		st, err := e.Store.Stats(e.Ctx)
		require.NoError(t, err)
		require.Zero(t, st.Dead, "an event went DEAD during the outage")
		require.Equal(t, int64(len(during)), st.New+st.Sending, "nothing can be sent during the outage")
		time.Sleep(50 * time.Millisecond)
	}
	restore()
	restored := time.Now()
	testenv.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Confirmed > int64(len(before)) },
		func() string { return fmt.Sprintf("nothing confirmed since the broker came back: %+v", r.Stats()) })
	resumed := time.Since(restored)

	st := e.WaitSettled(t, 2*time.Minute)
	require.Zero(t, st.Dead)
	for _, id := range during {
		row, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, "SENT", string(row.Status), "event %s", id)
		require.Equal(t, 1, row.Attempt, "event %s spent attempts on the outage", id)
	}
	got := e.ReadAll(t, len(before)+len(during))
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

// RelayNotSentBacksOffWithoutSpendingAttempts: a publisher without
// ferrybroker.Connectivity whose every publish comes back not sent: the
// relay gives the events back without spending an attempt, and tries again
// after a backoff that doubles from PollInterval, never in a hot loop; it
// logs the outage once.
func RelayNotSentBacksOffWithoutSpendingAttempts[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	ids := e.Enqueue(t, 5, func(i int) string { return fmt.Sprint(i) })
	pub := &notSentPublisher{}
	logs := &testenv.LogBuffer{}
	const poll = 10 * time.Millisecond
	// One lane: with two, a lane that looked at the outage's backoff just
	// before the other lane's publish came back may claim the events that
	// publish gave back and publish them a poll later (seen as 10ms between
	// the 2nd and 3rd publishes). That is bounded by the number of lanes,
	// not a hot loop, but it is not the doubling this test measures.
	r := e.Relay(t, pub, &ferry.RelayConfig{PollInterval: poll, Lanes: 1,
		Retry:  ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 1},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	const publishes = 7
	testenv.WaitFor(t, time.Minute, func() bool { return len(pub.times()) >= publishes }, nil)
	require.NoError(t, r.Stop(e.Ctx))

	calls := pub.times()
	for k := 1; k < publishes; k++ {
		least := min(poll<<(k-1), time.Second)
		require.GreaterOrEqual(t, calls[k].Sub(calls[k-1]), least, "publish %d came too soon after publish %d", k+1, k)
	}
	for _, id := range ids {
		row, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusNew, row.Status, "event %s", id)
		require.Zero(t, row.Attempt, "event %s spent an attempt", id)
		require.Empty(t, row.LastError)
	}
	s := r.Stats()
	require.Equal(t, int64(1), s.Outages, "%+v", s)
	require.Zero(t, s.Unknown+s.Dead+s.Retried, "%+v", s)
	require.Equal(t, s.NotSent, s.Released, "%+v", s)
	require.GreaterOrEqual(t, s.Released, int64(publishes*len(ids)), "%+v", s)
	require.Len(t, logs.Lines("broker unreachable", "no connection"), 1)
	require.Empty(t, logs.Lines("level=WARN", "publish not confirmed"))
}

// notSentPublisher answers every publish "not sent", as a publisher that
// cannot report its connection would during an outage, and records when
// each publish came.
type notSentPublisher struct {
	mu    sync.Mutex
	calls []time.Time
}

func (p *notSentPublisher) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	p.mu.Lock()
	p.calls = append(p.calls, time.Now())
	p.mu.Unlock()
	return ferrybroker.AllNotSent(len(msgs), errors.New("not sent: no connection"))
}

func (p *notSentPublisher) Close() error { return nil }

func (p *notSentPublisher) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.calls...)
}
