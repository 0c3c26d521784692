package chaos

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/stretchr/testify/require"
)

// TestProgressSaysStalledOnlyWhenNoOrderCommits: a count that grows is
// progress; the same count for the whole stall bound, or a count that
// fails, is not.
func TestProgressSaysStalledOnlyWhenNoOrderCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := shop.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "orders.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, shop.SetupOrders(ctx, db))
	const stall = 300 * time.Millisecond
	p := newProgress(db, 0, stall)
	// The test's clock: it moves only when the test moves it.
	clock := p.start
	p.now = func() time.Time { return clock }

	order := func(id int) {
		_, err := db.ExecContext(ctx, "INSERT INTO shop_order (id, user_id, amount, status) VALUES (?, 1, 1, 'paid')", id)
		require.NoError(t, err)
	}
	order(1)
	stalled, err := p.stalled(ctx)
	require.NoError(t, err)
	require.False(t, stalled)
	require.EqualValues(t, 1, p.orders)

	// The same count within the bound is no stall (a bound of an hour:
	// the verdict does not depend on how long the count takes).
	patient := newProgress(db, 0, time.Hour)
	patient.now = p.now
	for range 2 {
		stalled, err = patient.stalled(ctx)
		require.NoError(t, err)
		require.False(t, stalled)
	}

	// No order for the stall bound: stalled, and String says how far it got.
	clock = p.moved.Add(stall)
	stalled, err = p.stalled(ctx)
	require.NoError(t, err)
	require.True(t, stalled)
	require.Contains(t, p.String(), "1 orders committed")

	// An order commits: progress again.
	order(2)
	stalled, err = p.stalled(ctx)
	require.NoError(t, err)
	require.False(t, stalled)

	// A count that fails is no progress, and is said.
	_, err = db.ExecContext(ctx, "DROP TABLE shop_order")
	require.NoError(t, err)
	clock = p.moved.Add(stall)
	stalled, err = p.stalled(ctx)
	require.NoError(t, err)
	require.True(t, stalled)
	require.Contains(t, p.String(), "the last count failed")

	// The run's end is the one error.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.stalled(done)
	require.ErrorIs(t, err, context.Canceled)
}
