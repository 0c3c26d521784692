package ferrystoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
)

// answer returns what question (Store.Ready or Store.Pending) says of
// b's table, failing t on an error.
func answer[TTx any](t *testing.T, b *bundle[TTx], question func(context.Context) (bool, error)) bool {
	t.Helper()
	ok, err := question(b.ctx)
	require.NoError(t, err)
	return ok
}

// exerciseReady checks the idle relay's probe: it sees exactly the rows a
// claim would take.
func exerciseReady[TTx any](t *testing.T, h Harness[TTx]) {
	ready := func(t *testing.T, b *bundle[TTx]) bool { t.Helper(); return answer(t, b, b.store.Ready) }

	t.Run("EmptyTableIsNotReady", func(t *testing.T) {
		b := setup(t, h)
		require.False(t, ready(t, b))
	})

	t.Run("CommittedEventIsReady", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`))
		require.True(t, ready(t, b))
	})

	t.Run("UncommittedEventIsNotReady", func(t *testing.T) {
		b := setup(t, h)
		needs(t, h.LockRow != nil || h.ReadsBesideWriters, "LockRow nor ReadsBesideWriters",
			"a writer's open transaction blocks readers on this database")
		tx, _, rollback := h.Begin(b.ctx, t, b.store)
		_, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", "1", `{}`))
		require.NoError(t, err)
		defer func() { require.NoError(t, rollback()) }()
		require.False(t, ready(t, b), "the probe reads committed rows only")
	})

	t.Run("DelayedEventIsNotReady", func(t *testing.T) {
		b := setup(t, h)
		later := ev("A", "1", `{}`)
		later.Delay = time.Hour
		b.enqueue(t, later)
		require.False(t, ready(t, b))
	})

	t.Run("ClaimedAndSentEventsAreNotReady", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		msgs, token := b.claim(t, 1, false)
		require.Len(t, msgs, 1)
		require.True(t, ready(t, b), "one event is still NEW")
		_, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		rest, _ := b.claim(t, 10, false)
		require.Len(t, rest, 1)
		require.False(t, ready(t, b), "one event SENT, one SENDING: nothing to claim")
	})
}

// exercisePending checks the drain's check: whether any row is NEW (now or
// later) or SENDING, whatever else the table holds.
func exercisePending[TTx any](t *testing.T, h Harness[TTx]) {
	pending := func(t *testing.T, b *bundle[TTx]) bool { t.Helper(); return answer(t, b, b.store.Pending) }

	t.Run("EmptyTableHasNothingPending", func(t *testing.T) {
		b := setup(t, h)
		require.False(t, pending(t, b))
	})

	t.Run("DelayedEventIsPending", func(t *testing.T) {
		b := setup(t, h)
		later := ev("A", "1", `{}`)
		later.Delay = time.Hour
		b.enqueue(t, later)
		require.True(t, pending(t, b), "a drain waits for a delayed event")
	})

	t.Run("OnlyNewAndSendingArePending", func(t *testing.T) {
		b := setup(t, h)
		st := b.everyStatus(t)
		require.True(t, pending(t, b), "NEW and SENDING rows")
		tok := st.token[ferrytype.StatusSending]
		_, err := b.store.MarkSent(b.ctx, tok, []string{st.id[ferrytype.StatusSending]})
		require.NoError(t, err)
		require.True(t, pending(t, b), "the NEW row")
		msgs, tok := b.claim(t, 10, false)
		require.Equal(t, []string{st.id[ferrytype.StatusNew]}, ids(msgs))
		require.True(t, pending(t, b), "the NEW row is SENDING now")
		_, err = b.store.MarkSent(b.ctx, tok, ids(msgs))
		require.NoError(t, err)
		require.False(t, pending(t, b), "SENT, DEAD and DISCARDED rows are not pending")
	})
}
