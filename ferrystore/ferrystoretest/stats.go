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

	t.Run("GetUnknownEvent", func(t *testing.T) {
		b := setup(t, h)
		_, err := b.store.Get(b.ctx, "no-such-event")
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	})
}
