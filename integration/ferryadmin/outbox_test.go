package ferryadmin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			t.Run("EmptyTableNeedsNothing", func(t *testing.T) {
				b := setup(t, kind)
				rep, err := ferryadmin.Status(b.ctx, b.admin, nil)
				require.NoError(t, err)
				require.Equal(t, b.st.Driver.Table(), rep.Table)
				require.Equal(t, kind, rep.Dialect)
				require.Equal(t, map[string]int64{"NEW": 0, "SENDING": 0, "DEAD": 0, "DISCARDED": 0}, rep.Counts)
				require.Nil(t, rep.OldestPending)
				require.Empty(t, rep.Destinations)
				require.Empty(t, rep.Failed)
				require.Empty(t, rep.Attention, "no relay alive, but nothing waits for one either")
				require.Empty(t, rep.Relays)
				require.Empty(t, rep.RelaysError)
				require.False(t, rep.Unhealthy)
			})
			t.Run("CountsPendingDeadAndErrors", func(t *testing.T) {
				b := setup(t, kind)
				dead := b.enqueue(t, event("OrderPaid", "1"))
				b.dead(t, 1, "stream not found")
				b.enqueue(t, event("OrderPaid", "2"))
				b.sent(t, 1)
				sending := b.enqueue(t, event("OrderShipped", "3"))
				b.claim(t, 1)
				b.enqueue(t, event("OrderPaid", "4"), event("OrderShipped", "5"))

				rep, err := ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{Destinations: 10, Errors: 5, CountSent: true})
				require.NoError(t, err)
				require.Equal(t, map[string]int64{"NEW": 2, "SENDING": 1, "DEAD": 1, "DISCARDED": 0, "SENT": 1}, rep.Counts)
				require.True(t, rep.SentCounted)
				require.Equal(t, int64(2), rep.Ready)
				require.NotNil(t, rep.OldestPending)
				require.Equal(t, sending[0], rep.OldestPending.ID, "the oldest NEW or SENDING event")
				require.Len(t, rep.Destinations, 2)
				require.Equal(t, "OrderShipped", rep.Destinations[0].Destination, "the oldest pending destination first")
				require.Equal(t, int64(1), rep.Destinations[0].New)
				require.Equal(t, int64(1), rep.Destinations[0].Sending)
				require.Len(t, rep.Failed, 1)
				require.Equal(t, dead[0], rep.Failed[0].ID)
				require.Equal(t, "stream not found", rep.Failed[0].LastError)
				require.Nil(t, rep.Failed[0].Payload, "listings carry no payload")
				require.Len(t, rep.Attention, 2)
				require.Contains(t, rep.Attention[0], "1 DEAD event waits for a decision")
				require.Contains(t, rep.Attention[1], "no relay alive: 3 events pending", "no relay runs in this test")
				require.True(t, rep.Unhealthy, "a DEAD event needs a person")
				require.Equal(t, ferryadmin.DefaultMaxPendingAge, rep.MaxPendingAge)
				var attempts int64
				for _, a := range rep.Attempts {
					attempts += a.Events
				}
				require.Equal(t, int64(3), attempts, "NEW and SENDING events by attempts")

				rep, err = ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{})
				require.NoError(t, err)
				require.NotContains(t, rep.Counts, "SENT", "SENT is counted only when asked")
				require.Empty(t, rep.Destinations, "0 destinations: none")
				require.Empty(t, rep.Failed, "0 errors: none")
			})
			t.Run("OldPendingEventNeedsAttention", func(t *testing.T) {
				b := setup(t, kind)
				id := b.enqueue(t, event("OrderPaid", "1"))
				var rep ferryadmin.StatusReport
				eventually(t, 10*time.Second, func() bool {
					var err error
					rep, err = ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{MaxPendingAge: time.Millisecond})
					require.NoError(t, err)
					return rep.Unhealthy
				}, "the event ages past 1ms by the database clock")
				require.Len(t, rep.Attention, 2)
				require.Contains(t, rep.Attention[0], "the oldest pending event ("+id[0]+")")
				require.Contains(t, rep.Attention[1], "no relay alive")
			})
			t.Run("RetriedEventIsPendingFromItsRetry", func(t *testing.T) {
				b := setup(t, kind)
				id := b.enqueue(t, event("OrderPaid", "1"))
				b.dead(t, 1, "stream not found")
				const maxAge = 500 * time.Millisecond
				eventually(t, 10*time.Second, func() bool {
					rows, err := b.admin.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead},
						MinAge: maxAge, Limit: 1})
					require.NoError(t, err)
					return len(rows) == 1
				}, "the event was created more than maxAge ago, by the database clock")
				res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true})
				require.NoError(t, err)
				require.Equal(t, int64(1), res.Changed)
				rep, err := ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{MaxPendingAge: maxAge})
				require.NoError(t, err)
				require.Equal(t, id[0], rep.OldestPending.ID)
				require.NotNil(t, rep.OldestPending.RevivedAt)
				require.Less(t, rep.OldestPendingSeconds, maxAge.Seconds(), "pending since the retry, not since it was created")
				require.False(t, rep.Unhealthy, "a retried event is no stuck backlog")
				for _, line := range rep.Attention {
					require.NotContains(t, line, "publishing fails", "no attempt failed since the retry")
					require.NotContains(t, line, "the oldest pending event")
				}
				eventually(t, 10*time.Second, func() bool {
					rep, err = ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{MaxPendingAge: maxAge})
					require.NoError(t, err)
					return rep.Unhealthy
				}, "then it ages from its retry")
				require.Contains(t, rep.Attention[0], "the oldest pending event ("+id[0]+") is pending")
				require.Contains(t, rep.Attention[0], "since a person retried it out of DEAD and was not attempted since")
			})
			t.Run("RefusesBadOptions", func(t *testing.T) {
				b := setup(t, kind)
				_, err := ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{Destinations: -1})
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
				require.ErrorContains(t, err, "StatusOptions.Destinations")
			})
		})
	}
}

