package ferryadmin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A group action confirmed on a dry run acts on the events that dry run
// counted, bound by its instant (DeadFilter.DiedBy), and on none that
// died after it: here an event older than every one of the group, pending
// when the dry run counted and DEAD since, which a walk bounded by the
// count alone (oldest first, up to that many) would take in place of the
// newest counted event.
func TestGroupActionActsOnTheEventsItsDryRunCounted(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		for _, verb := range []string{"retry", "discard"} {
			t.Run(kind+"/"+verb, func(t *testing.T) {
				t.Parallel()
				b := setup(t, kind)
				const lastError = "attempt 3: unknown: nats: timeout after 3s"
				paid := func(agg string) ferry.Event {
					e := event("OrderPaid", agg)
					e.Destination = "orders.paid"
					return e
				}
				late := b.enqueue(t, paid("0"))[0] // the oldest of all
				group := b.enqueue(t, paid("1"), paid("2"), paid("3"))
				// Claim all four; the group dies, the oldest goes back to
				// NEW and waits.
				ids, tok := b.claim(t, 4)
				require.ElementsMatch(t, append([]string{late}, group...), ids)
				fails := make([]ferrystore.Failure, len(group))
				for i, id := range group {
					fails[i] = ferrystore.Failure{ID: id, Token: tok, Dead: true, Error: lastError}
				}
				_, err := b.admin.MarkFailed(b.ctx, fails)
				require.NoError(t, err)
				n, err := b.admin.Release(b.ctx, tok, []string{late})
				require.NoError(t, err)
				require.Equal(t, int64(1), n)

				f := ferryadmin.DeadFilter{Destination: "orders.paid", ErrorClass: ferryadmin.ErrorClass(lastError)}
				run := func(opts ferryadmin.BulkOptions) (ferryadmin.BulkResult, error) {
					if verb == "discard" {
						return ferryadmin.DiscardDead(b.ctx, b.admin, opts, "INC-9", "alice@test")
					}
					return ferryadmin.RetryDead(b.ctx, b.admin, opts)
				}
				dry, err := run(ferryadmin.BulkOptions{Filter: f, DryRun: true})
				require.NoError(t, err)
				require.Equal(t, int64(3), dry.Matched)
				require.False(t, dry.At.IsZero(), "a dry run says the instant it counted at")

				// The database clock passes the dry run's instant; then the
				// oldest event dies, into the group.
				for {
					now, err := b.admin.Now(b.ctx)
					require.NoError(t, err)
					if now.After(dry.At) {
						break
					}
					time.Sleep(time.Millisecond)
				}
				again, tok := b.claim(t, 1)
				require.Equal(t, []string{late}, again)
				_, err = b.admin.MarkFailed(b.ctx, []ferrystore.Failure{{ID: late, Token: tok, Dead: true, Error: lastError}})
				require.NoError(t, err)
				count, err := ferryadmin.CountDead(b.ctx, b.admin, f)
				require.NoError(t, err)
				require.Equal(t, int64(4), count, "the late death is of the group")

				f.DiedBy = dry.At
				res, err := run(ferryadmin.BulkOptions{Filter: f})
				require.NoError(t, err)
				require.Equal(t, int64(3), res.Changed, "%+v", res)
				require.Equal(t, int64(1), res.Later, "the late death is counted as left")
				require.Equal(t, int64(4), res.Matched, "Matched counts the group, the bound aside")
				require.True(t, res.Complete)
				require.ElementsMatch(t, group, res.IDs, "exactly the events the dry run counted")
				want := ferrytype.StatusNew
				if verb == "discard" {
					want = ferrytype.StatusDiscarded
				}
				for _, id := range group {
					require.Equal(t, string(want), b.status(t, id), id)
				}
				require.Equal(t, string(ferrytype.StatusDead), b.status(t, late), "died after the dry run: left alone")
			})
		}
	}
}
