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

// exerciseWindow checks the figures of the pending events that read their
// rows (Stats.OldestPending, PendingByDestination, Attempts and
// PendingFailures): exact while no more than ferrystore.PendingWindow
// events of each status are pending, computed over the PendingWindow next
// in line of each status (the pending index's order) beyond, with
// Stats.Windowed saying so, and the counts exact throughout.
func exerciseWindow[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("PendingFiguresReadTheEventsNextInLine", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		const w = ferrystore.PendingWindow
		failures := func() []string {
			rows, err := a.PendingFailures(b.ctx, 10)
			require.NoError(t, err)
			return idsOfRows(rows)
		}

		// The oldest event failed its first attempt and waits an hour for
		// its next one: it is last in line.
		retried := b.enqueue(t, dest("Paid", "0", "orders.retry"))[0]
		msgs, token := b.claim(t, 1, false)
		require.Equal(t, []string{retried}, idsOf(msgs))
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: retried, Token: token, Delay: time.Hour,
			Error: "attempt 1: nack"}})
		require.NoError(t, err)
		require.Equal(t, []string{retried}, res.Retried)
		var st ferrystore.Stats
		waitFor(t, 10*time.Second, func() bool { // the others are younger
			st, err = b.store.Stats(b.ctx)
			require.NoError(t, err)
			return st.OldestPending > 5*time.Millisecond
		})
		require.Equal(t, retried, st.OldestPendingID, "one event pending: exact")
		require.False(t, st.Windowed)
		require.Equal(t, []string{retried}, failures())

		// A backlog one larger than the window, all ahead of it in line.
		var backlog []string
		for n := 0; n < w+1; {
			batch := make([]ferry.Event, 0, 1000)
			for ; n < w+1 && len(batch) < cap(batch); n++ {
				batch = append(batch, dest("Paid", fmt.Sprint(n+1), "orders.paid"))
			}
			backlog = append(backlog, b.enqueue(t, batch...)...)
		}
		st, err = b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(w+2), st.New, "the counts are exact")
		require.Equal(t, int64(w+1), st.Ready, "the retried event is not ready")
		require.True(t, st.Windowed, "more events NEW than the window")
		require.NotEqual(t, retried, st.OldestPendingID, "the oldest of the window: the retried event is behind it")
		require.Contains(t, backlog[:w], st.OldestPendingID)
		require.Less(t, st.OldestPending, time.Since(b.get(t, retried).CreatedAt)+time.Second)
		dests, err := a.PendingByDestination(b.ctx, 10)
		require.NoError(t, err)
		require.Len(t, dests, 1, "the retried event's destination is not in the window")
		require.Equal(t, "orders.paid", dests[0].Destination)
		require.Equal(t, [2]int64{w, 0}, [2]int64{dests[0].New, dests[0].Sending}, "the window's events only")
		attempts, err := a.Attempts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []ferrystore.AttemptCount{{Status: ferrytype.StatusNew, Attempts: 0, Events: w}}, attempts)
		require.Empty(t, failures(), "the failed event is not in the window")

		// Three of them in flight: w-1 NEW, which the window holds all of.
		msgs, _ = b.claim(t, 3, false)
		require.Equal(t, backlog[:3], idsOf(msgs), "claimed in line")
		st, err = b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, [2]int64{w - 1, 3}, [2]int64{st.New, st.Sending})
		require.False(t, st.Windowed)
		require.Equal(t, retried, st.OldestPendingID, "every pending event read: exact again")
		dests, err = a.PendingByDestination(b.ctx, 10)
		require.NoError(t, err)
		require.Len(t, dests, 2)
		require.Equal(t, ferrystore.DestinationStats{Destination: "orders.retry", New: 1},
			ferrystore.DestinationStats{Destination: dests[0].Destination, New: dests[0].New, Sending: dests[0].Sending},
			"the oldest first")
		require.Equal(t, [3]any{"orders.paid", int64(w - 2), int64(3)}, [3]any{dests[1].Destination, dests[1].New, dests[1].Sending})
		attempts, err = a.Attempts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []ferrystore.AttemptCount{{Status: ferrytype.StatusNew, Attempts: 0, Events: w - 2},
			{Status: ferrytype.StatusNew, Attempts: 1, Events: 1}, {Status: ferrytype.StatusSending, Attempts: 1, Events: 3}},
			attempts)
		require.Equal(t, []string{retried}, failures())
		_, err = a.PendingFailures(b.ctx, 0)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})
}