func TestDead(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			t.Run("ListFiltersAndSaysWhetherThereIsMore", func(t *testing.T) {
				b := setup(t, kind)
				ids := b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"), event("OrderPaid", "3"),
					event("OrderRefunded", "4"))
				b.dead(t, 4, "rejected")
				l, err := ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{Type: "OrderPaid"}, 2)
				require.NoError(t, err)
				require.True(t, l.More)
				require.Equal(t, []string{ids[0], ids[1]}, []string{l.Events[0].ID, l.Events[1].ID}, "oldest first")
				l, err = ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{AggregateType: "order", AggregateID: "4"}, 10)
				require.NoError(t, err)
				require.False(t, l.More)
				require.Len(t, l.Events, 1)
				require.Equal(t, ids[3], l.Events[0].ID)
				require.Equal(t, "order:4#1", l.Events[0].Aggregate())
				l, err = ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{MinAge: time.Hour}, 10)
				require.NoError(t, err)
				require.Empty(t, l.Events, "none is an hour old")
				_, err = ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{}, 0)
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			})
			t.Run("GetEventsCountsWhatADeadEventHoldsBack", func(t *testing.T) {
				b := setup(t, kind)
				first := b.enqueue(t, event("OrderPaid", "1"))
				b.dead(t, 1, "rejected")
				b.enqueue(t, event("OrderShipped", "1"), event("OrderClosed", "1"))
				found, err := ferryadmin.GetEvents(b.ctx, b.admin, []string{first[0], "no-such-event"})
				require.NoError(t, err)
				require.Equal(t, []string{"no-such-event"}, found.Missing)
				require.Len(t, found.Events, 1)
				e := found.Events[0]
				require.Equal(t, ferrytype.StatusDead, e.Status)
				require.JSONEq(t, `{"order_id":1}`, string(e.Payload), "in full")
				require.NotNil(t, e.HoldsBack)
				require.Equal(t, 2, *e.HoldsBack)
			})
			t.Run("RetryInBatchesReportsProgress", func(t *testing.T) {
				b := setup(t, kind)
				evs := make([]string, 0, 5)
				for i := range 5 {
					evs = append(evs, b.enqueue(t, event("OrderPaid", fmt.Sprint(i)))...)
				}
				other := b.enqueue(t, event("OrderRefunded", "9"))
				b.dead(t, 6, "rejected")
				var progress []int
				res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{Type: "OrderPaid"},
					Batch: 2, Progress: func(r ferryadmin.BulkResult) { progress = append(progress, len(r.IDs)) }})
				require.NoError(t, err)
				require.Equal(t, "retry", res.Action)
				require.Equal(t, int64(5), res.Matched)
				require.Equal(t, int64(5), res.Changed)
				require.True(t, res.Complete)
				require.ElementsMatch(t, evs, res.IDs)
				require.Equal(t, 3, res.Batches)
				require.Equal(t, []int{2, 4, 5}, progress)
				for _, id := range evs {
					r, err := b.admin.Get(b.ctx, id)
					require.NoError(t, err)
					require.Equal(t, ferrytype.StatusNew, r.Status)
					require.Zero(t, r.Attempt, "attempts reset")
				}
				require.Equal(t, "DEAD", b.status(t, other[0]), "another type is left alone")

				res, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{Type: "OrderPaid"}})
				require.NoError(t, err)
				require.Zero(t, res.Changed, "nothing left to retry")
				require.Empty(t, res.IDs)
			})
			t.Run("RetryStopsAtMax", func(t *testing.T) {
				b := setup(t, kind)
				b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"), event("OrderPaid", "3"))
				b.dead(t, 3, "rejected")
				res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, Batch: 2, Max: 2})
				require.NoError(t, err)
				require.Equal(t, int64(3), res.Matched)
				require.Equal(t, int64(2), res.Changed)
				require.Equal(t, int64(1), res.Left, "what Max left")
				require.False(t, res.Complete)
				l, err := ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{}, 10)
				require.NoError(t, err)
				require.Len(t, l.Events, 1)
			})
			t.Run("DryRunChangesNothing", func(t *testing.T) {
				b := setup(t, kind)
				ids := b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"))
				b.dead(t, 2, "rejected")
				res, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, DryRun: true}, "", "")
				require.NoError(t, err)
				require.True(t, res.DryRun)
				require.Equal(t, int64(2), res.Changed)
				require.Len(t, res.Preview, 2)
				for _, id := range ids {
					require.Equal(t, "DEAD", b.status(t, id))
				}
			})
			t.Run("DiscardKeepsReasonAndActor", func(t *testing.T) {
				b := setup(t, kind)
				ids := b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"))
				b.dead(t, 2, "rejected")
				_, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids[:1]}}, " ", "ops@host")
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "a reason is required")
				res, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids[:1]}},
					"payload too large, INC-9", "ops@host")
				require.NoError(t, err)
				require.Equal(t, int64(1), res.Changed)
				require.Contains(t, res.Audit, "payload too large, INC-9 (by ops@host at ")
				r, err := b.admin.Get(b.ctx, ids[0])
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusDiscarded, r.Status)
				require.Equal(t, res.Audit, r.DiscardReason)
				require.Equal(t, "DEAD", b.status(t, ids[1]))
			})
			t.Run("EmptyFilterNeedsAll", func(t *testing.T) {
				b := setup(t, kind)
				_, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{})
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
				require.ErrorContains(t, err, "BulkOptions.All")
			})
		})
	}
}

