package ferryadmin_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// deadMix is the DEAD events of the bulk tests: 20 kinds, row i of kind
// i % 20, so that of n = 100,000 rows 40,000 fail on a missing stream,
// 30,000 on a timeout, 20,000 on a quota whose error holds % and _, 5,000
// on a look-alike of it that LIKE's wildcards would match, and 5,000
// events without destination on the missing stream. Kinds 7, 12 and 13
// recorded no error class, as rows that failed before migration 0004: the
// groups they belong to are read partly from the database's count and
// partly classified by ferryadmin.
var deadMix = func() []testsvc.DeadKind {
	var kinds []testsvc.DeadKind
	for i := 0; i < 20; i++ {
		var k testsvc.DeadKind
		switch {
		case i < 8:
			k = testsvc.DeadKind{Destination: "orders.paid", Error: `attempt 20: returned: nats: no stream matches subject "orders.paid.{n}"`}
		case i < 14:
			k = testsvc.DeadKind{Destination: "orders.paid", Error: "attempt 20: dial tcp 10.0.{m}.7:4222: i/o timeout after 30s"}
		case i < 18:
			k = testsvc.DeadKind{Destination: "orders.shipped", Error: "attempt 20: payload 100% over quota_limit ({n} bytes)"}
		case i < 19:
			k = testsvc.DeadKind{Destination: "orders.shipped", Error: "attempt 20: payload 100 over quotaXlimit ({n} bytes)"}
		default:
			k = testsvc.DeadKind{Type: "OrderRefunded", Error: `attempt 3: returned: nats: no stream matches subject "x.{n}"`}
		}
		k.Unclassified = i == 7 || i == 12 || i == 13
		kinds = append(kinds, k)
	}
	return kinds
}()

// The classes of deadMix, largest group first.
const (
	classNoStream  = `attempt <n>: returned: nats: no stream matches subject "<s>"`
	classTimeout   = "attempt <n>: dial tcp <n>:<n>: i/o timeout after <d>"
	classQuota     = "attempt <n>: payload <n>% over quota_limit (<n> bytes)"
	classLookAlike = "attempt <n>: payload <n> over quotaXlimit (<n> bytes)"
)

// bulkSize is the number of DEAD rows of the bulk tests on kind: 100,000
// on MariaDB, the one large run; 25,000 on PostgreSQL, which still spans
// several pages of the walk (ferrystore.MaxStateListLimit); 5,000 on
// SQLite, whose engine is Go code (modernc.org/sqlite) that -race slows
// about fifty-fold. FERRY_BULK_ROWS overrides it.
func bulkSize(t *testing.T, kind string) int {
	t.Helper()
	if v := os.Getenv("FERRY_BULK_ROWS"); v != "" {
		var n int
		_, err := fmt.Sscan(v, &n)
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 3000, "FERRY_BULK_ROWS")
		return n
	}
	switch kind {
	case "sqlite":
		return 5_000
	case "postgres":
		return 25_000
	}
	return 100_000
}

func statusCount(t *testing.T, b *bundle, s ferrytype.Status) int64 {
	t.Helper()
	n, err := b.admin.CountByStatus(b.ctx, s)
	require.NoError(t, err)
	return n[s]
}

