package ferrymem_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
)

// clock is a database clock a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	ctx    context.Context
	clock  *clock
	db     *ferrymem.DB
	store  *ferrymem.Store
	inbox  *ferrymem.Inbox
	outbox *ferry.Outbox[*ferrymem.Tx]
}

// setup returns a database whose clock starts in 2001, far from the
// process's, with an outbox table and the inbox tables.
func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c := &clock{now: time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)}
	db := ferrymem.NewDB(&ferrymem.DBConfig{Clock: c.Now})
	store, err := ferrymem.New(db, nil)
	require.NoError(t, err)
	inbox, err := ferrymem.NewInbox(db, nil)
	require.NoError(t, err)
	outbox, err := ferry.NewOutbox(store, nil)
	require.NoError(t, err)
	return &bundle{ctx: ctx, clock: c, db: db, store: store, inbox: inbox, outbox: outbox}
}

func (b *bundle) begin(t *testing.T) *ferrymem.Tx {
	t.Helper()
	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	return tx
}

// enqueue writes events in a committed transaction.
func (b *bundle) enqueue(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	tx := b.begin(t)
	ids, err := b.outbox.EnqueueTx(b.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return ids
}

func event(typ, aggregate string) ferry.Event {
	return ferry.Event{AggregateType: "order", AggregateID: aggregate, Type: typ, Payload: json.RawMessage(`{}`)}
}

func marker(key, eventID string) ferrystore.Marker {
	return ferrystore.Marker{Consumer: "points", Key: key, EventID: eventID, Fields: json.RawMessage(`{}`), Outcome: "applied"}
}

func TestTransactions(t *testing.T) {
	t.Run("WritesAreSeenOnlyAfterCommit", func(t *testing.T) {
		b := setup(t)
		tx := b.begin(t)
		ran := 0
		require.NoError(t, tx.OnCommit(func() { ran++ }))
		ids, err := b.outbox.EnqueueTx(b.ctx, tx, event("OrderPaid", "1"))
		require.NoError(t, err)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(tx), marker("k", "e1")))
		_, err = b.store.Get(b.ctx, ids[0])
		require.ErrorIs(t, err, ferrytype.ErrNotFound, "not before the commit")
		_, err = b.inbox.GetMarker(b.ctx, "points", "k")
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
		require.Zero(t, ran)

		require.NoError(t, tx.Commit())
		require.Equal(t, 1, ran, "the commit runs its functions")
		row, err := b.store.Get(b.ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Equal(t, b.clock.Now(), row.CreatedAt, "stamped by the database clock")
		m, err := b.inbox.GetMarker(b.ctx, "points", "k")
		require.NoError(t, err)
		require.Equal(t, "e1", m.EventID)

		require.ErrorIs(t, tx.Commit(), ferrymem.ErrTxDone)
		require.ErrorIs(t, tx.Rollback(), ferrymem.ErrTxDone)
		require.ErrorIs(t, tx.OnCommit(func() {}), ferrymem.ErrTxDone)
		_, err = b.outbox.EnqueueTx(b.ctx, tx, event("OrderPaid", "1"))
		require.ErrorIs(t, err, ferrymem.ErrTxDone)
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		b := setup(t)
		tx := b.begin(t)
		ran := false
		require.NoError(t, tx.OnCommit(func() { ran = true }))
		_, err := b.outbox.EnqueueTx(b.ctx, tx, event("OrderPaid", "1"))
		require.NoError(t, err)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(tx), marker("k", "e1")))
		require.NoError(t, tx.Rollback())
		require.False(t, ran)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New)
		n, err := b.inbox.MarkerCount(b.ctx, "")
		require.NoError(t, err)
		require.Zero(t, n)
		// The sequence number was rolled back too.
		b.enqueue(t, event("OrderPaid", "1"))
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "t", Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, int64(1), msgs[0].Sequence)
	})

	t.Run("TheEndOfBeginsContextRollsBack", func(t *testing.T) {
		b := setup(t)
		ctx, cancel := context.WithCancel(b.ctx)
		tx, err := b.db.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(tx), marker("k", "e1")))
		cancel()
		// The marker's lock is released: another transaction takes the key.
		other := b.begin(t)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(other), marker("k", "e2")))
		require.NoError(t, other.Commit())
		require.ErrorIs(t, tx.Commit(), ferrymem.ErrTxDone)
		m, err := b.inbox.GetMarker(b.ctx, "points", "k")
		require.NoError(t, err)
		require.Equal(t, "e2", m.EventID)

		_, err = b.db.Begin(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("TheExecutorRunsNoSQL", func(t *testing.T) {
		b := setup(t)
		tx := b.begin(t)
		defer tx.Rollback()
		ex := b.store.UnwrapTx(tx)
		_, err := ex.Exec(b.ctx, "UPDATE account SET points = points + 1")
		require.ErrorContains(t, err, "ferrymem runs no SQL")
		_, err = ex.Query(b.ctx, "SELECT 1")
		require.ErrorContains(t, err, "ferrymem runs no SQL")

		err = b.store.Enqueue(b.ctx, ferrystore.SQL(nil), []ferrytype.Event{{ID: "x", Type: "T", Payload: []byte(`{}`)}},
			ferrystore.EnqueueOptions{})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "another store's executor")
		other, err := ferrymem.NewDB(nil).Begin(b.ctx)
		require.NoError(t, err)
		defer other.Rollback()
		err = b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(other), marker("k", "e1"))
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "a transaction of another database")
		require.ErrorContains(t, err, "another ferrymem.DB")
	})

	t.Run("AnInboxOperationEnqueuesItsFollowUp", func(t *testing.T) {
		b := setup(t)
		in, err := ferry.NewInbox(b.inbox, &ferry.InboxConfig{Consumer: "orders"})
		require.NoError(t, err)
		follow := func(ctx context.Context, tx *ferrymem.Tx) error {
			_, err := b.outbox.EnqueueTx(ctx, tx, event("PointsAwarded", "1"))
			return err
		}
		op := ferry.Operation{Key: "order:1:paid", EventID: "e1", Fields: map[string]int{"amount": 1}}
		boom := errors.New("boom")
		_, err = in.Process(b.ctx, op, func(ctx context.Context, tx *ferrymem.Tx) error {
			require.NoError(t, follow(ctx, tx))
			return boom
		})
		require.ErrorIs(t, err, boom)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New, "the failed operation's event is gone with its marker")

		res, err := in.Process(b.ctx, op, follow)
		require.NoError(t, err)
		require.Equal(t, ferry.InboxApplied, res.Outcome)
		st, err = b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.New, "the event committed with the marker")
	})
}

