package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// states is one row in each status, with the token each SENDING, SENT,
// DEAD and DISCARDED row was claimed with.
type states struct {
	id    map[ferrytype.Status]string
	token map[ferrytype.Status]string
}

// everyStatus builds one row in each status. Each row is claimed while it
// is the only NEW row, so each claim takes exactly it.
func (b *bundle[TTx]) everyStatus(t *testing.T) states {
	t.Helper()
	st := states{id: map[ferrytype.Status]string{}, token: map[ferrytype.Status]string{}}
	claimOne := func(status ferrytype.Status, aggregate string) string {
		id := b.enqueue(t, ev("A", aggregate, `{}`))[0]
		msgs, token := b.claim(t, 10, false)
		require.Equal(t, []string{id}, ids(msgs))
		st.id[status], st.token[status] = id, token
		return token
	}
	for _, s := range []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusDiscarded} {
		tok := claimOne(s, string(s))
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: st.id[s], Token: tok, Dead: true, Error: "x"}})
		require.NoError(t, err)
		require.Equal(t, []string{st.id[s]}, res.Dead)
	}
	n, err := b.admin(t).Discard(b.ctx, []string{st.id[ferrytype.StatusDiscarded]}, "fixture")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	tok := claimOne(ferrytype.StatusSent, "sent")
	n, err = b.store.MarkSent(b.ctx, tok, []string{st.id[ferrytype.StatusSent]})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	claimOne(ferrytype.StatusSending, "sending")
	st.id[ferrytype.StatusNew] = b.enqueue(t, ev("A", "new", `{}`))[0]
	for s, id := range st.id {
		require.Equal(t, s, b.get(t, id).Status, "fixture row %s", id)
	}
	return st
}

