package ferry_test

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
	"github.com/ferrydev/ferry/internal/testsvc"
)

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

// An event whose lease expires on its last allowed attempt goes DEAD
// through the sweeper; that transition is counted and reported like a dead
// outcome of a batch, and the lease expiry before it (a retry) too.
func TestRelaySweptTransitionsAreCountedAndReported(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	id := b.enqueue(t, 1, func(int) string { return "1" })[0]
	rec := &settleRecorder{}
	r := b.relayFault(t, b.publisher(t), &ferry.RelayConfig{
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
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Dead == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	row, err := b.st.Driver.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDead, row.Status)
	st := r.Stats()
	require.Equal(t, int64(2), st.Swept)
	require.Equal(t, int64(1), st.Retried, "the first expiry put the event back to NEW")
	swept, sent, retried, dead := rec.get()
	require.Equal(t, [4]int64{2, 0, 1, 1}, [4]int64{swept, sent, retried, dead})
	require.Equal(t, map[string]ferry.DestinationSettled{b.subject: {Destination: b.subject, Retried: 1, Dead: 1}},
		rec.destinations(), "the sweeper's transitions are counted by destination too")
}

// Outcomes written by batches are reported by destination: where each event
// is published, its destination or its type.
func TestRelayReportsSettlesByDestination(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	b.enqueue(t, 3, func(i int) string { return fmt.Sprint(i) }) // to b.subject
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.ob.EnqueueTx(b.ctx, tx,
		ferry.Event{AggregateType: "order", AggregateID: "x", Type: "Unrouted", Payload: []byte(`{}`)},
		ferry.Event{AggregateType: "order", AggregateID: "y", Type: "OrderPaid", Payload: []byte(`{}`),
			Destination: "nowhere." + b.subject})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	rec := &settleRecorder{}
	pub := b.publisher(t)
	// The event without a destination is published to its type, a subject
	// no stream takes: returned, then DEAD; so is the one to nowhere.
	r := b.relay(t, pub, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Hooks: []ferry.Hook{rec},
		Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2}})
	testsvc.WaitFor(t, 30*time.Second, func() bool { s := r.Stats(); return s.Confirmed == 3 && s.Dead == 2 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	require.Equal(t, map[string]ferry.DestinationSettled{
		b.subject:              {Destination: b.subject, Sent: 3},
		"Unrouted":             {Destination: "Unrouted", Retried: 1, Dead: 1},
		"nowhere." + b.subject: {Destination: "nowhere." + b.subject, Retried: 1, Dead: 1},
	}, rec.destinations())
}
