package ferryadmin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

type award struct {
	UserID int64 `json:"user_id"`
	Amount int64 `json:"amount"`
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupInbox(t, kind)
			ctx := testsvc.Context(t, time.Minute)
			_, err := b.apply(t, "points-award", "order:42:paid", "event-001", award{7, 10})
			require.NoError(t, err)
			var res ferry.InboxResult
			for range 2 { // delivered twice with another amount: one conflict, seen twice
				res, err = b.apply(t, "points-award", "order:42:paid", "event-002", award{7, 99})
				require.ErrorIs(t, err, ferry.ErrConflict)
			}
			id := res.ConflictID

			l, err := ferryadmin.ListConflicts(ctx, b.store, ferryadmin.ConflictListOptions{})
			require.NoError(t, err)
			require.False(t, l.More)
			require.Equal(t, 1, l.Open())
			require.Len(t, l.Conflicts, 1)
			c := l.Conflicts[0]
			require.Equal(t, id, c.ID)
			require.Equal(t, "OPEN", c.Status)
			require.Equal(t, int64(2), c.Occurrences)
			require.Equal(t, []string{"amount"}, c.Differing)
			require.Nil(t, c.Marker, "listings carry no marker")
			fields, ok := c.CompareFields()
			require.True(t, ok)
			require.Equal(t, []ferryadmin.FieldComparison{
				{Name: "amount", Stored: "10", Incoming: "99", InStored: true, InIncoming: true, Differs: true},
				{Name: "user_id", Stored: "7", Incoming: "7", InStored: true, InIncoming: true},
			}, fields)

			found, err := ferryadmin.GetConflicts(ctx, b.store, []int64{id, 999999})
			require.NoError(t, err)
			require.Equal(t, []int64{999999}, found.Missing)
			require.Len(t, found.Conflicts, 1)
			m := found.Conflicts[0].Marker
			require.NotNil(t, m)
			require.True(t, m.Found)
			require.Equal(t, "event-001", m.EventID)

			_, err = ferryadmin.ResolveConflicts(ctx, b.store, []int64{id}, "apply-incoming", "x", "ops@host")
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "not a decision")
			_, err = ferryadmin.ResolveConflicts(ctx, b.store, []int64{id}, ferryadmin.DecisionKeepStored, " ", "ops@host")
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "a note is required")

			r, err := ferryadmin.ResolveConflicts(ctx, b.store, []int64{id, 999999}, ferryadmin.DecisionKeepStored, "typo upstream", "ops@host")
			require.NoError(t, err)
			require.Equal(t, []int64{id}, r.Resolved)
			require.Equal(t, []string{"conflict 999999 does not exist"}, r.Problems)
			got, err := b.store.GetConflict(ctx, id)
			require.NoError(t, err)
			require.Equal(t, "RESOLVED", got.Status)
			require.Equal(t, "ops@host", got.Resolution.By)
			marker, err := b.store.GetMarker(ctx, "points-award", "order:42:paid")
			require.NoError(t, err)
			require.Equal(t, "event-001", marker.EventID, "resolving changes no marker")

			r, err = ferryadmin.ResolveConflicts(ctx, b.store, []int64{id}, ferryadmin.DecisionIgnored, "again", "other@host")
			require.NoError(t, err)
			require.Empty(t, r.Resolved, "the first decision stands")
			require.Len(t, r.Problems, 1)
			require.Contains(t, r.Problems[0], "already resolved: keep-stored by ops@host")

			l, err = ferryadmin.ListConflicts(ctx, b.store, ferryadmin.ConflictListOptions{})
			require.NoError(t, err)
			require.Empty(t, l.Conflicts, "no open conflict")
			l, err = ferryadmin.ListConflicts(ctx, b.store, ferryadmin.ConflictListOptions{All: true, Consumer: "points-award"})
			require.NoError(t, err)
			require.Len(t, l.Conflicts, 1)
			require.Equal(t, ferryadmin.DecisionKeepStored, l.Conflicts[0].Resolution.Decision)
			require.Zero(t, l.Open())
		})
	}
}

