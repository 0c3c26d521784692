package ferryadmin_test

import (
	"context"
	"database/sql/driver"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// After a bulk action of many events, PostgreSQL's counts read no row
// again. They are index-only scans, which read the row of every entry on
// a page the visibility map does not mark all-visible: every page the
// action changed, until a vacuum passes (the overview took 3.4 s after
// 600,000 events, 0.5 s once vacuumed). ferryadmin tells the store how
// many rows the action changed (Admin.AfterBulk), and the store vacuums.
//
// The table is in a database of its own, with autovacuum off: only the
// store's vacuum can make the second count read no row, and no open
// transaction of another test (in the shared database) can keep that
// vacuum from marking the pages all-visible, as a long transaction does
// in production.
func TestBulkActionLeavesTheCountsIndexOnly(t *testing.T) {
	t.Parallel()
	b := setupOwnDatabase(t)
	table := b.st.Driver.Table()
	_, err := b.st.DB.ExecContext(b.ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	n := 2 * ferrystore.BulkTidyRows
	testsvc.InsertDead(t, b.st, n, deadMix...)
	testsvc.Analyze(t, b.st)
	require.Zero(t, heapFetches(t, b), "a freshly vacuumed table")

	// The action, with the store's AfterBulk held back.
	held := &heldTidy{Admin: b.admin}
	res, err := ferryadmin.RetryDead(b.ctx, held, ferryadmin.BulkOptions{All: true})
	require.NoError(t, err)
	require.EqualValues(t, n, res.Changed)
	require.Equal(t, []int64{res.Changed}, held.calls, "AfterBulk is told once what the action changed")
	require.Positive(t, heapFetches(t, b), "the counts read the changed rows before the vacuum")

	require.NoError(t, b.admin.AfterBulk(b.ctx, res.Changed))
	require.Zero(t, heapFetches(t, b), "the counts read no row after the store's AfterBulk")

	// A small change is left to autovacuum.
	_, err = b.st.DB.ExecContext(b.ctx, "UPDATE "+table+" SET attempts = 1 WHERE event_id IN (SELECT event_id FROM "+
		table+" ORDER BY created_at LIMIT 100)")
	require.NoError(t, err)
	require.NoError(t, b.admin.AfterBulk(b.ctx, 100))
	require.Positive(t, heapFetches(t, b), "no vacuum below ferrystore.BulkTidyRows")
}

// setupOwnDatabase is setup for PostgreSQL in a database made for the
// test (testsvc.StoreOwnDatabase).
func setupOwnDatabase(t *testing.T) *bundle {
	t.Helper()
	st, _ := testsvc.StoreOwnDatabase(t, "postgres")
	return &bundle{ctx: testsvc.Context(t, 2*time.Minute), kind: "postgres", st: st, admin: st.Driver}
}

// heldTidy records the calls of AfterBulk and does nothing.
type heldTidy struct {
	ferrystore.Admin
	mu    sync.Mutex
	calls []int64
}

func (h *heldTidy) AfterBulk(_ context.Context, changed int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, changed)
	return nil
}

// heapFetches runs the overview's count of the NEW and DEAD events as an
// index-only scan and returns how many rows it read.
func heapFetches(t *testing.T, b *bundle) float64 {
	t.Helper()
	conn, err := b.st.DB.Conn(b.ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{"SET enable_seqscan = off", "SET enable_bitmapscan = off"} {
		_, err = conn.ExecContext(b.ctx, q)
		require.NoError(t, err)
	}
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) // its settings go with it
	var out string
	require.NoError(t, conn.QueryRowContext(b.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) SELECT status, COUNT(*) FROM "+
		b.st.Driver.Table()+" WHERE status IN ('NEW', 'DEAD') GROUP BY status").Scan(&out))
	scans := objectsOf(t, out, "Heap Fetches")
	require.NotEmpty(t, scans, "an index-only scan\n%s", out)
	total := 0.0
	for _, s := range scans {
		total += s["Heap Fetches"].(float64)
	}
	return total
}
