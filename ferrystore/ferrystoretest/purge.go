package ferrystoretest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exercisePurge checks retention of SENT rows.
func exercisePurge[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("PurgeDeletesOnlyOldSentRowsInBatches", func(t *testing.T) {
		b := setup(t, h)
		for i := 0; i < 5; i++ {
			b.enqueue(t, ev("A", fmt.Sprint(i), `{}`))
		}
		msgs, token := b.claim(t, 3, false)
		_, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		n, err := b.store.PurgeSent(b.ctx, time.Hour, 10)
		require.NoError(t, err)
		require.Zero(t, n, "rows sent just now are younger than an hour")
		// Once the database clock passes sent_at + 1ms, all three are
		// eligible; one call deletes no more than its limit.
		waitFor(t, 10*time.Second, func() bool {
			n, err = b.store.PurgeSent(b.ctx, time.Millisecond, 2)
			require.NoError(t, err)
			return n > 0
		})
		require.Equal(t, int64(2), n, "one batch deletes at most its limit")
		n, err = b.store.PurgeSent(b.ctx, time.Millisecond, 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.New, "pending rows are never purged")
	})
}