func TestPurgeMarkers(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupInbox(t, kind)
			ctx := testsvc.Context(t, time.Minute)
			for i := range 5 {
				_, err := b.apply(t, "points-award", fmt.Sprintf("order:%d:paid", i), fmt.Sprint(i), award{7, 1})
				require.NoError(t, err)
			}
			count := func() int64 {
				n, err := b.store.MarkerCount(ctx, "")
				require.NoError(t, err)
				return n
			}
			_, err := ferryadmin.PurgeMarkers(ctx, b.store, ferryadmin.PurgeOptions{OlderThan: 72 * time.Hour})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			require.ErrorContains(t, err, "shorter than the replay window 168h0m0s")
			_, err = ferryadmin.PurgeMarkers(ctx, b.store, ferryadmin.PurgeOptions{OlderThan: 169 * time.Hour, ReplayWindow: 720 * time.Hour})
			require.ErrorContains(t, err, "shorter than the replay window 720h0m0s")
			require.Equal(t, int64(5), count(), "a refusal deletes nothing")

			rep, err := ferryadmin.PurgeMarkers(ctx, b.store, ferryadmin.PurgeOptions{OlderThan: 168 * time.Hour})
			require.NoError(t, err)
			require.Equal(t, []ferryadmin.PurgeResult{{Kind: "markers", Statements: 1, Complete: true}}, rep.Results)
			require.Equal(t, int64(5), count(), "young markers stay")

			eventually(t, 10*time.Second, func() bool {
				rep, err := ferryadmin.PurgeMarkers(ctx, b.store,
					ferryadmin.PurgeOptions{OlderThan: 10 * time.Millisecond, ReplayWindow: 10 * time.Millisecond, DryRun: true})
				require.NoError(t, err)
				return rep.Results[0].Eligible == 5
			}, "markers fall behind the database clock")
			require.Equal(t, int64(5), count(), "a dry run deletes nothing")

			var deleted int64
			eventually(t, 10*time.Second, func() bool {
				rep, err := ferryadmin.PurgeMarkers(ctx, b.store,
					ferryadmin.PurgeOptions{OlderThan: 10 * time.Millisecond, ReplayWindow: 10 * time.Millisecond, Batch: 2})
				require.NoError(t, err)
				r := rep.Results[0]
				require.LessOrEqual(t, r.Deleted, int64(2*r.Statements), "batches of 2")
				deleted += r.Deleted
				return deleted == 5
			}, "markers fall behind the database clock")
			require.Zero(t, count())
		})
	}
}