// others returns the statuses other than except.
func others(except ...ferrytype.Status) []ferrytype.Status {
	var out []ferrytype.Status
	for _, s := range []ferrytype.Status{ferrytype.StatusNew, ferrytype.StatusSending, ferrytype.StatusSent,
		ferrytype.StatusDead, ferrytype.StatusDiscarded} {
		keep := true
		for _, e := range except {
			keep = keep && s != e
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// exerciseTransitions checks each edge of the state machine
// (ferrytype.Transitions) and that every other change is refused.
func exerciseTransitions[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("TableIsConsistent", func(t *testing.T) {
		for _, tr := range ferrytype.Transitions() {
			require.True(t, tr.From.Valid(), tr.Name)
			require.True(t, tr.To == "" || tr.To.Valid(), tr.Name)
			require.True(t, ferrytype.Allowed(tr.From, tr.To), tr.Name)
		}
		require.True(t, ferrytype.StatusSent.Terminal())
		require.False(t, ferrytype.StatusDiscarded.Terminal(), "an operator restores it")
		require.False(t, ferrytype.StatusDead.Terminal())
		require.False(t, ferrytype.Allowed(ferrytype.StatusDiscarded, ferrytype.StatusNew), "a restored event is DEAD first")
		require.False(t, ferrytype.Allowed(ferrytype.StatusSent, ferrytype.StatusNew))
		require.False(t, ferrytype.Allowed(ferrytype.StatusNew, ferrytype.StatusSent))
	})

	t.Run("ClaimTakesNewToSending", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionClaim.To, row.Status)
		require.Equal(t, token, row.LeaseToken)
		require.Equal(t, 1, row.Attempt)
	})

	t.Run("ClaimTakesNoOtherStatus", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		msgs, _ := b.claim(t, 10, false)
		require.Equal(t, []string{st.id[ferrytype.StatusNew]}, ids(msgs), "only the NEW row is claimed")
		again, _ := b.claim(t, 10, false)
		require.Empty(t, again)
	})

	t.Run("ConfirmTakesSendingToSent", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		n, err := b.store.MarkSent(b.ctx, token, []string{id})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionConfirm.To, row.Status)
		require.Empty(t, row.LeaseToken)
		require.False(t, row.SentAt.IsZero())
	})

	t.Run("ConfirmRefusesAnotherToken", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		id := st.id[ferrytype.StatusSending]
		n, err := b.store.MarkSent(b.ctx, "not-the-lease", []string{id})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, ferrytype.StatusSending, b.get(t, id).Status)
	})

	t.Run("ConfirmRefusesRowsNotSending", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		for _, s := range others(ferrytype.StatusSending) {
			n, err := b.store.MarkSent(b.ctx, st.token[s], []string{st.id[s]})
			require.NoError(t, err)
			require.Zero(t, n, "MarkSent changed a %s row", s)
			require.Equal(t, s, b.get(t, st.id[s]).Status)
		}
	})

	t.Run("FailRetryTakesSendingToNew", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Error: "x"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{id}}, res)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionFailRetry.To, row.Status)
		require.Empty(t, row.LeaseToken)
	})

	t.Run("FailDeadTakesSendingToDead", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Dead: true, Error: "x"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Dead: []string{id}}, res)
		require.Equal(t, ferrytype.TransitionFailDead.To, b.get(t, id).Status)
	})

	t.Run("MalformedTakesSendingToDeadInTheClaim", func(t *testing.T) {
		needs(t, rawWriter(h) != nil, "InsertRaw (nor Exec)", "the malformed row is written by hand")
		b := setup(t, h)
		b.insertRaw(t, poisonRows()[0], "malformed")
		var reported []string
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "tok-malformed", Lease: time.Minute,
			Malformed: func(id string, _ error) { reported = append(reported, id) }})
		require.NoError(t, err)
		require.Empty(t, msgs)
		require.Equal(t, []string{"malformed"}, reported)
		r := b.get(t, "malformed")
		require.Equal(t, ferrytype.TransitionMalformed.To, r.Status)
		require.Equal(t, 1, r.Attempt, "one claim, one attempt")
		require.Empty(t, r.LeaseToken)
	})

	t.Run("FailReportsEachRowInOneCall", func(t *testing.T) {
		b := setup(t, h)
		got := b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("A", "3", `{}`))
		_, token := b.claim(t, 10, false)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{
			{ID: got[0], Token: token, Dead: true, Error: "x"},
			{ID: got[1], Token: "not-the-lease", Dead: true, Error: "x"},
			{ID: got[2], Token: token, Error: "x"},
		})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{got[2]}, Dead: []string{got[0]},
			Fenced: []string{got[1]}}, res)
		require.Equal(t, int64(2), res.Changed())
		require.Equal(t, ferrytype.StatusSending, b.get(t, got[1]).Status)
	})

	t.Run("FailRefusesRowsNotSendingUnderTheToken", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		fails := []ferrystore.Failure{{ID: st.id[ferrytype.StatusSending], Token: "not-the-lease", Dead: true, Error: "x"}}
		for _, s := range others(ferrytype.StatusSending) {
			fails = append(fails, ferrystore.Failure{ID: st.id[s], Token: st.token[s], Dead: true, Error: "x"})
		}
		res, err := b.store.MarkFailed(b.ctx, fails)
		require.NoError(t, err)
		require.Empty(t, res.Retried)
		require.Empty(t, res.Dead)
		require.Len(t, res.Fenced, len(fails))
		for s, id := range st.id {
			require.Equal(t, s, b.get(t, id).Status)
		}
	})

	t.Run("ReleaseTakesSendingToNewWithoutSpendingAnAttempt", func(t *testing.T) {
		b := setup(t, h)
		got := b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		// A failed attempt first, so that the row has an attempt to keep.
		_, token := b.claim(t, 10, false)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: got[0], Token: token, Error: "first"},
			{ID: got[1], Token: token, Error: "first"}})
		require.NoError(t, err)
		require.Len(t, res.Retried, 2)
		msgs, token := b.claim(t, 10, false)
		require.Len(t, msgs, 2)
		require.Equal(t, 2, b.get(t, got[0]).Attempt)
		n, err := b.store.Release(b.ctx, token, []string{got[0]})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, got[0])
		require.Equal(t, ferrytype.TransitionRelease.To, row.Status)
		require.Equal(t, 1, row.Attempt, "the released claim spent no attempt")
		require.Empty(t, row.LeaseToken)
		require.True(t, row.LockedUntil.IsZero())
		require.Equal(t, "first", row.LastError, "the last real failure stays")
		require.Equal(t, ferrytype.StatusSending, b.get(t, got[1]).Status, "only the named ids")
		again, _ := b.claim(t, 10, false)
		require.Equal(t, []string{got[0]}, ids(again), "a released row is available at once")
		require.Equal(t, 2, again[0].Attempt)
	})

	t.Run("ReleaseRefusesRowsNotSendingUnderTheToken", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		n, err := b.store.Release(b.ctx, "not-the-lease", []string{st.id[ferrytype.StatusSending]})
		require.NoError(t, err)
		require.Zero(t, n)
		for _, s := range others(ferrytype.StatusSending) {
			n, err := b.store.Release(b.ctx, st.token[s], []string{st.id[s]})
			require.NoError(t, err)
			require.Zero(t, n, "Release changed a %s row", s)
		}
		for s, id := range st.id {
			require.Equal(t, s, b.get(t, id).Status)
		}
		require.Equal(t, 1, b.get(t, st.id[ferrytype.StatusSending]).Attempt)
	})

	t.Run("SweepReturnsExpiredLeasesToNewOrDead", func(t *testing.T) {
		b := setup(t, h)
		routed := ev("A", "2", `{}`)
		routed.Destination = "orders.paid"
		got := b.enqueue(t, ev("A", "1", `{}`), routed)
		_, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "short", Lease: time.Millisecond})
		require.NoError(t, err)
		var leases []ferrystore.Claimed
		waitFor(t, 10*time.Second, func() bool {
			leases, err = b.store.ExpiredClaims(b.ctx, 10)
			require.NoError(t, err)
			return len(leases) == 2
		})
		dest := map[string]string{}
		for _, l := range leases {
			dest[l.ID] = l.Destination
		}
		require.Equal(t, map[string]string{got[0]: "A", got[1]: "orders.paid"}, dest,
			"each lease names where its event goes: its destination, else its type")
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{
			{ID: got[0], Token: "short", Error: "lease expired"},
			{ID: got[1], Token: "short", Dead: true, Error: "lease expired"},
		})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{got[0]}, Dead: []string{got[1]}}, res)
		require.Equal(t, ferrytype.TransitionSweepRetry.To, b.get(t, got[0]).Status)
		require.Equal(t, ferrytype.TransitionSweepDead.To, b.get(t, got[1]).Status)
	})

	t.Run("SweepSeesOnlyExpiredSendingRows", func(t *testing.T) {
		b := setup(t, h)
		b.everyStatus(t) // its SENDING row holds a lease of a minute
		leases, err := b.store.ExpiredClaims(b.ctx, 10)
		require.NoError(t, err)
		require.Empty(t, leases)
	})

	t.Run("ReviveTakesDeadToNew", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		id := st.id[ferrytype.StatusDead]
		n, err := b.admin(t).Retry(b.ctx, []string{id})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionRevive.To, row.Status)
		require.Zero(t, row.Attempt)
	})

	t.Run("ReviveRefusesRowsNotDead", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		for _, s := range others(ferrytype.StatusDead) {
			n, err := b.admin(t).Retry(b.ctx, []string{st.id[s]})
			require.NoError(t, err)
			require.Zero(t, n, "Retry changed a %s row", s)
			require.Equal(t, s, b.get(t, st.id[s]).Status)
		}
	})

	t.Run("DiscardTakesDeadToDiscarded", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		id := st.id[ferrytype.StatusDead]
		n, err := b.admin(t).Discard(b.ctx, []string{id}, "no longer wanted")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionDiscard.To, row.Status)
		require.Equal(t, "no longer wanted", row.DiscardReason)
	})

	t.Run("DiscardRefusesRowsNotDead", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		for _, s := range others(ferrytype.StatusDead) {
			n, err := b.admin(t).Discard(b.ctx, []string{st.id[s]}, "x")
			require.NoError(t, err)
			require.Zero(t, n, "Discard changed a %s row", s)
			require.Equal(t, s, b.get(t, st.id[s]).Status)
		}
	})

	t.Run("RestoreTakesDiscardedToDead", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		id := st.id[ferrytype.StatusDiscarded]
		n, err := b.admin(t).Restore(b.ctx, []string{id}, "restored by test")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, id)
		require.Equal(t, ferrytype.TransitionRestore.To, row.Status)
		require.Equal(t, "fixture; restored by test", row.DiscardReason)
	})

	t.Run("RestoreRefusesRowsNotDiscarded", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		for _, s := range others(ferrytype.StatusDiscarded) {
			n, err := b.admin(t).Restore(b.ctx, []string{st.id[s]}, "x")
			require.NoError(t, err)
			require.Zero(t, n, "Restore changed a %s row", s)
			require.Equal(t, s, b.get(t, st.id[s]).Status)
		}
	})

	t.Run("PurgesDeleteOnlyTheirStatus", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		waitFor(t, 10*time.Second, func() bool {
			n, err := b.store.PurgeSent(b.ctx, time.Millisecond, 10)
			require.NoError(t, err)
			return n == 1
		})
		waitFor(t, 10*time.Second, func() bool {
			n, err := b.admin(t).PurgeDiscarded(b.ctx, time.Millisecond, 10)
			require.NoError(t, err)
			return n == 1
		})
		for _, s := range []ferrytype.Status{ferrytype.TransitionPurgeSent.From, ferrytype.TransitionPurgeDiscarded.From} {
			_, err := b.store.Get(b.ctx, st.id[s])
			require.ErrorIs(t, err, ferrytype.ErrNotFound, "the %s row is purged", s)
		}
		for _, s := range others(ferrytype.StatusSent, ferrytype.StatusDiscarded) {
			require.Equal(t, s, b.get(t, st.id[s]).Status, "the %s row stays", s)
		}
	})

	t.Run("SentAndDiscardedRowsStay", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		for _, s := range []ferrytype.Status{ferrytype.StatusSent, ferrytype.StatusDiscarded} {
			id := st.id[s]
			n, err := b.store.MarkSent(b.ctx, st.token[s], []string{id})
			require.NoError(t, err)
			require.Zero(t, n)
			res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: st.token[s], Error: "x"}})
			require.NoError(t, err)
			require.Equal(t, []string{id}, res.Fenced)
			n, err = b.admin(t).Retry(b.ctx, []string{id})
			require.NoError(t, err)
			require.Zero(t, n)
			n, err = b.admin(t).Discard(b.ctx, []string{id}, "x")
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, s, b.get(t, id).Status)
		}
	})
}
