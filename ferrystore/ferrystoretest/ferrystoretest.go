// Package ferrystoretest is the conformance suite every ferry store runs
// against a real database. A store's test file builds a Harness and calls
// Exercise.
package ferrystoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// Harness adapts one store to the suite. TTx is the store's transaction
// type.
type Harness[TTx any] struct {
	// New returns a migrated store on a fresh table that is dropped when t
	// ends.
	New func(t *testing.T) ferrystore.Driver[TTx]
	// NewWithTable builds (without migrating) a store on table.
	NewWithTable func(table string) (ferrystore.Driver[TTx], error)
	// Begin starts a transaction on the database of s.
	Begin func(ctx context.Context, t *testing.T, s ferrystore.Driver[TTx]) (tx TTx, commit, rollback func() error)
	// LockRow opens a transaction that locks outbox row id of s, as a
	// claim in progress does, and returns a function that ends it. Nil for
	// databases without row locks (SQLite).
	LockRow func(ctx context.Context, t *testing.T, s ferrystore.Store, id string) (release func())
	// Exec runs one statement on the database of s, outside the outbox
	// (the reconciliation cases create a business table with it). Nil
	// skips those cases.
	Exec func(ctx context.Context, t *testing.T, s ferrystore.Store, query string)
}

type bundle[TTx any] struct {
	h     Harness[TTx]
	ctx   context.Context
	store ferrystore.Driver[TTx]
	ob    *ferry.Outbox[TTx]
}

func setup[TTx any](t *testing.T, h Harness[TTx]) *bundle[TTx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := h.New(t)
	ob, err := ferry.NewOutbox(s, nil)
	require.NoError(t, err)
	return &bundle[TTx]{h: h, ctx: ctx, store: s, ob: ob}
}

// enqueue writes events in one committed transaction.
func (b *bundle[TTx]) enqueue(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	tx, commit, rollback := b.h.Begin(b.ctx, t, b.store)
	ids, err := b.ob.EnqueueTx(b.ctx, tx, events...)
	if err != nil {
		_ = rollback()
		t.Fatalf("enqueue: %v", err)
	}
	require.NoError(t, commit())
	return ids
}

func (b *bundle[TTx]) claim(t *testing.T, limit int, ordered bool) ([]ferrytype.Message, string) {
	t.Helper()
	token := fmt.Sprintf("tok-%d", time.Now().UnixNano())
	msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: limit, Token: token, Lease: time.Minute, Ordered: ordered})
	require.NoError(t, err)
	return msgs, token
}

func (b *bundle[TTx]) get(t *testing.T, id string) ferrystore.Row {
	t.Helper()
	r, err := b.store.Get(b.ctx, id)
	require.NoError(t, err)
	return r
}

func ev(typ, aggID string, payload string) ferry.Event {
	return ferry.Event{Type: typ, AggregateType: "order", AggregateID: aggID, Payload: json.RawMessage(payload)}
}

func idsOf(msgs []ferrytype.Message) []string { return ids(msgs) }

func ids(msgs []ferrytype.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].ID
	}
	return out
}

