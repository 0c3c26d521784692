package ferrystoretest

import (
	"context"
	"encoding/json"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
)

func (b *bundle[TTx]) admin(t *testing.T) ferrystore.Admin {
	t.Helper()
	a, ok := b.store.(ferrystore.Admin)
	require.True(t, ok, "%T does not implement ferrystore.Admin", b.store)
	return a
}

// enqueueDead writes events in one transaction and takes them to DEAD, as
// a relay does after the last failed attempt. No other event may be ready.
func (b *bundle[TTx]) enqueueDead(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	ids := b.enqueue(t, events...)
	msgs, token := b.claim(t, len(ids)+10, false)
	require.ElementsMatch(t, ids, idsOf(msgs), "enqueueDead: another event was ready")
	fails := make([]ferrystore.Failure, len(msgs))
	for i, m := range msgs {
		fails[i] = ferrystore.Failure{ID: m.ID, Token: token, Dead: true, Error: "attempt 1: rejected: no"}
	}
	res, err := b.store.MarkFailed(b.ctx, fails)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, res.Dead)
	require.Empty(t, res.Fenced)
	return ids
}

func dest(typ, aggID, destination string) ferry.Event {
	e := ev(typ, aggID, `{}`)
	e.Destination = destination
	return e
}

func exerciseAdmin[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("PingAnswers", func(t *testing.T) {
		b := setup(t, h)
		require.NoError(t, b.admin(t).Ping(b.ctx))
	})

	t.Run("CountByStatus", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		b.enqueueDead(t, ev("A", "1", `{}`))
		b.enqueue(t, ev("A", "2", `{}`), ev("A", "3", `{}`), ev("A", "4", `{}`))
		msgs, token := b.claim(t, 2, false)
		_, err := b.store.MarkSent(b.ctx, token, ids(msgs[:1]))
		require.NoError(t, err)
		got, err := a.CountByStatus(b.ctx, ferrytype.StatusNew, ferrytype.StatusSending, ferrytype.StatusSent,
			ferrytype.StatusDead, ferrytype.StatusDiscarded)
		require.NoError(t, err)
		require.Equal(t, map[ferrytype.Status]int64{ferrytype.StatusNew: 1, ferrytype.StatusSending: 1,
			ferrytype.StatusSent: 1, ferrytype.StatusDead: 1, ferrytype.StatusDiscarded: 0}, got)
	})

	t.Run("AfterBulkChangesNoRow", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		b.enqueueDead(t, ev("A", "1", `{}`))
		b.enqueue(t, ev("A", "2", `{}`))
		for _, changed := range []int64{0, 1, ferrystore.BulkTidyRows} {
			require.NoError(t, a.AfterBulk(b.ctx, changed), "AfterBulk(%d)", changed)
		}
		got, err := a.CountByStatus(b.ctx, ferrytype.StatusNew, ferrytype.StatusDead)
		require.NoError(t, err)
		require.Equal(t, map[ferrytype.Status]int64{ferrytype.StatusNew: 1, ferrytype.StatusDead: 1}, got)
	})

	t.Run("ListFiltersEvents", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		dead := b.enqueueDead(t, dest("Paid", "1", "orders.paid"), dest("Paid", "2", ""), dest("Shipped", "1", "orders.shipped"))
		pending := b.enqueue(t, dest("Paid", "3", "orders.paid"))
		list := func(f ferrystore.Filter) []string {
			t.Helper()
			if f.Statuses == nil {
				f.Statuses = []ferrytype.Status{ferrytype.StatusDead}
			}
			if f.Limit == 0 {
				f.Limit = 100
			}
			rows, err := a.List(b.ctx, f)
			require.NoError(t, err)
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = r.ID
			}
			return out
		}
		require.Equal(t, dead, list(ferrystore.Filter{}), "oldest first")
		require.Equal(t, []string{dead[1]}, list(ferrystore.Filter{IDs: []string{dead[1], pending[0], "nope"}}))
		require.Equal(t, []string{dead[0], dead[2]}, list(ferrystore.Filter{AggregateType: "order", AggregateID: "1"}))
		require.Empty(t, list(ferrystore.Filter{AggregateType: "invoice"}))
		require.Equal(t, []string{dead[0], dead[1]}, list(ferrystore.Filter{Type: "Paid"}))
		require.Equal(t, []string{dead[0]}, list(ferrystore.Filter{Destination: "orders.paid"}))
		require.Equal(t, []string{dead[1]}, list(ferrystore.Filter{Destination: "Paid"}), "no destination: the type is the route")
		require.Equal(t, dead[:2], list(ferrystore.Filter{Limit: 2}))
		require.Equal(t, append(append([]string{}, dead...), pending...),
			list(ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusNew}}))
		require.Equal(t, dead, list(ferrystore.Filter{Failed: true,
			Statuses: []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusNew}}), "the pending event never failed")
		require.Empty(t, list(ferrystore.Filter{MinAge: time.Hour}), "created just now")
		require.Equal(t, dead, list(ferrystore.Filter{MaxAge: time.Hour}))
		waitFor(t, 10*time.Second, func() bool { return len(list(ferrystore.Filter{MinAge: time.Millisecond})) == 3 })

		rows, err := a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, IDs: dead[:1], Limit: 1})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, ferrytype.StatusDead, r.Status)
		require.Equal(t, "attempt 1: rejected: no", r.LastError)
		require.Equal(t, 1, r.Attempt)
		require.Equal(t, "orders.paid", r.Destination)
		require.JSONEq(t, `{}`, string(r.Payload))

		// Keys only: the ids and the cursor, in the same order and pages.
		keys, err := a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, KeysOnly: true,
			Limit: ferrystore.MaxStateListLimit})
		require.NoError(t, err)
		require.Equal(t, dead, idsOfRows(keys))
		require.WithinDuration(t, r.CreatedAt, keys[0].CreatedAt, time.Millisecond)
		require.Empty(t, keys[0].Status, "nothing but the keys")
		keys, err = a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, KeysOnly: true,
			Limit: 2, After: ferrystore.ListCursorOf(keys[0])})
		require.NoError(t, err)
		require.Equal(t, dead[1:], idsOfRows(keys))
	})

	t.Run("ListIsBounded", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		for _, f := range []ferrystore.Filter{
			{Limit: 10},
			{Statuses: []ferrytype.Status{ferrytype.StatusDead}},
			{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Limit: ferrystore.MaxListLimit + 1},
			{Statuses: []ferrytype.Status{"GONE"}, Limit: 10},
			{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Limit: 10, MinAge: time.Hour, MaxAge: time.Minute},
		} {
			_, err := a.List(b.ctx, f)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "%+v", f)
		}
		_, err := a.Retry(b.ctx, make([]string, ferrystore.MaxListLimit+1))
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("RetryMakesADeadEventNewWithTheSameID", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		id := b.enqueueDead(t, ev("A", "1", `{}`))[0]
		sent := b.enqueue(t, ev("A", "2", `{}`))[0]
		msgs, token := b.claim(t, 10, false)
		_, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)

		n, err := a.Retry(b.ctx, []string{id, sent, "no-such-event"})
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "only the DEAD event changes")
		require.Equal(t, ferrytype.StatusSent, b.get(t, sent).Status)
		row := b.get(t, id)
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Zero(t, row.Attempt, "attempts start over")
		require.Equal(t, "attempt 1: rejected: no", row.LastError, "the last error stays until the next attempt")
		require.Equal(t, "attempt <n>: rejected: no", row.ErrorClass, "and its class")
		require.False(t, row.RevivedAt.IsZero(), "when it was retried is recorded")
		require.False(t, row.RevivedAt.Before(row.CreatedAt))
		msgs, _ = b.claim(t, 10, false)
		require.Equal(t, []string{id}, ids(msgs), "claimable at once, same id")
		require.Equal(t, 1, msgs[0].Attempt)
		n, err = a.Retry(b.ctx, []string{id})
		require.NoError(t, err)
		require.Zero(t, n, "a SENDING event is not touched")
	})

	t.Run("DiscardKeepsTheRowAndUnblocksItsAggregate", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		first := b.enqueueDead(t, ev("Created", "A", `{}`))[0]
		later := b.enqueue(t, ev("Paid", "A", `{}`), ev("Shipped", "A", `{}`))
		blocked, _ := b.claim(t, 10, true)
		require.Empty(t, blocked, "the DEAD event holds back its aggregate")

		n, err := a.Discard(b.ctx, []string{first, later[0]}, "bad payload; fixed by hand in ticket 7")
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "only DEAD events are discarded")
		row := b.get(t, first)
		require.Equal(t, ferrytype.StatusDiscarded, row.Status)
		require.Equal(t, "bad payload; fixed by hand in ticket 7", row.DiscardReason)
		require.False(t, row.DiscardedAt.IsZero())
		require.WithinDuration(t, row.CreatedAt, row.DiscardedAt, time.Hour)
		require.Equal(t, "attempt 1: rejected: no", row.LastError, "the history stays")

		msgs, _ := b.claim(t, 10, true)
		require.Equal(t, []string{later[0]}, ids(msgs), "the aggregate moves on; the discarded event is never claimed")
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.Dead)
		n, err = a.Retry(b.ctx, []string{first})
		require.NoError(t, err)
		require.Zero(t, n, "a discarded event cannot be retried")
	})

	t.Run("PurgeDiscardedDeletesOnlyOldDiscardedRows", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		gone := b.enqueueDead(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("A", "3", `{}`))
		kept := b.enqueueDead(t, ev("A", "4", `{}`))
		b.enqueue(t, ev("A", "5", `{}`))
		n, err := a.Discard(b.ctx, gone, "test")
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		n, err = a.PurgeDiscarded(b.ctx, time.Hour, 10)
		require.NoError(t, err)
		require.Zero(t, n)
		waitFor(t, 10*time.Second, func() bool {
			n, err = a.PurgeDiscarded(b.ctx, time.Millisecond, 2)
			require.NoError(t, err)
			return n > 0
		})
		require.Equal(t, int64(2), n, "one batch deletes at most its limit")
		n, err = a.PurgeDiscarded(b.ctx, time.Millisecond, 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, ferrytype.StatusDead, b.get(t, kept[0]).Status)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.New)
	})

	t.Run("PendingByDestination", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		b.enqueueDead(t, dest("Paid", "0", "orders.dead"))
		b.enqueue(t, dest("Paid", "1", "orders.paid"))
		// Let the database clock move past the first event's created_at
		// (SQLite keeps milliseconds), so that "oldest" is not a tie.
		waitFor(t, 10*time.Second, func() bool {
			st, err := b.store.Stats(b.ctx)
			require.NoError(t, err)
			return st.OldestPending > 5*time.Millisecond
		})
		b.enqueue(t, dest("Paid", "2", "orders.paid"), dest("Shipped", "3", ""))
		_, _ = b.claim(t, 1, false) // the oldest orders.paid event is SENDING
		var got []ferrystore.DestinationStats
		waitFor(t, 10*time.Second, func() bool {
			var err error
			got, err = a.PendingByDestination(b.ctx, 10)
			require.NoError(t, err)
			return len(got) == 2 && got[0].OldestPending > 0
		})
		require.Equal(t, "orders.paid", got[0].Destination, "oldest first")
		require.Equal(t, [2]int64{1, 1}, [2]int64{got[0].New, got[0].Sending})
		require.Equal(t, "Shipped", got[1].Destination, "no destination: the type")
		require.Equal(t, [2]int64{1, 0}, [2]int64{got[1].New, got[1].Sending})
		require.GreaterOrEqual(t, got[0].OldestPending, got[1].OldestPending)
		require.Less(t, got[0].OldestPending, time.Hour)
		got, err := a.PendingByDestination(b.ctx, 1)
		require.NoError(t, err)
		require.Len(t, got, 1, "bounded")
	})

	t.Run("DeadByDestination", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		got, err := a.DeadByDestination(b.ctx, 10)
		require.NoError(t, err)
		require.Empty(t, got)
		b.enqueueDead(t, dest("Paid", "0", "orders.paid"), dest("Paid", "1", "orders.paid"), dest("Paid", "2", "orders.paid"),
			dest("Shipped", "3", ""), dest("Paid", "4", "orders.other"))
		b.enqueue(t, dest("Paid", "5", "orders.other")) // pending: not counted
		got, err = a.DeadByDestination(b.ctx, 10)
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, ferrystore.DestinationCount{Destination: "orders.paid", Count: 3}, got[0], "largest first")
		// The ties' order is the database's collation's.
		require.ElementsMatch(t, []ferrystore.DestinationCount{{Destination: "Shipped", Count: 1},
			{Destination: "orders.other", Count: 1}}, got[1:], "no destination: the type")
		got, err = a.DeadByDestination(b.ctx, 1)
		require.NoError(t, err)
		require.Len(t, got, 1, "bounded")
		_, err = a.DeadByDestination(b.ctx, 0)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("ErrorClassesGroupAndSelectDeadEvents", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		dead := b.enqueueDead(t, dest("Paid", "1", "orders.paid"), dest("Paid", "2", "orders.paid"),
			dest("Shipped", "3", "orders.paid"), dest("Paid", "4", ""))
		const class = "attempt <n>: rejected: no" // of "attempt 1: rejected: no"
		require.Equal(t, class, b.get(t, dead[0]).ErrorClass, "recorded with the error")
		deadOnly := []ferrytype.Status{ferrytype.StatusDead}
		groups, err := a.GroupErrors(b.ctx, ferrystore.Filter{Statuses: deadOnly})
		require.NoError(t, err)
		first, second := b.get(t, dead[0]), b.get(t, dead[1])
		require.Len(t, groups, 3)
		require.Equal(t, ferrystore.ErrorGroup{Destination: "orders.paid", Type: "Paid", ErrorClass: class, Count: 2},
			ferrystore.ErrorGroup{Destination: groups[0].Destination, Type: groups[0].Type, ErrorClass: groups[0].ErrorClass,
				Count: groups[0].Count}, "the largest group first")
		require.WithinDuration(t, first.CreatedAt, groups[0].Oldest, time.Millisecond)
		require.WithinDuration(t, second.CreatedAt, groups[0].Newest, time.Millisecond)
		rest := map[string]int64{}
		for _, g := range groups[1:] {
			require.Equal(t, class, g.ErrorClass)
			rest[g.Destination+" "+g.Type] = g.Count
		}
		require.Equal(t, map[string]int64{"orders.paid Shipped": 1, "Paid Paid": 1}, rest, "no destination: the type is the route")

		list := func(f ferrystore.Filter) []string {
			t.Helper()
			f.Statuses, f.Limit = deadOnly, 100
			rows, err := a.List(b.ctx, f)
			require.NoError(t, err)
			return idsOfRows(rows)
		}
		require.Equal(t, dead[:2], list(ferrystore.Filter{Destination: "orders.paid", Type: "Paid", ErrorClass: class}))
		require.Equal(t, dead, list(ferrystore.Filter{ErrorClass: class}))
		require.Empty(t, list(ferrystore.Filter{ErrorClass: "attempt <n>: rejected: other"}))
		require.Empty(t, list(ferrystore.Filter{Unclassified: true}), "every error has its class")
		n, err := a.Count(b.ctx, ferrystore.Filter{Statuses: deadOnly, ErrorClass: class, Destination: "orders.paid"})
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		_, err = a.List(b.ctx, ferrystore.Filter{Statuses: deadOnly, ErrorClass: class, Unclassified: true, Limit: 1})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)

		if h.Exec == nil {
			without(t, "Exec", "rows that failed before the table recorded classes")
			return
		}
		// A row that failed before the table recorded classes.
		h.Exec(b.ctx, t, b.store, "UPDATE "+b.store.Table()+" SET error_class = NULL WHERE event_id = '"+dead[3]+"'")
		require.Equal(t, []string{dead[3]}, list(ferrystore.Filter{Unclassified: true}))
		// By destination and type: a range of the DEAD index.
		require.Equal(t, []string{dead[3]}, list(ferrystore.Filter{Unclassified: true, Destination: "Paid", Type: "Paid"}))
		require.Empty(t, list(ferrystore.Filter{Unclassified: true, Destination: "orders.paid", Type: "Paid"}))
		n, err = a.Count(b.ctx, ferrystore.Filter{Statuses: deadOnly, Unclassified: true, Destination: "Paid", Type: "Paid"})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, dead[:3], list(ferrystore.Filter{ErrorClass: class}))
		groups, err = a.GroupErrors(b.ctx, ferrystore.Filter{Statuses: deadOnly, Destination: "Paid"})
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.Equal(t, "", groups[0].ErrorClass, "counted without a class")
		require.Equal(t, int64(1), groups[0].Count)
		// Recording it touches only the rows that have none.
		n, err = a.SetErrorClass(b.ctx, "a class", dead[2:])
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, "a class", b.get(t, dead[3]).ErrorClass)
		require.Equal(t, class, b.get(t, dead[2]).ErrorClass, "a recorded class stays")
		_, err = a.SetErrorClass(b.ctx, "", dead)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("DiedByBoundsDeadEventsByWhenTheyDied", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		deadOnly := []ferrytype.Status{ferrytype.StatusDead}
		// after reads the database clock until it has passed at: the
		// next death is later than at whatever the clock's resolution.
		after := func(at time.Time) time.Time {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); ; {
				now, err := a.Now(b.ctx)
				require.NoError(t, err)
				if now.After(at) {
					return now
				}
				require.True(t, time.Now().Before(deadline), "the database clock stays at %s", at)
				time.Sleep(time.Millisecond)
			}
		}
		// die takes the one ready event to DEAD with a retry delay, which
		// a death ignores: its available_at is when it died.
		die := func() string {
			t.Helper()
			msgs, token := b.claim(t, 10, false)
			require.Len(t, msgs, 1)
			res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: msgs[0].ID, Token: token, Dead: true,
				Delay: time.Hour, Error: "attempt 1: rejected: no"}})
			require.NoError(t, err)
			require.Equal(t, []string{msgs[0].ID}, res.Dead)
			return msgs[0].ID
		}
		list := func(by time.Time) []string {
			t.Helper()
			rows, err := a.List(b.ctx, ferrystore.Filter{Statuses: deadOnly, DiedBy: by, Limit: 10})
			require.NoError(t, err)
			n, err := a.Count(b.ctx, ferrystore.Filter{Statuses: deadOnly, DiedBy: by})
			require.NoError(t, err)
			require.Equal(t, int64(len(rows)), n, "Count agrees with List")
			return idsOfRows(rows)
		}
		b.enqueue(t, ev("A", "1", `{}`))
		first := die()
		at, err := a.Now(b.ctx)
		require.NoError(t, err)
		b.enqueue(t, ev("A", "2", `{}`))
		after(at)
		second := die()
		now := after(at)
		require.Equal(t, []string{first}, list(at), "the event that died after at is left out")
		require.Equal(t, []string{first, second}, list(now))
		row, err := b.store.Get(b.ctx, second)
		require.NoError(t, err)
		require.False(t, row.AvailableAt.After(now), "a death records when it happened, not the retry delay")

		// A restored event is DEAD from its restore on.
		n, err := a.Discard(b.ctx, []string{first}, "gone")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		n, err = a.Restore(b.ctx, []string{first}, "back")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Empty(t, list(at), "restored after at")
		require.Equal(t, []string{second}, list(now))
		require.ElementsMatch(t, []string{first, second}, list(after(now)))

		_, err = a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDiscarded}, DiedBy: at, Limit: 1})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "DiedBy is for DEAD events")
	})

	t.Run("DeadMigrationRevertsAndUpgradesATableWithEvents", func(t *testing.T) {
		needs(t, h.Exec != nil, "Exec", "the migration's statements are run by hand")
		b := setup(t, h)
		a := b.admin(t)
		dead := b.enqueueDead(t, dest("Paid", "1", "orders.paid"))
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		for _, file := range []string{"0004_dead.down.sql", "0004_dead.up.sql"} {
			text, err := fs.ReadFile(fsys, file)
			require.NoError(t, err)
			for _, q := range migrate.Statements(string(text)) {
				h.Exec(b.ctx, t, b.store, q)
			}
		}
		// The event died before the table recorded classes: it has none, and
		// is found as such.
		rows, err := a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Unclassified: true, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, dead, idsOfRows(rows))
		require.Empty(t, rows[0].ErrorClass)
		require.Equal(t, "attempt 1: rejected: no", rows[0].LastError)
	})

	t.Run("AttemptsDistribution", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		b.enqueueDead(t, ev("A", "1", `{}`))
		id := b.enqueue(t, ev("A", "2", `{}`))[0]
		for i := 0; i < 2; i++ { // event 2 fails twice and waits
			msgs, token := b.claim(t, 1, false)
			require.Equal(t, []string{id}, ids(msgs))
			_, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Error: "x"}})
			require.NoError(t, err)
		}
		b.enqueue(t, ev("A", "3", `{}`))
		got, err := a.Attempts(b.ctx)
		require.NoError(t, err)
		sort.Slice(got, func(i, j int) bool {
			if got[i].Status != got[j].Status {
				return got[i].Status < got[j].Status
			}
			return got[i].Attempts < got[j].Attempts
		})
		require.Equal(t, []ferrystore.AttemptCount{ // the DEAD event is not pending
			{Status: ferrytype.StatusNew, Attempts: 0, Events: 1},
			{Status: ferrytype.StatusNew, Attempts: 2, Events: 1},
		}, got)
	})

	t.Run("SentEventsPagesThroughOneTypeOfSentEvents", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		// Two transactions: events of one share available_at, so pages
		// must break ties by event id.
		paid := b.enqueue(t, ev("OrderPaid", "1", `{}`), ev("OrderPaid", "2", `{}`), ev("OrderPaid", "3", `{}`),
			ev("OrderCreated", "4", `{}`))
		paid = append(paid[:3], b.enqueue(t, ev("OrderPaid", "5", `{}`), ev("OrderPaid", "6", `{}`),
			ferry.Event{AggregateType: "invoice", AggregateID: "7", Type: "OrderPaid", Payload: json.RawMessage(`{}`)})...)
		msgs, token := b.claim(t, 100, false)
		require.Len(t, msgs, 7)
		n, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		require.Equal(t, int64(7), n)
		dead := b.enqueueDead(t, ev("OrderPaid", "9", `{}`))
		pending := b.enqueue(t, ev("OrderPaid", "8", `{}`))

		all := func(q ferrystore.SentEventsQuery) []ferrystore.Row {
			var out []ferrystore.Row
			for page := 0; ; page++ {
				require.Less(t, page, 20, "pages must end")
				rows, err := a.SentEvents(b.ctx, q)
				require.NoError(t, err)
				require.LessOrEqual(t, len(rows), q.Limit, "bounded")
				out = append(out, rows...)
				if len(rows) < q.Limit {
					return out
				}
				q.After = ferrystore.SentCursorOf(rows[len(rows)-1])
			}
		}
		q := ferrystore.SentEventsQuery{EventType: "OrderPaid", Window: time.Hour, Limit: 2}
		var got []ferrystore.Row
		waitFor(t, 10*time.Second, func() bool { // sent_at falls behind the database clock
			got = all(q)
			return len(got) == 6
		})
		gotIDs := make([]string, len(got))
		for i, r := range got {
			gotIDs[i] = r.ID
			require.Equal(t, ferrytype.StatusSent, r.Status)
			if i > 0 {
				prev := got[i-1]
				require.True(t, prev.AvailableAt.Before(r.AvailableAt) || (prev.AvailableAt.Equal(r.AvailableAt) && prev.ID < r.ID),
					"ordered by (available_at, event_id)")
			}
		}
		require.ElementsMatch(t, paid, gotIDs, "each SENT OrderPaid event once; not OrderCreated, NEW %v or DEAD %v", pending, dead)

		q.AggregateType = "order"
		require.Len(t, all(q), 5, "the invoice's event is of another aggregate type")
		q.AggregateType, q.Limit = "", 1000
		require.Len(t, all(q), 6, "one page")
		q.OlderThan, q.Window = time.Hour, 2*time.Hour
		require.Empty(t, all(q), "none was sent an hour ago")

		for _, bad := range []ferrystore.SentEventsQuery{
			{Window: time.Hour, Limit: 1},
			{EventType: "E", Limit: 1},
			{EventType: "E", Window: time.Hour, OlderThan: time.Hour, Limit: 1},
			{EventType: "E", Window: time.Hour, Limit: ferrystore.MaxListLimit + 1},
		} {
			_, err := a.SentEvents(b.ctx, bad)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			require.Contains(t, err.Error(), "SentEventsQuery.")
		}
	})

	t.Run("MissingEventsFindsBusinessRowsWithoutTheirEvent", func(t *testing.T) {
		needs(t, h.Exec != nil, "Exec", "the business table is created and written with SQL")
		b := setup(t, h)
		a := b.admin(t)
		table := b.store.Table() + "_biz"
		var ddl, recent, old string
		switch d := b.store.Dialect(); d {
		case "mysql":
			ddl, recent, old = "DATETIME(6)", "NOW(6) - INTERVAL 1 MINUTE", "NOW(6) - INTERVAL 2 DAY"
		case "postgres":
			ddl, recent, old = "timestamptz", "now() - interval '1 minute'", "now() - interval '2 days'"
		case "sqlite":
			ddl, recent, old = "TEXT", "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 minutes')", "strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 days')"
		default:
			t.Fatalf("no business table DDL for dialect %q", d)
		}
		h.Exec(b.ctx, t, b.store, "CREATE TABLE "+table+" (id BIGINT NOT NULL PRIMARY KEY, placed_at "+ddl+" NOT NULL)")
		t.Cleanup(func() { h.Exec(context.Background(), t, b.store, "DROP TABLE "+table) })
		// 1 has its event; 2 has none; 3 has an event of another type;
		// 4 has none but is older than the window; 5 is an event of
		// another aggregate type.
		for _, row := range []string{"1, " + recent, "2, " + recent, "3, " + recent, "4, " + old, "5, " + recent} {
			h.Exec(b.ctx, t, b.store, "INSERT INTO "+table+" (id, placed_at) VALUES ("+row+")")
		}
		b.enqueue(t, ev("OrderPlaced", "1", `{}`), ev("OrderPaid", "3", `{}`),
			ferry.Event{AggregateType: "invoice", AggregateID: "5", Type: "OrderPlaced", Payload: json.RawMessage(`{}`)})
		q := ferrystore.MissingEventsQuery{Table: table, KeyColumn: "id", TimeColumn: "placed_at",
			AggregateType: "order", EventType: "OrderPlaced", Window: time.Hour, Grace: time.Second, Limit: 10}
		got, err := a.MissingEvents(b.ctx, q)
		require.NoError(t, err)
		keys := make([]string, len(got))
		for i, m := range got {
			keys[i] = m.Key
			require.WithinDuration(t, time.Now(), m.Time, 30*time.Minute, "the row's time, as stored")
		}
		require.ElementsMatch(t, []string{"2", "3", "5"}, keys)

		q.Limit = 1
		got, err = a.MissingEvents(b.ctx, q)
		require.NoError(t, err)
		require.Len(t, got, 1, "bounded")
		q.Limit, q.Window = 10, 72*time.Hour
		got, err = a.MissingEvents(b.ctx, q)
		require.NoError(t, err)
		require.Len(t, got, 4, "a wider window reaches row 4")
		q.Grace = 2 * time.Minute
		got, err = a.MissingEvents(b.ctx, q)
		require.NoError(t, err)
		require.Len(t, got, 1, "rows younger than the grace are skipped")

		for _, bad := range []ferrystore.MissingEventsQuery{
			{Table: table + "; DROP TABLE x", KeyColumn: "id", TimeColumn: "placed_at", EventType: "E", Window: time.Hour, Limit: 1},
			{Table: table, KeyColumn: `id"`, TimeColumn: "placed_at", EventType: "E", Window: time.Hour, Limit: 1},
			{Table: table, KeyColumn: "id", TimeColumn: "placed at", EventType: "E", Window: time.Hour, Limit: 1},
		} {
			_, err := a.MissingEvents(b.ctx, bad)
			require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
			require.True(t, strings.Contains(err.Error(), "MissingEventsQuery."), "the error names the field: %v", err)
		}
		_, err = a.MissingEvents(b.ctx, ferrystore.MissingEventsQuery{Table: table, KeyColumn: "id", TimeColumn: "placed_at",
			Window: time.Hour, Limit: 1})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "no event type")
	})
}