// Retry and discard act on every event that matches, however many, and
// report true totals; a dry run counts without changing; Max is honoured
// and says what is left; the summary's groups are right and retrying one
// changes exactly its events.
func TestBulkActsOnEverythingThatMatches(t *testing.T) {
	testsvc.Slow(t, "a bulk run")
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			n := bulkSize(t, kind)
			per := func(lo, hi int) int64 { // rows of kinds lo..hi-1
				c := int64(0)
				for i := 0; i < n; i++ {
					if k := i % 20; k >= lo && k < hi {
						c++
					}
				}
				return c
			}
			start := time.Now()
			testsvc.InsertDead(t, b.st, n, deadMix...)
			t.Logf("%s: %d DEAD rows written in %s", kind, n, time.Since(start).Round(time.Millisecond))

			step := func(what string) func() {
				start := time.Now()
				return func() { t.Logf("%s: %s in %s", kind, what, time.Since(start).Round(time.Millisecond)) }
			}

			done := step("count")
			total, err := ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			require.Equal(t, int64(n), total)
			done()

			done = step("dry run")
			res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, DryRun: true})
			require.NoError(t, err)
			done()
			require.Equal(t, int64(n), res.Matched)
			require.Equal(t, int64(n), res.Changed, "a dry run reports the true total")
			require.True(t, res.Complete)
			require.Len(t, res.Preview, min(n, ferryadmin.DefaultBulkBatch), "the first batch")
			require.Equal(t, "dead-000000", res.Preview[0].ID)
			require.Equal(t, int64(n), statusCount(t, b, ferrytype.StatusDead), "a dry run changes nothing")

			done = step("summary")
			sum, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			done()
			require.Equal(t, int64(n), sum.Total)
			require.False(t, sum.Truncated)
			type group struct {
				dest, class string
				count       int64
			}
			got := make([]group, len(sum.Groups))
			for i, g := range sum.Groups {
				got[i] = group{g.Destination, g.ErrorClass, g.Count}
			}
			require.Equal(t, []group{
				{"orders.paid", classNoStream, per(0, 8)},
				{"orders.paid", classTimeout, per(8, 14)},
				{"orders.shipped", classQuota, per(14, 18)},
				{"OrderRefunded", classNoStream, per(19, 20)},
				{"orders.shipped", classLookAlike, per(18, 19)},
			}, got, "largest first; a tie goes to the oldest, then by destination (dead-000018 and dead-000019 share a time)")
			require.Equal(t, []string{"OrderRefunded"}, sum.Groups[3].Types)
			require.Equal(t, "dead-000000", sum.Groups[0].SampleID, "the oldest")
			require.Equal(t, `attempt 20: returned: nats: no stream matches subject "orders.paid.0"`, sum.Groups[0].SampleError)
			require.True(t, sum.Groups[0].Oldest.Before(sum.Groups[0].Newest))

			// % and _ are literal: the look-alike is not selected.
			quota := ferryadmin.DeadFilter{ErrorContains: "100% OVER quota_limit"}
			c, err := ferryadmin.CountDead(b.ctx, b.admin, quota)
			require.NoError(t, err)
			require.Equal(t, per(14, 18), c)

			// A capped run does what it may and says what is left.
			capped := int(c * 3 / 4)
			done = step("capped discard")
			res, err = ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: quota, Max: capped}, "over quota, INC-7", "ops@test")
			require.NoError(t, err)
			done()
			require.Equal(t, c, res.Matched)
			require.Equal(t, int64(capped), res.Changed)
			require.Equal(t, c-int64(capped), res.Left)
			require.False(t, res.Complete)
			require.Equal(t, (capped+ferryadmin.DefaultBulkBatch-1)/ferryadmin.DefaultBulkBatch, res.Batches)
			require.Len(t, res.IDs, min(capped, ferryadmin.MaxBulkIDs), "bounded")
			require.Equal(t, int64(capped), statusCount(t, b, ferrytype.StatusDiscarded))
			c, err = ferryadmin.CountDead(b.ctx, b.admin, quota)
			require.NoError(t, err)
			require.Equal(t, res.Left, c)

			// One group, selected by its filter: exactly its events.
			timeout := sum.Groups[1]
			done = step("retry one group")
			res, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: timeout.Filter()})
			require.NoError(t, err)
			done()
			require.Equal(t, timeout.Count, res.Matched)
			require.Equal(t, timeout.Count, res.Changed)
			require.Zero(t, res.Skipped)
			require.True(t, res.Complete)
			require.Equal(t, timeout.Count, statusCount(t, b, ferrytype.StatusNew))
			rows, err := b.admin.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew}, Limit: 1000,
				NoPayload: true})
			require.NoError(t, err)
			for _, r := range rows {
				require.Equal(t, classTimeout, ferryadmin.ErrorClass(r.LastError))
			}
			after, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			require.Len(t, after.Groups, 4, "the group is gone, the others stay")
			require.Equal(t, int64(n)-timeout.Count-int64(capped), after.Total)

			// Everything else, in batches, with progress.
			left := int64(n) - timeout.Count - int64(capped)
			var calls int
			var last ferryadmin.BulkResult
			done = step("retry --all")
			res, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, Page: 1000, // 1,200 rows span two pages
				Progress: func(r ferryadmin.BulkResult) {
					calls++
					require.GreaterOrEqual(t, r.Changed, last.Changed)
					require.Equal(t, left, r.Matched)
					last = r
				}})
			require.NoError(t, err)
			done()
			require.Equal(t, left, res.Matched)
			require.Equal(t, left, res.Changed)
			require.True(t, res.Complete)
			require.Zero(t, res.Left)
			require.Equal(t, int((left+ferryadmin.DefaultBulkBatch-1)/ferryadmin.DefaultBulkBatch), res.Batches)
			require.Equal(t, res.Batches, calls)
			require.Equal(t, [3]int64{res.Matched, res.Changed, int64(res.Batches)}, [3]int64{last.Matched, last.Changed, int64(last.Batches)},
				"the last progress is the result")
			require.Zero(t, statusCount(t, b, ferrytype.StatusDead))
			require.Equal(t, int64(n)-int64(capped), statusCount(t, b, ferrytype.StatusNew))

			res, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true})
			require.NoError(t, err)
			require.Zero(t, res.Matched)
			require.Zero(t, res.Changed)
			require.True(t, res.Complete)
			require.Empty(t, res.IDs)
			require.False(t, strings.Contains(fmt.Sprint(res), "dead-"))
		})
	}
}

