package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// settleRecorder records what HookSweep and HookSettle report.
type settleRecorder struct {
	mu                         sync.Mutex
	swept, sent, retried, dead int64
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
	b := setupRelay(t, "sqlite")
	id := b.enqueue(t, 1, func(int) string { return "1" })[0]
	rec := &settleRecorder{}
	r := b.relay(t, b.publisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond, Lease: 150 * time.Millisecond, PublishTimeout: 100 * time.Millisecond,
		SweepInterval: 20 * time.Millisecond,
		Retry:         ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2},
		Hooks:         []ferry.Hook{rec},
		// Every claim is abandoned, as by a relay that crashed: only the
		// sweeper ever settles the event.
		FaultPoint: func(_ context.Context, point string) error {
			if point == ferry.FaultAfterClaim {
				return errors.New("abandon")
			}
			return nil
		},
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
}
