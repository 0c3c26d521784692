package ferrystoretest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseClaimIDs tests claims restricted to ids (ClaimParams.IDs), the
// log relay's claims: only the ids given, only those NEW and available,
// at most the limit, and in ordered mode only an aggregate's next event.
func exerciseClaimIDs[TTx any](t *testing.T, h Harness[TTx]) {
	var n int
	claimIDs := func(t *testing.T, b *bundle[TTx], limit int, ordered bool, want ...string) []ferrytype.Message {
		t.Helper()
		n++
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: limit, Token: fmt.Sprintf("ids-%d", n),
			Lease: time.Minute, Ordered: ordered, IDs: want})
		require.NoError(t, err)
		return msgs
	}

	t.Run("ClaimByIDTakesOnlyThoseIDs", func(t *testing.T) {
		b := setup(t, h)
		all := b.enqueue(t, ev("A", "1", `{}`), ev("B", "1", `{}`), ev("C", "1", `{}`), ev("D", "1", `{}`))
		msgs := claimIDs(t, b, 10, false, all[1], all[3], "no-such-event")
		require.ElementsMatch(t, []string{all[1], all[3]}, ids(msgs))
		for _, m := range msgs {
			require.Equal(t, 1, m.Attempt)
			require.Equal(t, ferrytype.StatusSending, b.get(t, m.ID).Status)
		}
		require.Equal(t, ferrytype.StatusNew, b.get(t, all[0]).Status)
		require.Empty(t, claimIDs(t, b, 10, false, all[1], all[3]), "a leased row is not claimed again")
		rest, _ := b.claim(t, 10, false)
		require.ElementsMatch(t, []string{all[0], all[2]}, ids(rest), "the pending scan finds the others")
	})

	t.Run("ClaimByIDRespectsLimitAndAvailability", func(t *testing.T) {
		b := setup(t, h)
		now := b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("A", "3", `{}`))
		later := b.enqueue(t, ferry.Event{AggregateType: "L", AggregateID: "1", Type: "T", Payload: []byte(`{}`), Delay: time.Hour})
		msgs := claimIDs(t, b, 2, false, append(later, now...)...)
		require.Len(t, msgs, 2)
		require.NotContains(t, ids(msgs), later[0], "an event not available yet is not claimed")
		require.Equal(t, ferrytype.StatusNew, b.get(t, later[0]).Status)
	})

	t.Run("OrderedClaimByIDTakesOnlyTheNextEvent", func(t *testing.T) {
		b := setup(t, h)
		a := b.enqueue(t, ev("A", "1", `{}`), ev("A", "1", `{}`), ev("A", "1", `{}`))
		msgs := claimIDs(t, b, 10, true, a...)
		require.Equal(t, []string{a[0]}, ids(msgs), "the later events of the aggregate wait for the first")
		token := b.get(t, a[0]).LeaseToken
		require.Empty(t, claimIDs(t, b, 10, true, a[1], a[2]), "not while the first is in flight")
		n, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, []string{a[1]}, ids(claimIDs(t, b, 10, true, a[1], a[2])))
	})
}
