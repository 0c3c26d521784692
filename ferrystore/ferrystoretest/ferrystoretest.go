// Package ferrystoretest is the conformance suite every ferry store runs
// against a real database (or ferrymem's in-memory one). A store's test
// file builds a Harness and calls Exercise, ExerciseInbox and
// ExerciseKeys.
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
//
// The fields after Begin are capabilities of the store's database that
// some cases need: a case whose capability the harness lacks is skipped
// (or, within a case, the checks that need it), with a message naming the
// field. The SQL stores' harnesses set Exec, and LockRow but on SQLite;
// the in-memory store's (ferrymem), which runs no SQL, sets InsertRaw,
// ReadsBesideWriters and Schemaless.
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
	// databases without row locks (SQLite), or whose claims leave no row
	// locked and still NEW (ferrymem, whose claims are atomic): the cases
	// of a claim in progress, and of a deadlock, are skipped.
	LockRow func(ctx context.Context, t *testing.T, s ferrystore.Store, id string) (release func())
	// Exec runs one SQL statement on the database of s, outside the
	// outbox (the reconciliation cases create a business table with it;
	// others change the migration table, or run a migration's statements).
	// Nil for a store whose database runs no SQL (ferrymem): those cases
	// are skipped.
	Exec func(ctx context.Context, t *testing.T, s ferrystore.Store, query string)
	// InsertRaw writes r into the outbox table of s as a hand-written
	// INSERT (or an older writer) leaves it: the columns r names hold r's
	// values as they are, unchecked, the others their defaults. The cases
	// of malformed rows and of rows with chosen creation times need it.
	// Nil: the suite writes r with Exec, as an INSERT of r's values as SQL
	// text literals; nil with Exec nil skips those cases.
	InsertRaw func(ctx context.Context, t *testing.T, s ferrystore.Store, r RawRow)
	// ReadsBesideWriters says that the store's reads answer while a
	// caller's transaction that wrote to the table is open, for a harness
	// without LockRow (ferrymem). With LockRow set it is implied (MySQL,
	// PostgreSQL); on SQLite a reader waits for the one writer's
	// connection. The case of an uncommitted event needs it.
	ReadsBesideWriters bool
	// Schemaless says that the store keeps no SQL schema (ferrymem): its
	// Migrations are empty, Migrate does nothing and CheckSchema reports
	// the table current. The suite checks that instead of reading the
	// migrations.
	Schemaless bool
}

// RawRow is an outbox row written by hand (Harness.InsertRaw).
type RawRow struct {
	// ID is the row's event_id.
	ID string
	// Columns name the columns the row sets besides event_id; Values hold
	// their values as text, in the same order.
	Columns, Values []string
	// Unchecked writes the row with the database's CHECK constraints off,
	// as a session that disabled them would.
	Unchecked bool
}

// rawWriter returns the harness's way of writing raw rows: InsertRaw, or
// an INSERT run with Exec; nil when it has neither.
func rawWriter[TTx any](h Harness[TTx]) func(ctx context.Context, t *testing.T, s ferrystore.Store, r RawRow) {
	switch {
	case h.InsertRaw != nil:
		return h.InsertRaw
	case h.Exec != nil:
		return func(ctx context.Context, t *testing.T, s ferrystore.Store, r RawRow) {
			h.Exec(ctx, t, s, insertSQL(s, r))
		}
	}
	return nil
}

// needs skips t, naming the capability (a Harness field) the case lacks
// and what it needs it for, when has is false.
func needs(t *testing.T, has bool, capability, what string) {
	t.Helper()
	if !has {
		t.Skipf("the harness has no %s: %s", capability, what)
	}
}

// without logs that the rest of a case is left out, for want of the
// capability.
func without(t *testing.T, capability, what string) {
	t.Helper()
	t.Logf("the harness has no %s: not checked: %s", capability, what)
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
	t.Run("PendingWindow", func(t *testing.T) { exerciseWindow(t, h) })
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