// Exercise runs the conformance suite.
func Exercise[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("Migrations", func(t *testing.T) {
		b := setup(t, h)
		require.NoError(t, b.store.Migrate(b.ctx), "a second Migrate must be a no-op")
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		up, err := fs.ReadFile(fsys, "0001_outbox.up.sql")
		require.NoError(t, err)
		require.Contains(t, string(up), b.store.Table())
		_, err = fs.ReadFile(fsys, "0001_outbox.down.sql")
		require.NoError(t, err)
	})

	t.Run("InvalidTableName", func(t *testing.T) {
		for _, name := range []string{"outbox;drop table x", "1abc", "a-b", `x"y`, "", strings.Repeat("a", 70)} {
			if name == "" {
				continue // empty means the default
			}
			_, err := h.NewWithTable(name)
			require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier, "table %q", name)
		}
	})

	t.Run("EnqueueAndClaimRoundTrip", func(t *testing.T) {
		b := setup(t, h)
		in := ferry.Event{
			ID: "evt-roundtrip-1", AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
			Payload:     json.RawMessage(`{"orderId":42,"amount":10,"note":"żółw ✓"}`),
			Headers:     map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-k": "v"},
			Destination: "orders.paid", Exchange: "orders",
		}
		ids := b.enqueue(t, in)
		require.Equal(t, []string{"evt-roundtrip-1"}, ids)
		msgs, token := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		m := msgs[0]
		require.Equal(t, in.ID, m.ID)
		require.Equal(t, "order", m.AggregateType)
		require.Equal(t, "42", m.AggregateID)
		require.Equal(t, int64(1), m.Sequence)
		require.Equal(t, "OrderPaid", m.Type)
		require.JSONEq(t, string(in.Payload), string(m.Payload))
		require.Equal(t, in.Headers, m.Headers)
		require.Equal(t, "orders.paid", m.Destination)
		require.Equal(t, "orders", m.Exchange)
		require.Equal(t, 1, m.Attempt)
		require.WithinDuration(t, time.Now(), m.CreatedAt, time.Hour, "created_at comes from the database clock")
		row := b.get(t, m.ID)
		require.Equal(t, ferrytype.StatusSending, row.Status)
		require.Equal(t, token, row.LeaseToken)
		require.True(t, row.LockedUntil.After(row.CreatedAt), "locked_until is set in the future")
	})

	t.Run("GeneratedIDsAreStableUUIDv7", func(t *testing.T) {
		b := setup(t, h)
		ids := b.enqueue(t, ev("A", "1", `{}`), ev("B", "1", `{}`))
		require.Len(t, ids, 2)
		require.NotEqual(t, ids[0], ids[1])
		for _, id := range ids {
			require.Len(t, id, 36)
			require.Equal(t, byte('7'), id[14], "UUID version 7")
		}
		msgs, _ := b.claim(t, 10, false)
		require.ElementsMatch(t, ids, idsOf(msgs))
	})

	t.Run("RollbackWritesNothing", func(t *testing.T) {
		b := setup(t, h)
		tx, _, rollback := h.Begin(b.ctx, t, b.store)
		_, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", "1", `{}`))
		require.NoError(t, err)
		require.NoError(t, rollback())
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New)
	})

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		b := setup(t, h)
		big := `{"x":"` + strings.Repeat("a", ferry.DefaultMaxPayloadBytes) + `"}`
		cases := []struct {
			name string
			bad  ferry.Event
			want error
		}{
			{"InvalidJSON", ev("A", "1", `{"a":`), ferrytype.ErrInvalidPayload},
			{"EmptyPayload", ev("A", "1", ``), ferrytype.ErrInvalidPayload},
			{"Oversized", ev("A", "1", big), ferrytype.ErrPayloadTooLarge},
			{"NoType", ev("", "1", `{}`), ferrytype.ErrInvalidEvent},
			{"LongID", ferry.Event{ID: strings.Repeat("x", 65), Type: "A", Payload: json.RawMessage(`{}`)}, ferrytype.ErrInvalidEvent},
			{"NegativeDelay", ferry.Event{Type: "A", Payload: json.RawMessage(`{}`), Delay: -time.Second}, ferrytype.ErrInvalidEvent},
		}
		for _, c := range cases {
			tx, commit, _ := h.Begin(b.ctx, t, b.store)
			_, err := b.ob.EnqueueTx(b.ctx, tx, ev("Good", "1", `{"ok":true}`), c.bad)
			require.ErrorIs(t, err, c.want, c.name)
			// Even if the caller commits anyway, nothing was written:
			// validation runs before the first statement.
			require.NoError(t, commit(), c.name)
		}
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New, "a batch with one bad event writes none of its events")
	})

	t.Run("SequencePerAggregate", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("B", "1", `{}`))
		b.enqueue(t, ev("C", "1", `{}`), ferry.Event{Type: "NoAggregate", Payload: json.RawMessage(`{}`)})
		msgs, _ := b.claim(t, 10, false)
		require.Len(t, msgs, 5)
		got := map[string][]int64{}
		for _, m := range msgs {
			got[m.AggregateID] = append(got[m.AggregateID], m.Sequence)
		}
		for k := range got {
			sort.Slice(got[k], func(i, j int) bool { return got[k][i] < got[k][j] })
		}
		require.Equal(t, map[string][]int64{"1": {1, 2, 3}, "2": {1}, "": {0}}, got)
	})

	t.Run("SkipSequenceWritesZero", func(t *testing.T) {
		b := setup(t, h)
		ob, err := ferry.NewOutbox(b.store, &ferry.OutboxConfig{SkipSequence: true})
		require.NoError(t, err)
		tx, commit, _ := h.Begin(b.ctx, t, b.store)
		_, err = ob.EnqueueTx(b.ctx, tx, ev("A", "1", `{}`), ev("B", "1", `{}`))
		require.NoError(t, err)
		require.NoError(t, commit())
		msgs, _ := b.claim(t, 10, false)
		require.Len(t, msgs, 2)
		for _, m := range msgs {
			require.Zero(t, m.Sequence)
			require.Equal(t, "1", m.AggregateID)
		}
	})

	t.Run("ConcurrentSequenceIsGapFree", func(t *testing.T) {
		b := setup(t, h)
		const writers, each = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					errs <- retryTx(b.ctx, func() error {
						tx, commit, rollback := h.Begin(b.ctx, t, b.store)
						if _, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", "hot", `{}`)); err != nil {
							_ = rollback()
							return err
						}
						return commit()
					})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		msgs, _ := b.claim(t, 1000, false)
		require.Len(t, msgs, writers*each)
		seen := map[int64]bool{}
		for _, m := range msgs {
			require.False(t, seen[m.Sequence], "sequence %d given twice", m.Sequence)
			seen[m.Sequence] = true
		}
		for i := int64(1); i <= writers*each; i++ {
			require.True(t, seen[i], "sequence %d missing", i)
		}
	})

	t.Run("DelayedEventWaits", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ferry.Event{Type: "Later", Payload: json.RawMessage(`{}`), Delay: time.Hour})
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.New)
		require.Zero(t, st.Ready)
	})

	t.Run("ClaimLeasesOnce", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		first, token := b.claim(t, 10, false)
		require.Len(t, first, 2)
		again, _ := b.claim(t, 10, false)
		require.Empty(t, again, "a leased row is not claimed again")
		n, err := b.store.MarkSent(b.ctx, token, ids(first))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		for _, m := range first {
			row := b.get(t, m.ID)
			require.Equal(t, ferrytype.StatusSent, row.Status)
			require.Empty(t, row.LeaseToken)
			require.False(t, row.SentAt.IsZero())
		}
	})

	t.Run("ClaimRespectsLimit", func(t *testing.T) {
		b := setup(t, h)
		for i := 0; i < 7; i++ {
			b.enqueue(t, ev("A", fmt.Sprint(i), `{}`))
		}
		msgs, _ := b.claim(t, 3, false)
		require.Len(t, msgs, 3)
	})

	t.Run("MarkSentNeedsTheLeaseToken", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`))
		msgs, token := b.claim(t, 10, false)
		n, err := b.store.MarkSent(b.ctx, "someone-else", ids(msgs))
		require.NoError(t, err)
		require.Zero(t, n, "a mark under another token changes nothing")
		require.Equal(t, ferrytype.StatusSending, b.get(t, msgs[0].ID).Status)
		n, err = b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("MarkFailedRetriesThenDies", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		msgs, token := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Error: "attempt 1: unknown: boom"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{id}}, res)
		row := b.get(t, id)
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Equal(t, "attempt 1: unknown: boom", row.LastError)
		require.Empty(t, row.LeaseToken)

		msgs, token = b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		require.Equal(t, id, msgs[0].ID, "the retry keeps the event id")
		require.Equal(t, 2, msgs[0].Attempt)
		res, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Dead: true, Error: "attempt 2: rejected"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Dead: []string{id}}, res)
		require.Equal(t, ferrytype.StatusDead, b.get(t, id).Status)
		again, _ := b.claim(t, 10, false)
		require.Empty(t, again, "DEAD rows are not claimed")
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Dead)
	})

	t.Run("RetryDelayComesFromTheDatabaseClock", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		_, token := b.claim(t, 10, false)
		_, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: token, Delay: time.Hour, Error: "x"}})
		require.NoError(t, err)
		row := b.get(t, id)
		require.WithinDuration(t, row.CreatedAt.Add(time.Hour), row.AvailableAt, 5*time.Minute)
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
	})

	t.Run("ExpiredLeaseIsSweptAndLateMarkIsFenced", func(t *testing.T) {
		b := setup(t, h)
		id := b.enqueue(t, ev("A", "1", `{}`))[0]
		oldToken := "old-lease"
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: oldToken, Lease: time.Millisecond})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		var leases []ferrystore.Lease
		waitFor(t, 10*time.Second, func() bool {
			leases, err = b.store.ExpiredLeases(b.ctx, 10)
			require.NoError(t, err)
			return len(leases) == 1
		})
		require.Equal(t, ferrystore.Lease{ID: id, Token: oldToken, Attempts: 1}, leases[0])
		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: oldToken, Error: "lease expired"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Retried: []string{id}}, res)

		msgs, newToken := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		require.Equal(t, 2, msgs[0].Attempt)
		// The old holder wakes up and reports its outcome: nothing changes.
		n, err := b.store.MarkSent(b.ctx, oldToken, []string{id})
		require.NoError(t, err)
		require.Zero(t, n)
		res, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: oldToken, Dead: true, Error: "late"}})
		require.NoError(t, err)
		require.Equal(t, ferrystore.MarkFailedResult{Fenced: []string{id}}, res)
		row := b.get(t, id)
		require.Equal(t, ferrytype.StatusSending, row.Status)
		require.Equal(t, newToken, row.LeaseToken)
		n, err = b.store.MarkSent(b.ctx, newToken, []string{id})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("ConcurrentClaimsNeverOverlap", func(t *testing.T) {
		b := setup(t, h)
		const total = 1200
		batch := make([]ferry.Event, 0, 100)
		for i := 0; i < total; i++ {
			batch = append(batch, ev("A", fmt.Sprint(i), `{}`))
			if len(batch) == cap(batch) {
				b.enqueue(t, batch...)
				batch = batch[:0]
			}
		}
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					token := fmt.Sprintf("w%d-%d", w, i)
					msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 25, Token: token, Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						seen[m.ID]++
					}
					mu.Unlock()
					if n, err := b.store.MarkSent(b.ctx, token, ids(msgs)); err != nil || n != int64(len(msgs)) {
						errs <- fmt.Errorf("mark sent: n=%d err=%v", n, err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, seen, total)
		for id, n := range seen {
			require.Equal(t, 1, n, "event %s claimed %d times", id, n)
		}
	})

	// Producers' transactions must not wait for relays, let alone
	// deadlock with them: a business transaction failing because a relay
	// was claiming would make the outbox a new source of errors. (InnoDB
	// under REPEATABLE READ does exactly that: the claim's locking scan
	// locks the gap where new events are inserted.)
	t.Run("ProducersNeverConflictWithClaims", func(t *testing.T) {
		b := setup(t, h)
		const producers, perProducer, claimers = 4, 150, 4
		var (
			wg, cw  sync.WaitGroup
			mu      sync.Mutex
			claimed = map[string]int{}
			done    = make(chan struct{})
		)
		errs := make(chan error, producers+claimers)
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; i < perProducer; i++ {
					tx, commit, rollback := b.h.Begin(b.ctx, t, b.store)
					if _, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", fmt.Sprintf("%d-%d", p, i), `{}`)); err != nil {
						_ = rollback()
						errs <- fmt.Errorf("producer %d: enqueue: %w", p, err)
						return
					}
					if err := commit(); err != nil {
						errs <- fmt.Errorf("producer %d: commit: %w", p, err)
						return
					}
				}
			}(p)
		}
		for c := 0; c < claimers; c++ {
			cw.Add(1)
			go func(c int) {
				defer cw.Done()
				for i := 0; ; i++ {
					token := fmt.Sprintf("c%d-%d", c, i)
					// Only a claim that starts after every producer
					// committed sees all their rows: a claim already
					// running may read an older snapshot.
					var last bool
					select {
					case <-done:
						last = true
					default:
					}
					msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: token, Lease: time.Minute})
					if err != nil {
						errs <- fmt.Errorf("claimer %d: %w", c, err)
						return
					}
					if len(msgs) == 0 {
						if last {
							return
						}
						continue
					}
					mu.Lock()
					for _, m := range msgs {
						claimed[m.ID]++
					}
					mu.Unlock()
					if _, err := b.store.MarkSent(b.ctx, token, ids(msgs)); err != nil {
						errs <- fmt.Errorf("claimer %d: mark sent: %w", c, err)
						return
					}
				}
			}(c)
		}
		wg.Wait()
		close(done) // claimers stop at their first empty claim from now on
		cw.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, claimed, producers*perProducer)
		for id, n := range claimed {
			require.Equal(t, 1, n, "event %s claimed %d times", id, n)
		}
	})

	t.Run("OrderedClaimWaitsForEarlierEvents", func(t *testing.T) {
		b := setup(t, h)
		a := b.enqueue(t, ev("Created", "A", `{}`), ev("Paid", "A", `{}`), ev("Shipped", "A", `{}`))
		bID := b.enqueue(t, ev("Created", "B", `{}`))[0]
		msgs, token := b.claim(t, 10, true)
		require.ElementsMatch(t, []string{a[0], bID}, ids(msgs), "only each aggregate's first pending event")
		again, _ := b.claim(t, 10, true)
		require.Empty(t, again, "A's second event waits while the first is SENDING")
		_, err := b.store.MarkSent(b.ctx, token, []string{a[0]})
		require.NoError(t, err)
		msgs, token = b.claim(t, 10, true)
		require.Equal(t, []string{a[1]}, ids(msgs))
		// A DEAD event holds back the rest of its aggregate.
		_, err = b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: a[1], Token: token, Dead: true, Error: "x"}})
		require.NoError(t, err)
		again, _ = b.claim(t, 10, true)
		require.Empty(t, again, "a DEAD event blocks its aggregate")
		unordered, _ := b.claim(t, 10, false)
		require.Equal(t, []string{a[2]}, ids(unordered), "unordered claims ignore order")
	})

	if h.LockRow != nil {
		t.Run("OrderedClaimSkipsPastALockedHead", func(t *testing.T) {
			b := setup(t, h)
			a := b.enqueue(t, ev("Created", "A", `{}`), ev("Paid", "A", `{}`))
			// Another relay is claiming A's first event right now: its row
			// is locked and still NEW. The second must not be claimed.
			release := h.LockRow(b.ctx, t, b.store, a[0])
			msgs, _ := b.claim(t, 10, true)
			release()
			require.Empty(t, msgs, "event 2 claimed while event 1 was being claimed")
			msgs, _ = b.claim(t, 10, true)
			require.Equal(t, []string{a[0]}, ids(msgs))
		})
	}

	t.Run("PurgeDeletesOnlyOldSentRowsInBatches", func(t *testing.T) {
		b := setup(t, h)
		for i := 0; i < 5; i++ {
			b.enqueue(t, ev("A", fmt.Sprint(i), `{}`))
		}
		msgs, token := b.claim(t, 3, false)
		_, err := b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		n, err := b.store.PurgeSent(b.ctx, time.Hour, 10)
		require.NoError(t, err)
		require.Zero(t, n, "rows sent just now are younger than an hour")
		// Once the database clock passes sent_at + 1ms, all three are
		// eligible; one call deletes no more than its limit.
		waitFor(t, 10*time.Second, func() bool {
			n, err = b.store.PurgeSent(b.ctx, time.Millisecond, 2)
			require.NoError(t, err)
			return n > 0
		})
		require.Equal(t, int64(2), n, "one batch deletes at most its limit")
		n, err = b.store.PurgeSent(b.ctx, time.Millisecond, 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.New, "pending rows are never purged")
	})

	t.Run("StatsMeasureTheOldestPendingEvent", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		var st ferrystore.Stats
		waitFor(t, 10*time.Second, func() bool {
			var err error
			st, err = b.store.Stats(b.ctx)
			require.NoError(t, err)
			return st.OldestPending > 0
		})
		require.Equal(t, int64(2), st.New)
		require.Equal(t, int64(2), st.Ready)
		require.Less(t, st.OldestPending, time.Hour)
		msgs, token := b.claim(t, 10, false)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.Sending)
		_, err = b.store.MarkSent(b.ctx, token, ids(msgs))
		require.NoError(t, err)
		st, err = b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.OldestPending, "nothing pending")
	})

	t.Run("GetUnknownEvent", func(t *testing.T) {
		b := setup(t, h)
		_, err := b.store.Get(b.ctx, "no-such-event")
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	})

	t.Run("Admin", func(t *testing.T) { exerciseAdmin(t, h) })
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	testsvc.WaitFor(t, d, cond, nil)
}

// retryTx retries fn on errors a concurrent writer may see (deadlock,
// serialization failure, busy database) a bounded number of times.
func retryTx(ctx context.Context, fn func() error) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = fn(); err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
	}
	return err
}

func retryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Deadlock") || strings.Contains(s, "deadlock") ||
		strings.Contains(s, "40001") || strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}