func TestPurgeEvents(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			dead := b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"))
			b.dead(t, 2, "x")
			_, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: dead[:1]}}, "test", "me")
			require.NoError(t, err)
			sent := b.enqueue(t, event("OrderPaid", "3"), event("OrderPaid", "4"), event("OrderPaid", "5"))
			b.sent(t, 3)
			sending := b.enqueue(t, event("OrderPaid", "6"))
			b.claim(t, 1)
			pending := b.enqueue(t, event("OrderPaid", "7"))

			_, err = ferryadmin.PurgeEvents(b.ctx, b.admin, ferryadmin.PurgeOptions{})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "OlderThan is required")
			rep, err := ferryadmin.PurgeEvents(b.ctx, b.admin, ferryadmin.PurgeOptions{OlderThan: time.Hour, Discarded: true})
			require.NoError(t, err)
			require.Equal(t, []ferryadmin.PurgeResult{{Kind: "sent", Statements: 1, Complete: true},
				{Kind: "discarded", Statements: 1, Complete: true}}, rep.Results, "nothing is an hour old")

			eventually(t, 10*time.Second, func() bool {
				rep, err = ferryadmin.PurgeEvents(b.ctx, b.admin, ferryadmin.PurgeOptions{OlderThan: time.Millisecond, Discarded: true, DryRun: true})
				require.NoError(t, err)
				return rep.Results[0].Eligible == 3 && rep.Results[1].Eligible == 1
			}, "sent_at and discarded_at fall behind the database clock")
			require.True(t, rep.DryRun)
			require.Equal(t, []ferryadmin.PurgeResult{{Kind: "sent", Eligible: 3}, {Kind: "discarded", Eligible: 1}}, rep.Results)
			for _, id := range append(sent, dead[0]) {
				_, err := b.admin.Get(b.ctx, id)
				require.NoError(t, err, "a dry run deletes nothing")
			}

			var progress []int64
			eventually(t, 10*time.Second, func() bool {
				progress = nil
				rep, err = ferryadmin.PurgeEvents(b.ctx, b.admin, ferryadmin.PurgeOptions{OlderThan: time.Millisecond, Batch: 2, Discarded: true,
					Progress: func(r ferryadmin.PurgeResult) { progress = append(progress, r.Deleted) }})
				require.NoError(t, err)
				return rep.Results[0].Deleted > 0
			}, "sent_at falls behind the database clock")
			require.Equal(t, b.st.Driver.Table(), rep.Table)
			require.Equal(t, ferryadmin.PurgeResult{Kind: "sent", Deleted: 3, Statements: 2, Complete: true}, rep.Results[0], "batches of 2")
			require.Equal(t, ferryadmin.PurgeResult{Kind: "discarded", Deleted: 1, Statements: 1, Complete: true}, rep.Results[1])
			require.Equal(t, []int64{2, 3, 1}, progress)
			for _, id := range append(sent, dead[0]) {
				_, err := b.admin.Get(b.ctx, id)
				require.ErrorIs(t, err, ferrytype.ErrNotFound)
			}
			require.Equal(t, "DEAD", b.status(t, dead[1]))
			require.Equal(t, "SENDING", b.status(t, sending[0]))
			require.Equal(t, "NEW", b.status(t, pending[0]))
		})
	}
}

