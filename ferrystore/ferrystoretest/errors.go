package ferrystoretest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// classify classifies err with the store's Classifier.
func (b *bundle[TTx]) classify(t *testing.T, err error) error {
	t.Helper()
	return b.store.Classify(err)
}

// DuplicateEvent enqueues the same event id twice, in two committed
// transactions, and returns the second enqueue's error: a real unique-key
// violation of the store's database.
func DuplicateEvent[TTx any](t *testing.T, h Harness[TTx]) error {
	t.Helper()
	b := setup(t, h)
	row := ferrytype.Event{ID: "dup-" + time.Now().Format("150405.000000000"), Type: "A", AggregateID: "1",
		Payload: json.RawMessage(`{}`)}
	enqueue := func() error {
		tx, commit, rollback := h.Begin(b.ctx, t, b.store)
		if err := b.store.Enqueue(b.ctx, b.store.UnwrapTx(tx), []ferrytype.Event{row}, ferrystore.EnqueueOptions{}); err != nil {
			_ = rollback()
			return err
		}
		return commit()
	}
	require.NoError(t, enqueue())
	return enqueue()
}

// exerciseErrors checks that stores put real database errors in ferry's
// classes, keeping the driver's error in the chain.
func exerciseErrors[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("DuplicateKeyIsErrDuplicate", func(t *testing.T) {
		err := DuplicateEvent(t, h)
		require.ErrorIs(t, err, ferrytype.ErrDuplicate)
		require.NotErrorIs(t, err, ferrytype.ErrRetryable)
	})

	t.Run("MissingTableIsErrUndefinedTable", func(t *testing.T) {
		b := setup(t, h)
		_, err := b.admin(t).MissingEvents(b.ctx, ferrystore.MissingEventsQuery{Table: "ferry_no_such_table",
			KeyColumn: "id", TimeColumn: "created_at", EventType: "A", Window: time.Hour, Limit: 1})
		require.ErrorIs(t, err, ferrytype.ErrUndefinedTable)
		require.NotErrorIs(t, err, ferrytype.ErrRetryable)
	})

	t.Run("OtherErrorsHaveNoClass", func(t *testing.T) {
		b := setup(t, h)
		err := b.classify(t, errors.New("boom"))
		require.EqualError(t, err, "boom")
		require.NotErrorIs(t, err, ferrytype.ErrRetryable)
		require.NoError(t, b.classify(t, nil))
	})

	t.Run("DeadlockIsErrLockConflictAndRetryable", func(t *testing.T) {
		// SQLite serialises writers: no deadlock.
		needs(t, h.LockRow != nil, "LockRow", "no row locks to deadlock on")
		needs(t, h.Exec != nil, "Exec", "the rows are locked with SQL statements")
		b := setup(t, h)
		got := b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		touch := bind(b.store.Dialect(), "UPDATE "+quoteFor(b.store.Dialect(), b.store.Table())+
			" SET attempts = attempts + 1 WHERE event_id = ?")
		tx1, _, rollback1 := h.Begin(b.ctx, t, b.store)
		defer func() { _ = rollback1() }()
		tx2, _, rollback2 := h.Begin(b.ctx, t, b.store)
		defer func() { _ = rollback2() }()
		_, err := b.store.UnwrapTx(tx1).Exec(b.ctx, touch, got[0])
		require.NoError(t, err)
		_, err = b.store.UnwrapTx(tx2).Exec(b.ctx, touch, got[1])
		require.NoError(t, err)
		// Each now waits for the other's row: the database picks a victim.
		errc := make(chan error, 1)
		go func() {
			_, err := b.store.UnwrapTx(tx1).Exec(b.ctx, touch, got[1])
			if err != nil {
				_ = rollback1()
			}
			errc <- err
		}()
		_, err2 := b.store.UnwrapTx(tx2).Exec(b.ctx, touch, got[0])
		if err2 != nil {
			_ = rollback2()
		}
		err1 := <-errc
		victim := errors.Join(err1, err2)
		require.Error(t, victim, "one of the two transactions must lose")
		err = b.classify(t, victim)
		require.ErrorIs(t, err, ferrytype.ErrLockConflict)
		require.ErrorIs(t, err, ferrytype.ErrRetryable)
	})
}

// quoteFor quotes a table name for dialect.
func quoteFor(dialect, name string) string {
	if dialect == "mysql" {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}
