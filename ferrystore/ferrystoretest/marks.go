package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseMarks checks outcome marks and their fencing.
func exerciseMarks[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("MarkSentNeedsTheLeaseToken", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`))
		msgs, token := b.claim(t, 10, false)
		n, err := b.store.MarkSent(b.ctx, "someone-else", ids(msgs))
		require.NoError(t, err)
		require.Zero(t, n, "a mark under another token changes nothing")
		require.Equal(t, ferrytype.StatusSending, b.get(t, msgs[0].ID).Status)
		n, err = b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("MarkFailedRetriesThenDies", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		msgs, token := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Error: "attempt 1: unknown: boom"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{id}}, res)
		row := b.get(t, id)
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Equal(t, "attempt 1: unknown: boom", row.LastError)
		require.Empty(t, row.LeaseToken)

		msgs, token = b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		require.Equal(t, id, msgs[0].ID, "the retry keeps the event id")
		require.Equal(t, 2, msgs[0].Attempt)
		res, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Dead: true, Error: "attempt 2: rejected"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Dead: []string{id}}, res)
		require.Equal(t, ferrytype.StatusDead, b.get(t, id).Status)
		again, _ := b.claim(t, 10, false)
		require.Empty(t, again, "DEAD rows are not claimed")
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Dead)
	})

	t.Run("RetryDelayComesFromTheDatabaseClock", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		_, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Delay: time.Hour, Error: "x"}})
		require.NoError(t, err)
		row := b.get(t, id)
		require.WithinDuration(t, row.CreatedAt.Add(time.Hour), row.AvailableAt, 5*time.Minute)
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
	})
}