// A relay that takes retried events back to DEAD during the run, an
// operator who discards events the run listed but has not reached yet, and
// events that die during the run neither make it loop nor miscount: each
// event matched is acted on once, the discarded ones are reported skipped,
// the new ones are retried too.
func TestBulkRunSurvivesConcurrentChanges(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			testsvc.InsertDead(t, b.st, 1200, testsvc.DeadKind{Destination: "orders.paid", Error: "attempt 20: nack {n}"})
			order, err := b.admin.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Limit: 1000})
			require.NoError(t, err)
			listedNotReached := []string{order[500].ID, order[501].ID, order[502].ID, order[503].ID, order[504].ID}

			var (
				rekilled []string
				newDead  []string
				calls    int
			)
			res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, Page: 1000, Batch: 500, // 1,200 rows span two pages
				Progress: func(r ferryadmin.BulkResult) {
					calls++
					if calls != 1 {
						return
					}
					// After the first batch: three events die afresh, and a
					// relay claims the 500 just retried with them and fails
					// all for good.
					newDead = b.enqueue(t, event("OrderPaid", "9001"), event("OrderPaid", "9002"), event("OrderPaid", "9003"))
					ids, tok := b.claim(t, 503)
					fails := make([]ferrystore.Failure, len(ids))
					for i, id := range ids {
						fails[i] = ferrystore.Failure{ID: id, Token: tok, Dead: true, Error: "attempt 1: nack again"}
					}
					out, err := b.admin.MarkFailed(b.ctx, fails)
					require.NoError(t, err)
					require.Len(t, out.Dead, 503)
					for _, id := range ids {
						if !strings.HasPrefix(id, "dead-") {
							continue
						}
						rekilled = append(rekilled, id)
					}
					// Another operator discards five the run listed.
					n, err := b.admin.Discard(b.ctx, listedNotReached, "by someone else")
					require.NoError(t, err)
					require.Equal(t, int64(5), n)
				}})
			require.NoError(t, err)
			require.Len(t, rekilled, 500)
			require.Equal(t, int64(1200), res.Matched)
			require.Equal(t, int64(1200-5+3), res.Changed, "each event once; the new ones too")
			require.Equal(t, int64(5), res.Skipped, "the discarded ones")
			require.True(t, res.Complete)
			require.Equal(t, 3, res.Batches, "500, 500 (5 skipped) of the first page; the second has the last 200 and the 3 new ones")
			for _, id := range rekilled {
				require.Equal(t, "DEAD", b.status(t, id), "retried once, not again after the relay failed it")
			}
			for _, id := range newDead {
				require.Equal(t, "NEW", b.status(t, id), "died during the run, after its cursor: retried")
			}
			for _, id := range listedNotReached {
				require.Equal(t, "DISCARDED", b.status(t, id))
			}
			require.Equal(t, int64(1200-500-5+3), statusCount(t, b, ferrytype.StatusNew))
		})
	}
}