// MaxBatches stops a purge that has more to do, and says so.
func TestPurgeEventsStopsAtMaxBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"), event("OrderPaid", "3"))
	b.sent(t, 3)
	var rep ferryadmin.PurgeReport
	eventually(t, 10*time.Second, func() bool {
		var err error
		rep, err = ferryadmin.PurgeEvents(b.ctx, b.admin, ferryadmin.PurgeOptions{OlderThan: time.Millisecond, Batch: 1, MaxBatches: 2})
		require.NoError(t, err)
		return rep.Results[0].Deleted > 0
	}, "sent_at falls behind the database clock")
	require.Equal(t, ferryadmin.PurgeResult{Kind: "sent", Deleted: 2, Statements: 2, Complete: false}, rep.Results[0])
}

// Malformed rows written by hand (headers that are not an object of
// strings, a payload that is not JSON) end DEAD on their first claim, and
// ListDead and GetEvents read them next to well-formed ones: the reason,
// and the raw value of what does not decode.
func TestMalformedRowsAreListedAndShown(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			b := setup(t, kind)
			table := `"` + b.st.Driver.Table() + `"`
			unchecked := func(q string) string {
				return "PRAGMA ignore_check_constraints = ON; " + q + "; PRAGMA ignore_check_constraints = OFF"
			}
			if kind == "mysql" {
				table = "`" + b.st.Driver.Table() + "`"
				unchecked = func(q string) string { return "SET STATEMENT check_constraint_checks = 0 FOR " + q }
			}
			b.enqueue(t, ferry.Event{Type: "T", Payload: json.RawMessage(`{}`)})
			good := b.dead(t, 1, "attempt 20: returned")
			for _, q := range []string{
				"INSERT INTO " + table + ` (event_id, aggregate_id, event_type, payload, headers) VALUES ('bad-headers', '1', 'T', '{}', '{"retry":1}')`,
				unchecked("INSERT INTO " + table + ` (event_id, aggregate_id, event_type, payload) VALUES ('bad-payload', '2', 'T', 'not json')`),
			} {
				_, err := b.st.DB.ExecContext(b.ctx, q)
				require.NoError(t, err, q)
			}
			_, err := b.admin.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "t", Lease: time.Minute})
			require.NoError(t, err)

			list, err := ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{}, 10)
			require.NoError(t, err)
			byID := map[string]ferryadmin.Event{}
			for _, e := range list.Events {
				byID[e.ID] = e
			}
			require.Len(t, byID, 3)
			require.Empty(t, byID[good[0]].Malformed)
			require.Contains(t, byID["bad-headers"].LastError, "malformed row: headers: json: cannot unmarshal number")
			require.Contains(t, byID["bad-payload"].LastError, "malformed row: payload: not valid JSON")

			found, err := ferryadmin.GetEvents(b.ctx, b.admin, []string{"bad-headers", "bad-payload"})
			require.NoError(t, err)
			require.Len(t, found.Events, 2)
			h, p := found.Events[0].Event, found.Events[1].Event
			require.Equal(t, `{"retry":1}`, strings.ReplaceAll(h.RawHeaders, " ", ""))
			require.Contains(t, h.Malformed, "headers")
			require.Equal(t, "not json", p.RawPayload)
			require.Nil(t, p.Payload)
			_, err = json.Marshal(found)
			require.NoError(t, err)
		})
	}
}
