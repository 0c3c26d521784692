// Package ferrystoretest is the conformance suite every ferry store runs
// against a real database. A store's test file builds a Harness and calls
// Exercise.
package ferrystoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
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

func idsOfRows(rows []ferrystore.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func ids(msgs []ferrytype.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].ID
	}
	return out
}

// Exercise runs the conformance suite.
func Exercise[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("Schema", func(t *testing.T) { exerciseSchema(t, h) })
	t.Run("Enqueue", func(t *testing.T) { exerciseEnqueue(t, h) })
	t.Run("Claim", func(t *testing.T) { exerciseClaim(t, h) })
	t.Run("ClaimIDs", func(t *testing.T) { exerciseClaimIDs(t, h) })
	t.Run("Leases", func(t *testing.T) { exerciseLeases(t, h) })
	t.Run("ClaimsOf", func(t *testing.T) { exerciseClaimsOf(t, h) })
	t.Run("OrderedClaim", func(t *testing.T) { exerciseOrderedClaim(t, h) })
	t.Run("Marks", func(t *testing.T) { exerciseMarks(t, h) })
	t.Run("Sweeper", func(t *testing.T) { exerciseSweeper(t, h) })
	t.Run("Purge", func(t *testing.T) { exercisePurge(t, h) })
	t.Run("Stats", func(t *testing.T) { exerciseStats(t, h) })
	t.Run("Ready", func(t *testing.T) { exerciseReady(t, h) })
	t.Run("Pending", func(t *testing.T) { exercisePending(t, h) })
	t.Run("Transitions", func(t *testing.T) { exerciseTransitions(t, h) })
	t.Run("Errors", func(t *testing.T) { exerciseErrors(t, h) })
	t.Run("Admin", func(t *testing.T) { exerciseAdmin(t, h) })
	t.Run("AdminPages", func(t *testing.T) { exercisePages(t, h) })
	t.Run("PoisonRows", func(t *testing.T) { exercisePoison(t, h) })
	t.Run("Relays", func(t *testing.T) { exerciseRelays(t, h) })
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, d, cond, nil)
}

// retryTx retries fn on errors a concurrent writer may see (deadlock,
// serialization failure, busy database: ferrytype.ErrRetryable once the
// store classified them) a bounded number of times.
func retryTx(ctx context.Context, s ferrystore.Store, fn func() error) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = s.Classify(fn()); err == nil || !errors.Is(err, ferrytype.ErrRetryable) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
	}
	return err
}