// More than MaxDeadGroups groups: the largest are kept, the summary says
// it is truncated, and the total counts every event.
func TestSummarizeDeadIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	kinds := make([]testsvc.DeadKind, ferryadmin.MaxDeadGroups+1)
	for i := range kinds {
		kinds[i] = testsvc.DeadKind{Destination: fmt.Sprintf("d%03d", i), Error: "attempt 20: rejected {n}"}
	}
	testsvc.InsertDead(t, b.st, 2*len(kinds)+1, kinds...)
	sum, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
	require.NoError(t, err)
	require.True(t, sum.Truncated)
	require.Len(t, sum.Groups, ferryadmin.MaxDeadGroups)
	require.Equal(t, int64(2*len(kinds)+1), sum.Total)
	require.Equal(t, ferryadmin.DeadGroup{Destination: "d000", ErrorClass: "attempt <n>: rejected <n>", Count: 3,
		Types: []string{"OrderPaid"}, Oldest: sum.Groups[0].Oldest, Newest: sum.Groups[0].Newest, SampleID: "dead-000000",
		SampleError: "attempt 20: rejected 0"}, sum.Groups[0], "the largest")

	sum, err = ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{Destination: "d007"})
	require.NoError(t, err)
	require.False(t, sum.Truncated)
	require.Len(t, sum.Groups, 1)
	require.Equal(t, int64(2), sum.Total)
}

// Filters by error text and by class list, count and act on the same
// events; % and _ are literal; bad filters are refused, naming the field.
func TestDeadErrorFilters(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			testsvc.InsertDead(t, b.st, 60, deadMix...)
			list, err := ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorClass: classTimeout}, 100)
			require.NoError(t, err)
			require.Len(t, list.Events, 18)
			require.False(t, list.More)
			for _, e := range list.Events {
				require.Equal(t, classTimeout, ferryadmin.ErrorClass(e.LastError))
			}
			list, err = ferryadmin.ListDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorClass: classNoStream}, 5)
			require.NoError(t, err)
			require.Len(t, list.Events, 5)
			require.True(t, list.More)
			c, err := ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorClass: classNoStream})
			require.NoError(t, err)
			require.Equal(t, int64(27), c, "both destinations")
			c, err = ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorClass: classNoStream, Destination: "OrderRefunded"})
			require.NoError(t, err)
			require.Equal(t, int64(3), c)
			c, err = ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorContains: "quota_limit"})
			require.NoError(t, err)
			require.Equal(t, int64(12), c, "_ is no wildcard")
			c, err = ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{ErrorContains: "100%"})
			require.NoError(t, err)
			require.Equal(t, int64(12), c, "% is no wildcard")

			res, err := ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{ErrorContains: "100%"}, DryRun: true})
			require.NoError(t, err)
			require.Equal(t, int64(12), res.Matched)
			require.Len(t, res.Preview, 12)

			for _, f := range []ferryadmin.DeadFilter{
				{ErrorClass: "attempt 20: nope"},
				{ErrorContains: "bad \xff"},
				{ErrorContains: strings.Repeat("x", ferrystore.MaxErrorContains+1)},
			} {
				_, err := ferryadmin.CountDead(b.ctx, b.admin, f)
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
				require.ErrorContains(t, err, "DeadFilter.Error")
			}
			_, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true, Max: -1})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		})
	}
}

