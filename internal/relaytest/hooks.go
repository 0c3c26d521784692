package relaytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RelaySweptTransitionsAreCountedAndReported: an event whose lease
// expires on its last allowed attempt goes DEAD through the sweeper; that
// transition is counted and reported like a dead outcome of a batch, and
// the lease expiry before it (a retry) too.
func RelaySweptTransitionsAreCountedAndReported[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	id := e.Enqueue(t, 1, func(int) string { return "1" })[0]
	rec := &settleRecorder{}
	r := e.RelayFault(t, e.CountingPublisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond, Lease: 150 * time.Millisecond, PublishTimeout: 100 * time.Millisecond,
		SweepInterval: 20 * time.Millisecond,
		Retry:         ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2},
		Hooks:         []ferry.Hook{rec},
		// Every claim is abandoned, as by a relay that crashed: only the
		// sweeper ever settles the event.
	}, func(_ context.Context, point string) error {
		if point == ferryfault.RelayAfterClaim {
			return errors.New("abandon")
		}
		return nil
	})
	testenv.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Dead == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	row, err := e.Store.Get(e.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDead, row.Status)
	st := r.Stats()
	require.Equal(t, int64(2), st.Swept)
	require.Equal(t, int64(1), st.Retried, "the first expiry put the event back to NEW")
	swept, sent, retried, dead := rec.get()
	require.Equal(t, [4]int64{2, 0, 1, 1}, [4]int64{swept, sent, retried, dead})
	require.Equal(t, map[string]ferry.DestinationSettled{e.Destination: {Destination: e.Destination, Retried: 1, Dead: 1}},
		rec.destinations(), "the sweeper's transitions are counted by destination too")
}

// RelayReportsSettlesByDestination: outcomes written by batches are
// reported by destination: where each event is published, its destination
// or its type.
func RelayReportsSettlesByDestination[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	e.Enqueue(t, 3, func(i int) string { return fmt.Sprint(i) }) // to e.Destination
	e.EnqueueEvents(t,
		ferry.Event{AggregateType: "order", AggregateID: "x", Type: "Unrouted", Payload: []byte(`{}`)},
		ferry.Event{AggregateType: "order", AggregateID: "y", Type: "OrderPaid", Payload: []byte(`{}`),
			Destination: "nowhere." + e.Destination})
	rec := &settleRecorder{}
	pub := e.CountingPublisher(t)
	// The event without a destination is published to its type, a subject
	// no stream takes: returned, then DEAD; so is the one to nowhere.
	r := e.Relay(t, pub, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Hooks: []ferry.Hook{rec},
		Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2}})
	testenv.WaitFor(t, 30*time.Second, func() bool { s := r.Stats(); return s.Confirmed == 3 && s.Dead == 2 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	require.Equal(t, map[string]ferry.DestinationSettled{
		e.Destination:              {Destination: e.Destination, Sent: 3},
		"Unrouted":                 {Destination: "Unrouted", Retried: 1, Dead: 1},
		"nowhere." + e.Destination: {Destination: "nowhere." + e.Destination, Retried: 1, Dead: 1},
	}, rec.destinations())
}

// settleRecorder records what HookSweep, HookSettle and
// HookSettleDestinations report.
type settleRecorder struct {
	mu                         sync.Mutex
	swept, sent, retried, dead int64
	byDest                     map[string]ferry.DestinationSettled
}

func (r *settleRecorder) OnSettleDestinations(_ string, settled []ferry.DestinationSettled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byDest == nil {
		r.byDest = map[string]ferry.DestinationSettled{}
	}
	for _, s := range settled {
		d := r.byDest[s.Destination]
		d.Destination = s.Destination
		d.Sent, d.Retried, d.Dead = d.Sent+s.Sent, d.Retried+s.Retried, d.Dead+s.Dead
		r.byDest[s.Destination] = d
	}
}

func (r *settleRecorder) destinations() map[string]ferry.DestinationSettled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.byDest)
}

func (r *settleRecorder) OnSweep(_ string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swept += n
}

func (r *settleRecorder) OnSettle(_ string, sent, retried, dead int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent, r.retried, r.dead = r.sent+sent, r.retried+retried, r.dead+dead
}

func (r *settleRecorder) get() (swept, sent, retried, dead int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.swept, r.sent, r.retried, r.dead
}
