package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseStats checks statistics and lookups.
func exerciseStats[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("StatsMeasureTheOldestPendingEvent", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		var st ferrystore.Stats
		waitFor(t, 10*time.Second, func() bool {
			var err error
			st, err = b.store.Stats(b.ctx)
			require.NoError(t, err)
			return st.OldestPending > 0
		})
		require.Equal(t, int64(2), st.New)
		require.Equal(t, int64(2), st.Ready)
		require.Less(t, st.OldestPending, time.Hour)
		msgs, token := b.claim(t, 10, false)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.Sending)
		_, err = b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		st, err = b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.OldestPending, "nothing pending")
	})

	t.Run("StatsCountARetriedEventPendingFromItsRetry", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		old := b.enqueueDead(t, ev("A", "1", `{}`))[0]
		later := b.enqueue(t, ev("A", "2", `{}`))[0]
		waitFor(t, 10*time.Second, func() bool { // later has waited a while
			st, err := b.store.Stats(b.ctx)
			require.NoError(t, err)
			return st.OldestPending >= 100*time.Millisecond
		})
		n, err := a.Retry(b.ctx, []string{old})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.New)
		require.Equal(t, later, st.OldestPendingID,
			"the event retried just now has been pending since its retry, not since it was created before the other")
		require.GreaterOrEqual(t, st.OldestPending, 100*time.Millisecond, "the age of the other")
	})

	t.Run("GetUnknownEvent", func(t *testing.T) {
		b := setup(t, h)
		_, err := b.store.Get(b.ctx, "no-such-event")
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	})
}
