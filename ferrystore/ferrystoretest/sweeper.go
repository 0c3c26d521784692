package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseSweeper checks the sweeper's return of expired leases.
func exerciseSweeper[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("ExpiredLeaseIsSweptAndLateMarkIsFenced", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		oldToken := "old-lease"
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: oldToken, Lease: time.Millisecond})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		var leases []ferrystore.Claimed
		waitFor(t, 10*time.Second, func() bool {
			leases, err = b.store.ExpiredClaims(b.ctx, 10)
			require.NoError(t, err)
			return len(leases) == 1
		})
		require.Equal(t, ferrystore.Claimed{ID: id, Token: oldToken, Attempts: 1, Destination: "A"}, leases[0],
			"an event without a destination goes to its type")
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: oldToken, Error: "lease expired"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{id}}, res)

		msgs, newToken := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		require.Equal(t, 2, msgs[0].Attempt)
		// The old holder wakes up and reports its outcome: nothing changes.
		n, err := b.store.MarkSent(b.ctx, oldToken, []string{id})
		require.NoError(t, err)
		require.Zero(t, n)
		res, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: oldToken, Dead: true, Error: "late"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Fenced: []string{id}}, res)
		row := b.get(t, id)
		require.Equal(t, ferrytype.StatusSending, row.Status)
		require.Equal(t, newToken, row.LeaseToken)
		n, err = b.store.MarkSent(b.ctx, newToken, []string{id})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})
}