// Reconcile finds a SENT event whose consumer never recorded the operation,
// not one whose marker exists; the outbox and the inbox are in different
// databases, of different dialects.
func TestReconcileEffects(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{{"mysql", "postgres"}, {"postgres", "sqlite"}, {"sqlite", "mysql"}} {
		t.Run(pair[0]+"_outbox_"+pair[1]+"_inbox", func(t *testing.T) {
			ob, ib := setup(t, pair[0]), setupInbox(t, pair[1])
			ids := ob.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"), event("OrderPaid", "3"),
				event("OrderCreated", "4"))
			ob.sent(t, 4)
			ob.enqueue(t, event("OrderPaid", "5")) // not SENT
			for _, i := range []int{0, 2} {
				_, err := ib.apply(t, "points-award", fmt.Sprintf("order:%d:paid", i+1), ids[i], award{7, 1})
				require.NoError(t, err)
			}
			opened := 0
			opts := ferryadmin.ReconcileOptions{Window: time.Hour, Batch: 1,
				Effects: []ferryadmin.Effect{{Consumer: "points-award", InboxDatabaseURL: ib.url, MarkerTable: ib.markers,
					EventType: "OrderPaid", AggregateType: "order", Key: "order:{payload.order_id}:paid", OlderThan: time.Millisecond}},
				OpenInbox: func(_ context.Context, url, markers string) (ferrystore.InboxStore, error) {
					require.Equal(t, ib.url, url)
					require.Equal(t, ib.markers, markers)
					opened++
					return nopClose{ib.store}, nil
				}}
			var rep ferryadmin.ReconcileReport
			eventually(t, 10*time.Second, func() bool {
				var err error
				rep, err = ferryadmin.Reconcile(ob.ctx, ob.admin, opts)
				require.NoError(t, err)
				return rep.Effects[0].Scanned == 3
			}, "sent_at falls behind the database clock")
			e := rep.Effects[0]
			require.Equal(t, "points-award.OrderPaid", e.Name)
			require.True(t, e.Complete)
			require.Len(t, e.Missing, 1)
			require.Equal(t, ferryadmin.EffectFinding{EventID: ids[1], Key: "order:2:paid", AggregateID: "2",
				CreatedAt: e.Missing[0].CreatedAt, SentAt: e.Missing[0].SentAt, Problem: "no marker"}, e.Missing[0])
			require.False(t, e.Missing[0].SentAt.IsZero())
			require.Equal(t, 1, rep.Findings)
			require.Nil(t, rep.Stuck, "not asked")
			require.Contains(t, e.InboxDatabase, "("+pair[1]+")")

			opts.ScanLimit = 2
			rep, err := ferryadmin.Reconcile(ob.ctx, ob.admin, opts)
			require.NoError(t, err)
			require.Equal(t, 2, rep.Effects[0].Scanned, "bounded by ScanLimit")
			require.False(t, rep.Effects[0].Complete)

			opts.ScanLimit, opts.Limit = 0, 1
			opts.Effects[0].Key = "order:{payload.missing}:paid"
			rep, err = ferryadmin.Reconcile(ob.ctx, ob.admin, opts)
			require.NoError(t, err)
			require.Len(t, rep.Effects[0].Missing, 1, "Limit findings listed")
			require.True(t, rep.Effects[0].More)
			require.False(t, rep.Effects[0].Complete, "the list is full: the scan stops")
			require.Equal(t, "no key: payload.missing is absent", rep.Effects[0].Missing[0].Problem)
			require.Equal(t, 1, rep.Findings)
		})
	}
}

// nopClose keeps the test's inbox store open when Reconcile closes it.
type nopClose struct{ ferrystore.InboxStore }

func (nopClose) Close() error { return nil }

// Reconcile finds a business row committed without its event, and events
// pending too long.
func TestReconcileMissingAndStuckEvents(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			biz := b.st.Driver.Table() + "_orders"
			timeType, now := map[string]string{"mysql": "DATETIME(6)", "postgres": "timestamptz", "sqlite": "TEXT"}[kind],
				map[string]string{"mysql": "NOW(6) - INTERVAL 5 MINUTE", "postgres": "now() - interval '5 minutes'",
					"sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-5 minutes')"}[kind]
			_, err := b.st.DB.Exec("CREATE TABLE " + biz + " (id BIGINT NOT NULL PRIMARY KEY, placed_at " + timeType + " NOT NULL)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = b.st.DB.Exec("DROP TABLE " + biz) })
			for id := 1; id <= 3; id++ {
				_, err := b.st.DB.Exec(fmt.Sprintf("INSERT INTO %s (id, placed_at) VALUES (%d, %s)", biz, id, now))
				require.NoError(t, err)
			}
			b.enqueue(t, event("OrderPlaced", "1"), event("OrderPlaced", "3")) // 2 skipped the outbox

			check := ferryadmin.Check{Table: biz, KeyColumn: "id", TimeColumn: "placed_at", AggregateType: "order", EventType: "OrderPlaced"}
			var rep ferryadmin.ReconcileReport
			eventually(t, 10*time.Second, func() bool {
				rep, err = ferryadmin.Reconcile(b.ctx, b.admin, ferryadmin.ReconcileOptions{Checks: []ferryadmin.Check{check},
					Window: time.Hour, Grace: time.Minute, PendingOlderThan: time.Millisecond})
				require.NoError(t, err)
				return len(rep.Stuck.Events) == 2
			}, "the events age past 1ms by the database clock")
			require.Len(t, rep.Checks, 1)
			require.Equal(t, biz+".OrderPlaced", rep.Checks[0].Name, "named by default")
			require.Len(t, rep.Checks[0].Missing, 1)
			require.Equal(t, "2", rep.Checks[0].Missing[0].Key)
			require.False(t, rep.Checks[0].More)
			require.Equal(t, 3, rep.Findings)

			rep, err = ferryadmin.Reconcile(b.ctx, b.admin, ferryadmin.ReconcileOptions{Checks: []ferryadmin.Check{check},
				Window: time.Hour, Limit: 1, PendingOlderThan: time.Millisecond})
			require.NoError(t, err)
			require.Len(t, rep.Stuck.Events, 1)
			require.True(t, rep.Stuck.More)

			rep, err = ferryadmin.Reconcile(b.ctx, b.admin, ferryadmin.ReconcileOptions{Checks: []ferryadmin.Check{check},
				Window: time.Hour, Grace: 10 * time.Minute})
			require.NoError(t, err)
			require.Empty(t, rep.Checks[0].Missing, "rows younger than the grace are skipped")
			require.Zero(t, rep.Findings)
		})
	}
}

