package ferrystoretest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// deadWith writes one event per error in one transaction and takes each
// to DEAD with that error as its last, as a relay does. No other event
// may be ready.
func (b *bundle[TTx]) deadWith(t *testing.T, errs ...string) []string {
	t.Helper()
	events := make([]ferry.Event, len(errs))
	for i := range errs {
		events[i] = ev("A", fmt.Sprint(i), `{"n":1}`)
	}
	got := b.enqueue(t, events...)
	msgs, token := b.claim(t, len(got)+10, false)
	require.ElementsMatch(t, got, idsOf(msgs), "deadWith: another event was ready")
	fails := make([]ferrystore.Failure, len(got))
	for i, id := range got {
		fails[i] = ferrystore.Failure{ID: id, Token: token, Dead: true, Error: errs[i]}
	}
	res, err := b.store.MarkFailed(b.ctx, fails)
	require.NoError(t, err)
	require.Len(t, res.Dead, len(got))
	return got
}

// walk lists every row of f a page of limit at a time, following the
// cursor, and fails if the pages do not end.
func (b *bundle[TTx]) walk(t *testing.T, f ferrystore.Filter, each func([]ferrystore.Row)) []string {
	t.Helper()
	var out []string
	a := b.admin(t)
	for page := 0; ; page++ {
		require.Less(t, page, 1000, "pages must end")
		rows, err := a.List(b.ctx, f)
		require.NoError(t, err)
		require.LessOrEqual(t, len(rows), f.Limit, "bounded")
		for _, r := range rows {
			out = append(out, r.ID)
		}
		if each != nil {
			each(rows)
		}
		if len(rows) < f.Limit {
			return out
		}
		f.After = ferrystore.ListCursorOf(rows[len(rows)-1])
	}
}