// expired is a context that ends soon: an operation given it and still
// waiting then was waiting for a lock.
func expired(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func TestLocks(t *testing.T) {
	t.Run("ASecondMarkerWaitsAndIsADuplicateOnceTheFirstCommits", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(first), marker("k", "e1")))
		err := b.inbox.InsertMarker(expired(t, b.ctx), b.inbox.UnwrapTx(second), marker("k", "e2"))
		require.ErrorIs(t, err, context.DeadlineExceeded, "it waits for the first")

		done := make(chan error, 1)
		go func() { done <- b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(second), marker("k", "e2")) }()
		require.NoError(t, first.Commit())
		err = <-done
		require.ErrorIs(t, b.inbox.Classify(err), ferrytype.ErrDuplicate)
		require.NotErrorIs(t, err, ferrytype.ErrRetryable)
		require.NoError(t, second.Rollback())
	})

	t.Run("ASecondMarkerGoesOnOnceTheFirstRollsBack", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		require.NoError(t, b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(first), marker("k", "e1")))
		done := make(chan error, 1)
		go func() { done <- b.inbox.InsertMarker(b.ctx, b.inbox.UnwrapTx(second), marker("k", "e2")) }()
		require.NoError(t, first.Rollback())
		require.NoError(t, <-done)
		require.NoError(t, second.Commit())
		m, err := b.inbox.GetMarker(b.ctx, "points", "k")
		require.NoError(t, err)
		require.Equal(t, "e2", m.EventID)
	})

	t.Run("AnEventIDInsertedByAnOpenTransactionWaits", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		ev := ferry.Event{ID: "evt-1", Type: "T", Payload: json.RawMessage(`{}`)}
		_, err := b.outbox.EnqueueTx(b.ctx, first, ev)
		require.NoError(t, err)
		_, err = b.outbox.EnqueueTx(expired(t, b.ctx), second, ev)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		done := make(chan error, 1)
		go func() { _, err := b.outbox.EnqueueTx(b.ctx, second, ev); done <- err }()
		require.NoError(t, first.Commit())
		require.ErrorIs(t, <-done, ferrytype.ErrDuplicate)
		require.NoError(t, second.Rollback())
	})

	t.Run("EnqueuersOfOneAggregateAreSerialised", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		_, err := b.outbox.EnqueueTx(b.ctx, first, event("Created", "1"))
		require.NoError(t, err)
		_, err = b.outbox.EnqueueTx(expired(t, b.ctx), second, event("Paid", "1"))
		require.ErrorIs(t, err, context.DeadlineExceeded, "the aggregate's sequence is locked")
		_, err = b.outbox.EnqueueTx(b.ctx, second, event("Created", "2"))
		require.NoError(t, err, "another aggregate's is not")
		done := make(chan error, 1)
		go func() { _, err := b.outbox.EnqueueTx(b.ctx, second, event("Paid", "1")); done <- err }()
		require.NoError(t, first.Commit())
		require.NoError(t, <-done)
		require.NoError(t, second.Commit())
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "t", Lease: time.Minute})
		require.NoError(t, err)
		seq := map[string]int64{}
		for _, m := range msgs {
			seq[m.AggregateID+" "+m.Type] = m.Sequence
		}
		require.Equal(t, map[string]int64{"1 Created": 1, "1 Paid": 2, "2 Created": 1}, seq)
	})

	t.Run("ADeadlockFailsOneTransactionRetryably", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		_, err := b.outbox.EnqueueTx(b.ctx, first, event("A", "a"))
		require.NoError(t, err)
		_, err = b.outbox.EnqueueTx(b.ctx, second, event("B", "b"))
		require.NoError(t, err)
		// Each now asks for the other's aggregate.
		errs := make(chan error, 2)
		cross := func(tx *ferrymem.Tx, aggregate string) {
			_, err := b.outbox.EnqueueTx(b.ctx, tx, event("X", aggregate))
			if err != nil {
				_ = tx.Rollback()
			} else {
				err = tx.Commit()
			}
			errs <- err
		}
		go cross(first, "b")
		go cross(second, "a")
		err1, err2 := <-errs, <-errs
		victim := errors.Join(err1, err2)
		require.Error(t, victim, "one of the two must lose")
		require.False(t, err1 != nil && err2 != nil, "only one: %v", victim)
		require.ErrorIs(t, victim, ferrytype.ErrLockConflict)
		require.ErrorIs(t, victim, ferrytype.ErrRetryable)
		require.ErrorContains(t, victim, "deadlock")
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), st.New, "the winner's two events")
	})

	t.Run("AVersionStaysLockedUntilTheTransactionEnds", func(t *testing.T) {
		b := setup(t)
		first, second := b.begin(t), b.begin(t)
		prev, moved, err := b.inbox.AdvanceVersion(b.ctx, b.inbox.UnwrapTx(first), "view", "order:1", 2, false)
		require.NoError(t, err)
		require.Equal(t, [2]any{int64(0), true}, [2]any{prev, moved})
		_, _, err = b.inbox.AdvanceVersion(expired(t, b.ctx), b.inbox.UnwrapTx(second), "view", "order:1", 3, false)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, first.Commit())
		prev, moved, err = b.inbox.AdvanceVersion(b.ctx, b.inbox.UnwrapTx(second), "view", "order:1", 2, false)
		require.NoError(t, err)
		require.Equal(t, [2]any{int64(2), false}, [2]any{prev, moved}, "the committed version")
		require.NoError(t, second.Rollback())
	})
}