// Reconcile refuses options that would report what retention removed.
func TestReconcileRefusesBadOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	check := ferryadmin.Check{Table: "orders", KeyColumn: "id", TimeColumn: "placed_at", EventType: "OrderPlaced"}
	effect := ferryadmin.Effect{Consumer: "points-award", InboxDatabaseURL: "sqlite:///x.db", EventType: "OrderPaid",
		Key: "order:{aggregate_id}:paid", OlderThan: time.Minute}
	for _, c := range []struct {
		name string
		opts ferryadmin.ReconcileOptions
		want string
	}{
		{"NothingToCheck", ferryadmin.ReconcileOptions{}, "nothing to check"},
		{"WindowBeyondRetention", ferryadmin.ReconcileOptions{Checks: []ferryadmin.Check{check}, Window: 2 * time.Hour,
			Retention: time.Hour}, "longer than the retention"},
		{"WindowBeyondReplayWindow", ferryadmin.ReconcileOptions{Effects: []ferryadmin.Effect{effect}, Window: 200 * time.Hour},
			"longer than the replay window 168h0m0s"},
		{"OlderThanNotWithinWindow", ferryadmin.ReconcileOptions{Effects: []ferryadmin.Effect{effect}, Window: time.Minute},
			"OlderThan 1m0s must be shorter than the window"},
		{"BadIdentifier", ferryadmin.ReconcileOptions{Checks: []ferryadmin.Check{{Table: "x; drop", KeyColumn: "id",
			TimeColumn: "t", EventType: "E"}}}, "Check.Table"},
		{"BadKey", ferryadmin.ReconcileOptions{Effects: []ferryadmin.Effect{{Consumer: "c", InboxDatabaseURL: "sqlite:///x.db",
			EventType: "E", Key: "order:paid"}}}, "has no placeholder"},
		{"NoInboxURL", ferryadmin.ReconcileOptions{Effects: []ferryadmin.Effect{{Consumer: "c", EventType: "E",
			Key: "{event_id}"}}}, "InboxDatabaseURL is required"},
		{"NoOpenInbox", ferryadmin.ReconcileOptions{Effects: []ferryadmin.Effect{effect}}, "OpenInbox is required with Effects"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.opts.Effects) > 0 && c.name != "NoOpenInbox" {
				c.opts.OpenInbox = func(context.Context, string, string) (ferrystore.InboxStore, error) {
					return nil, errors.New("not opened: the options are refused first")
				}
			}
			_, err := ferryadmin.Reconcile(b.ctx, b.admin, c.opts)
			if c.name == "BadIdentifier" {
				require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
			} else {
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}
