package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
)

// exerciseOrderedClaim checks ordered claims.
func exerciseOrderedClaim[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("OrderedClaimWaitsForEarlierEvents", func(t *testing.T) {
		b := setup(t, h)
		a := b.enqueue(t, ev("Created", "A", `{}`), ev("Paid", "A", `{}`), ev("Shipped", "A", `{}`))
		bID := b.enqueue(t, ev("Created", "B", `{}`))[0]
		msgs, token := b.claim(t, 10, true)
		require.ElementsMatch(t, []string{a[0], bID}, ids(msgs), "only each aggregate's first pending event")
		again, _ := b.claim(t, 10, true)
		require.Empty(t, again, "A's second event waits while the first is SENDING")
		_, err := b.store.MarkSent(b.ctx, token, []string{a[0]})
		require.NoError(t, err)
		msgs, token = b.claim(t, 10, true)
		require.Equal(t, []string{a[1]}, ids(msgs))
		// A DEAD event holds back the rest of its aggregate.
		_, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: a[1], Token: token, Dead: true, Error: "x"}})
		require.NoError(t, err)
		again, _ = b.claim(t, 10, true)
		require.Empty(t, again, "a DEAD event blocks its aggregate")
		unordered, _ := b.claim(t, 10, false)
		require.Equal(t, []string{a[2]}, ids(unordered), "unordered claims ignore order")
	})

	t.Run("OrderedClaimLooksAtThePredecessorOnly", func(t *testing.T) {
		b := setup(t, h)
		a := b.enqueue(t, ev("Created", "A", `{}`), ev("Paid", "A", `{}`), ev("Shipped", "A", `{}`))
		for _, want := range a[:2] {
			msgs, token := b.claim(t, 10, true)
			require.Equal(t, []string{want}, ids(msgs))
			n, err := b.store.MarkSent(b.ctx, token, ids(msgs))
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
		}
		// A's first two events are SENT and purged: a missing predecessor
		// holds nothing back.
		var purged int64
		waitFor(t, 10*time.Second, func() bool {
			n, err := b.store.PurgeSent(b.ctx, time.Millisecond, 10)
			require.NoError(t, err)
			purged += n
			return purged == 2
		})
		msgs, _ := b.claim(t, 10, true)
		require.Equal(t, []string{a[2]}, ids(msgs))
	})

	t.Run("OrderedClaimSkipsPastALockedHead", func(t *testing.T) {
		needs(t, h.LockRow != nil, "LockRow", "no claim in progress leaves a row locked and still NEW")
		b := setup(t, h)
		a := b.enqueue(t, ev("Created", "A", `{}`), ev("Paid", "A", `{}`))
		// Another relay is claiming A's first event right now: its row
		// is locked and still NEW. The second must not be claimed.
		release := h.LockRow(b.ctx, t, b.store, a[0])
		msgs, _ := b.claim(t, 10, true)
		release()
		require.Empty(t, msgs, "event 2 claimed while event 1 was being claimed")
		msgs, _ = b.claim(t, 10, true)
		require.Equal(t, []string{a[0]}, ids(msgs))
	})
}