func TestStore(t *testing.T) {
	t.Run("RowsEnqueueTxWouldRefuseAreClaimedDead", func(t *testing.T) {
		b := setup(t)
		tx := b.begin(t)
		bad := []ferrytype.Event{
			{ID: "no-type", Payload: []byte(`{}`)},
			{ID: "not-json", Type: "T", Payload: []byte(`nope`)},
			{ID: "empty-header", Type: "T", Payload: []byte(`{}`), Headers: map[string]string{"": "x"}},
			{ID: "good", Type: "T", Payload: []byte(`{}`)},
		}
		require.NoError(t, b.store.Enqueue(b.ctx, b.store.UnwrapTx(tx), bad, ferrystore.EnqueueOptions{}))
		require.NoError(t, tx.Commit())
		reported := map[string]error{}
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "t", Lease: time.Minute,
			Malformed: func(id string, reason error) { reported[id] = reason }})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, "good", msgs[0].ID)
		for id, want := range map[string]string{"no-type": "event_type: empty", "not-json": "payload: not valid JSON",
			"empty-header": "headers: a header name is empty"} {
			require.ErrorIs(t, reported[id], ferrytype.ErrMalformedRow, id)
			require.ErrorContains(t, reported[id], want, id)
			row, err := b.store.Get(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusDead, row.Status, id)
			require.Contains(t, row.LastError, want, id)
			require.Contains(t, row.Malformed, want, id)
		}
	})

	t.Run("TheClockEndsLeasesAndDelays", func(t *testing.T) {
		b := setup(t)
		id := b.enqueue(t, event("A", "1"))[0]
		_, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: "t1", Lease: time.Minute})
		require.NoError(t, err)
		expired, err := b.store.ExpiredClaims(b.ctx, 10)
		require.NoError(t, err)
		require.Empty(t, expired)
		b.clock.Advance(time.Minute + time.Millisecond)
		expired, err = b.store.ExpiredClaims(b.ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []ferrystore.Claimed{{ID: id, Token: "t1", Attempts: 1, Destination: "A"}}, expired)

		res, err := b.store.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: "t1", Delay: time.Hour, Error: "lease expired"}})
		require.NoError(t, err)
		require.Equal(t, []string{id}, res.Retried)
		ready, err := b.store.Ready(b.ctx)
		require.NoError(t, err)
		require.False(t, ready)
		b.clock.Advance(time.Hour)
		ready, err = b.store.Ready(b.ctx)
		require.NoError(t, err)
		require.True(t, ready, "an hour later by the database clock")
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, time.Hour+time.Minute+time.Millisecond, st.OldestPending)
	})

	t.Run("RelayTimesAreConvertedToTheReadersClock", func(t *testing.T) {
		b := setup(t) // the database clock says 2001
		require.NoError(t, b.store.Beat(b.ctx, ferrystore.RelayBeat{ID: "killed"}))
		b.clock.Advance(48 * time.Hour)
		require.NoError(t, b.store.Beat(b.ctx, ferrystore.RelayBeat{ID: "alive"}))
		beats, err := b.store.Relays(b.ctx)
		require.NoError(t, err)
		require.Len(t, beats, 2)
		require.WithinDuration(t, time.Now(), beats[0].LastSeen, time.Minute, "alive beat just now")
		require.WithinDuration(t, time.Now().Add(-48*time.Hour), beats[1].LastSeen, time.Minute, "killed, two days ago")
		n, err := b.store.PruneRelays(b.ctx, 24*time.Hour, "")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		st, held, err := b.store.AcquireLease(b.ctx, ferrystore.LeaseMaintenance, "alive", "", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		require.WithinDuration(t, time.Now().Add(time.Minute), st.LeaseUntil, 10*time.Second)
		b.clock.Advance(2 * time.Minute)
		_, held, err = b.store.AcquireLease(b.ctx, ferrystore.LeaseMaintenance, "next", "", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the lease ended by the database clock")
	})

	t.Run("ListenRingsAfterACommitWithEvents", func(t *testing.T) {
		b := setup(t)
		ctx, cancel := context.WithCancel(b.ctx)
		rang := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- b.store.Listen(ctx, func() {
				select {
				case rang <- struct{}{}:
				default:
				}
			})
		}()
		// The listener is called before Commit returns: the first commit
		// after Listen is in place rings it.
		deadline := time.Now().Add(10 * time.Second)
		for heard := false; !heard; {
			require.True(t, time.Now().Before(deadline), "Listen never rang")
			b.enqueue(t, event("A", "1"))
			select {
			case <-rang:
				heard = true
			default:
			}
		}
		require.NoError(t, b.begin(t).Commit())
		require.Empty(t, rang, "a commit without events does not ring")
		b.enqueue(t, event("A", "1"))
		require.Len(t, rang, 1)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})

	t.Run("TableNamesAreValidatedAsInSQL", func(t *testing.T) {
		_, err := ferrymem.New(ferrymem.NewDB(nil), &ferrymem.Config{Table: "outbox; drop"})
		require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
		_, err = ferrymem.NewInbox(ferrymem.NewDB(nil), &ferrymem.InboxConfig{MarkerTable: "1markers"})
		require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
		require.ErrorContains(t, err, "marker table")
		_, err = ferrymem.New(nil, nil)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	})

	t.Run("StoresOnOneTableShareItsRows", func(t *testing.T) {
		b := setup(t)
		b.enqueue(t, event("A", "1"))
		same, err := ferrymem.New(b.db, &ferrymem.Config{Table: ferrymem.DefaultTable})
		require.NoError(t, err)
		other, err := ferrymem.New(b.db, &ferrymem.Config{Table: "other_outbox"})
		require.NoError(t, err)
		for s, want := range map[*ferrymem.Store]int64{same: 1, other: 0} {
			st, err := s.Stats(b.ctx)
			require.NoError(t, err)
			require.Equal(t, want, st.New, s.Table())
		}
	})
}
