package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

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