// exercisePages checks the admin operations that walk a selection of any
// size: List's cursor, Count, the error text filter, and Restore.
func exercisePages[TTx any](t *testing.T, h Harness[TTx]) {
	dead := []ferrytype.Status{ferrytype.StatusDead}

	t.Run("ListPagesThroughTiesOnceEach", func(t *testing.T) {
		needs(t, rawWriter(h) != nil, "InsertRaw (nor Exec)", "the rows with chosen creation times are written by hand")
		b := setup(t, h)
		// Rows written by hand with chosen creation times: three share
		// one, so that pages must break ties by event id.
		times := map[string]string{"k0": "2023-12-31 23:59:59", "k3": "2024-01-01 10:00:00", "k1": "2024-01-01 10:00:00",
			"k2": "2024-01-01 10:00:00", "k4": "2024-01-01 10:00:01.5"}
		want := []string{"k0", "k1", "k2", "k3", "k4"}
		if b.store.Dialect() == "sqlite" {
			// Text in another layout sorts by the time it holds.
			times["k5"] = "2024-01-01T10:00:02Z"
			want = append(want, "k5")
		}
		for id, at := range times {
			b.insertRaw(t, rawRow{cols: []string{"aggregate_id", "event_type", "payload", "status", "last_error", "created_at"},
				vals: []string{id, "T", "{}", "DEAD", "boom", at}}, id)
		}
		pending := b.enqueue(t, ev("A", "new", `{}`))
		for _, limit := range []int{1, 2, 3, 100} {
			require.Equal(t, want, b.walk(t, ferrystore.Filter{Statuses: dead, Limit: limit}, nil), "pages of %d", limit)
		}
		all := b.walk(t, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusNew}, Limit: 2}, nil)
		require.Equal(t, append(want, pending...), all, "the NEW event is the newest")
	})

	t.Run("ListCursorSkipsRowsThatChangeBehindIt", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		ids := b.deadWith(t, "e", "e", "e", "e", "e", "e")
		// Walk with pages of 2, retrying each page and taking it back to
		// DEAD at once, as a failing relay might: every row stays DEAD,
		// and still each is listed once.
		var seen []string
		b.walk(t, ferrystore.Filter{Statuses: dead, Limit: 2}, func(rows []ferrystore.Row) {
			page := make([]string, len(rows))
			for i, r := range rows {
				page[i] = r.ID
			}
			seen = append(seen, page...)
			n, err := a.Retry(b.ctx, page)
			require.NoError(t, err)
			require.Equal(t, int64(len(page)), n)
			msgs, token := b.claim(t, 10, false)
			require.ElementsMatch(t, page, idsOf(msgs))
			fails := make([]ferrystore.Failure, len(msgs))
			for i, m := range msgs {
				fails[i] = ferrystore.Failure{ID: m.ID, Token: token, Dead: true, Error: "again"}
			}
			_, err = b.store.MarkFailed(b.ctx, fails)
			require.NoError(t, err)
		})
		require.ElementsMatch(t, ids, seen)
		require.Len(t, seen, len(ids), "no row twice")
	})

	t.Run("CountMatchesTheListing", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		b.enqueueDead(t, dest("Paid", "1", "orders.paid"), dest("Paid", "2", ""), dest("Shipped", "1", "orders.shipped"))
		b.enqueue(t, dest("Paid", "3", "orders.paid"))
		for _, f := range []ferrystore.Filter{
			{Statuses: dead},
			{Statuses: []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusNew}},
			{Statuses: dead, Type: "Paid"},
			{Statuses: dead, Destination: "Paid"},
			{Statuses: dead, AggregateType: "order", AggregateID: "1"},
			{Statuses: dead, ErrorContains: []string{"REJECTED"}},
			{Statuses: dead, ErrorContains: []string{"nothing like it"}},
			{Statuses: dead, MinAge: time.Hour},
			{Statuses: []ferrytype.Status{ferrytype.StatusDiscarded}},
		} {
			n, err := a.Count(b.ctx, f)
			require.NoError(t, err)
			f.Limit = 100
			rows, err := a.List(b.ctx, f)
			require.NoError(t, err)
			require.Equal(t, int64(len(rows)), n, "%+v", f)
		}
		n, err := a.Count(b.ctx, ferrystore.Filter{Statuses: dead})
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		first, err := a.List(b.ctx, ferrystore.Filter{Statuses: dead, Limit: 1})
		require.NoError(t, err)
		n, err = a.Count(b.ctx, ferrystore.Filter{Statuses: dead, After: ferrystore.ListCursorOf(first[0])})
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "after the cursor")
		_, err = a.Count(b.ctx, ferrystore.Filter{})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "no status")
	})

	t.Run("ErrorContainsIsLiteralAndIgnoresCase", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		errs := []string{
			"attempt 3: 100% of quota used",  // 0
			"attempt 3: 100 of quota used",   // 1
			"attempt 3: queue_full",          // 2
			"attempt 3: queue-full",          // 3
			"attempt 3: Timeout after 5s",    // 4
			"attempt 3: TIMEOUT",             // 5
			`attempt 3: a!b and a\b and [x]`, // 6
			"attempt 3: 'quoted' \"double\"", // 7
		}
		got := b.deadWith(t, errs...)
		match := func(s ...string) []string {
			t.Helper()
			rows, err := a.List(b.ctx, ferrystore.Filter{Statuses: dead, ErrorContains: s, Limit: 100})
			require.NoError(t, err)
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = r.ID
			}
			n, err := a.Count(b.ctx, ferrystore.Filter{Statuses: dead, ErrorContains: s})
			require.NoError(t, err)
			require.Equal(t, int64(len(out)), n, "Count agrees with List for %q", s)
			return out
		}
		require.ElementsMatch(t, []string{got[0]}, match("100%"), "% is a percent sign")
		require.ElementsMatch(t, []string{got[2]}, match("queue_full"), "_ is an underscore")
		require.ElementsMatch(t, []string{got[4], got[5]}, match("timeout"), "case is ignored")
		require.ElementsMatch(t, []string{got[4]}, match("TIMEOUT", "after"), "every string must occur")
		require.ElementsMatch(t, []string{got[6]}, match("a!b"), "the escape character itself")
		require.ElementsMatch(t, []string{got[6]}, match(`a\b`), "a backslash")
		require.ElementsMatch(t, []string{got[6]}, match("[x]"))
		require.ElementsMatch(t, []string{got[7]}, match(`'quoted' "double"`), "quotes")
		require.Len(t, match("attempt 3", ""), len(errs), "an empty string is ignored")
		require.Empty(t, match("%%"))

		_, err := a.List(b.ctx, ferrystore.Filter{Statuses: dead, Limit: 1,
			ErrorContains: []string{strings.Repeat("x", ferrystore.MaxErrorContains+1)}})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		_, err = a.Count(b.ctx, ferrystore.Filter{Statuses: dead, ErrorContains: []string{"bad \xff"}})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("NoPayloadLeavesTheContentOut", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		e := ev("A", "1", `{"big":"payload"}`)
		e.Headers = map[string]string{"k": "v"}
		id := b.enqueue(t, e)[0]
		rows, err := a.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew}, NoPayload: true, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, id, r.ID)
		require.JSONEq(t, `{}`, string(r.Payload))
		require.Nil(t, r.Headers)
		require.Empty(t, r.Malformed)
		require.Equal(t, "A", r.Type)
		require.Equal(t, ferrytype.StatusNew, r.Status)
		require.False(t, r.CreatedAt.IsZero())
	})

	t.Run("RestoreTakesDiscardedBackToDeadKeepingTheRecord", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		ids := b.deadWith(t, "boom", "boom")
		n, err := a.Discard(b.ctx, ids, "bad data (by alice)")
		require.NoError(t, err)
		require.Equal(t, int64(2), n)

		n, err = a.Restore(b.ctx, []string{ids[0], "no-such-event"}, "restored by bob")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row := b.get(t, ids[0])
		require.Equal(t, ferrytype.StatusDead, row.Status)
		require.True(t, row.DiscardedAt.IsZero(), "no longer discarded")
		require.Equal(t, "bad data (by alice); restored by bob", row.DiscardReason, "the record stays")
		require.Equal(t, "boom", row.LastError)
		require.Equal(t, ferrytype.StatusDiscarded, b.get(t, ids[1]).Status, "only the named ids")

		n, err = a.Restore(b.ctx, ids[:1], "again")
		require.NoError(t, err)
		require.Zero(t, n, "a DEAD row is not restored")
		n, err = a.Discard(b.ctx, ids[:1], "still bad (by carol)")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		row = b.get(t, ids[0])
		require.Equal(t, ferrytype.StatusDiscarded, row.Status)
		require.False(t, row.DiscardedAt.IsZero())
		require.Equal(t, "bad data (by alice); restored by bob; still bad (by carol)", row.DiscardReason, "appended")
		_, err = a.Restore(b.ctx, make([]string, ferrystore.MaxListLimit+1), "x")
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("PurgeableCountsWithoutDeleting", func(t *testing.T) {
		b := setup(t, h)
		a := b.admin(t)
		gone := b.deadWith(t, "x", "x")
		n, err := a.Discard(b.ctx, gone[:1], "test")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		b.enqueue(t, ev("A", "s1", `{}`), ev("A", "s2", `{}`), ev("A", "s3", `{}`))
		msgs, token := b.claim(t, 10, false)
		_, err = b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		sent, discarded, err := a.Purgeable(b.ctx, time.Hour)
		require.NoError(t, err)
		require.Equal(t, [2]int64{0, 0}, [2]int64{sent, discarded}, "nothing is an hour old")
		waitFor(t, 10*time.Second, func() bool {
			sent, discarded, err = a.Purgeable(b.ctx, time.Millisecond)
			require.NoError(t, err)
			return sent == 3 && discarded == 1
		})
		st, err := a.CountByStatus(b.ctx, ferrytype.StatusSent, ferrytype.StatusDiscarded)
		require.NoError(t, err)
		require.Equal(t, int64(3), st[ferrytype.StatusSent], "nothing deleted")
		require.Equal(t, int64(1), st[ferrytype.StatusDiscarded])
	})
}