// Discarded events are listed with who, why and when; a restore takes
// them back to DEAD, recording who restored them, and they can be retried
// or discarded again.
func TestRestoreDiscarded(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			ids := b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"), event("OrderRefunded", "3"))
			b.dead(t, 3, "attempt 20: rejected")
			res, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{All: true}, "test orders, INC-9", "alice@ops")
			require.NoError(t, err)
			require.Equal(t, int64(3), res.Changed)

			l, err := ferryadmin.ListDiscarded(b.ctx, b.admin, ferryadmin.DeadFilter{Type: "OrderPaid"}, 10)
			require.NoError(t, err)
			require.Len(t, l.Events, 2)
			e := l.Events[0]
			require.Equal(t, ids[0], e.ID)
			require.Equal(t, ferrytype.StatusDiscarded, e.Status)
			require.NotNil(t, e.DiscardedAt)
			require.Contains(t, e.DiscardReason, "test orders, INC-9 (by alice@ops at ")

			_, err = ferryadmin.RestoreDiscarded(b.ctx, b.admin, ferryadmin.BulkOptions{All: true}, " ")
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "an actor is required")
			_, err = ferryadmin.RestoreDiscarded(b.ctx, b.admin, ferryadmin.BulkOptions{}, "bob@ops")
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "All is required without a filter")
			res, err = ferryadmin.RestoreDiscarded(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{Type: "OrderPaid"},
				DryRun: true}, "")
			require.NoError(t, err)
			require.Equal(t, [2]int64{2, 2}, [2]int64{res.Matched, res.Changed})
			require.Equal(t, "DISCARDED", b.status(t, ids[0]), "a dry run changes nothing")

			res, err = ferryadmin.RestoreDiscarded(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{Type: "OrderPaid"}}, "bob@ops")
			require.NoError(t, err)
			require.Equal(t, "restore", res.Action)
			require.Equal(t, [2]int64{2, 2}, [2]int64{res.Matched, res.Changed})
			require.True(t, res.Complete)
			require.Contains(t, res.Audit, "restored by bob@ops at ")
			for _, id := range ids[:2] {
				r, err := b.admin.Get(b.ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusDead, r.Status, "DEAD, not NEW: a person decides next")
				require.True(t, r.DiscardedAt.IsZero())
				require.Regexp(t, `^test orders, INC-9 \(by alice@ops at [^)]+\); restored by bob@ops at \S+$`, r.DiscardReason)
				require.Equal(t, "attempt 20: rejected", r.LastError, "the error stays")
			}
			require.Equal(t, "DISCARDED", b.status(t, ids[2]))
			l, err = ferryadmin.ListDiscarded(b.ctx, b.admin, ferryadmin.DeadFilter{}, 10)
			require.NoError(t, err)
			require.Len(t, l.Events, 1)

			res, err = ferryadmin.RetryDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids[:1]}})
			require.NoError(t, err)
			require.Equal(t, int64(1), res.Changed, "a restored event can be retried")
			require.Equal(t, "NEW", b.status(t, ids[0]))
			res, err = ferryadmin.RestoreDiscarded(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids[:2]}}, "bob@ops")
			require.NoError(t, err)
			require.Zero(t, res.Matched, "neither is DISCARDED now")
			require.Zero(t, res.Changed)
		})
	}
}

// Events that died before migration 0004 recorded no error class:
// ClassifyErrors records it once, the groups stay the same, and a second
// run finds none.
func TestClassifyErrorsOfEventsThatDiedBeforeTheMigration(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			const n = 2*ferrystore.MaxStateListLimit/10 + 7
			testsvc.InsertDead(t, b.st, n, testsvc.Unclassified(deadMix)...)
			res, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{
				Destination: "orders.shipped", ErrorClass: classLookAlike}}, "test", "ops@test")
			require.NoError(t, err)
			require.Positive(t, res.Changed, "selected by class without a recorded one")
			before, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)

			classified, err := ferryadmin.ClassifyErrors(b.ctx, b.admin)
			require.NoError(t, err)
			require.Equal(t, int64(n), classified, "DEAD and DISCARDED")
			for _, st := range []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusDiscarded} {
				left, err := b.admin.Count(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{st}, Unclassified: true})
				require.NoError(t, err)
				require.Zero(t, left, st)
				rows, err := b.admin.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{st}, Limit: 1000, NoPayload: true})
				require.NoError(t, err)
				for _, r := range rows {
					require.Equal(t, ferryadmin.ErrorClass(r.LastError), r.ErrorClass)
				}
			}
			after, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			require.Equal(t, before, after, "the same groups, now counted by the database")
			again, err := ferryadmin.ClassifyErrors(b.ctx, b.admin)
			require.NoError(t, err)
			require.Zero(t, again)
		})
	}
}
