package ferrystoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// InboxHarness adapts one inbox store to the suite.
type InboxHarness[TTx any] struct {
	// New returns a migrated inbox store on fresh tables, dropped when t
	// ends, and a function that runs one statement on its database
	// outside any transaction (for the business tables of the tests); the
	// function may be nil when Ledger is set.
	New func(t *testing.T) (ferrystore.InboxDriver[TTx], func(query string, args ...any) error)
	// Ledger, when set, returns the business data of one case, fresh, on
	// the database of s: for a store whose database runs no SQL
	// (ferrymem). Nil: the suite keeps it in SQL tables of the store's
	// database, created with New's function and written through the
	// store's transactions (UnwrapTx).
	Ledger func(t *testing.T, s ferrystore.InboxDriver[TTx]) Ledger[TTx]
	// ConcurrentKeys is the number of keys the concurrency test delivers
	// from 16 goroutines at once. Default 1000.
	ConcurrentKeys int
}

type inboxBundle[TTx any] struct {
	ctx    context.Context
	store  ferrystore.InboxDriver[TTx]
	ledger Ledger[TTx] // the business data
}

// bind rewrites ? placeholders for the store's dialect.
func bind(dialect, q string) string { return sqlstore.Rebind(dialect, q) }

func setupInbox[TTx any](t *testing.T, h InboxHarness[TTx]) *inboxBundle[TTx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	s, exec := h.New(t)
	b := &inboxBundle[TTx]{ctx: ctx, store: s}
	if h.Ledger != nil {
		b.ledger = h.Ledger(t, s)
	} else {
		b.ledger = newSQLLedger(t, s, exec)
	}
	return b
}

// open creates user's account with 0 points.
func (b *inboxBundle[TTx]) open(t *testing.T, user int64) {
	t.Helper()
	require.NoError(t, b.ledger.Open(b.ctx, user))
}

func (b *inboxBundle[TTx]) inbox(t *testing.T, consumer string, mod ...func(*ferry.InboxConfig)) *ferry.Inbox[TTx] {
	t.Helper()
	cfg := &ferry.InboxConfig{Consumer: consumer}
	for _, m := range mod {
		m(cfg)
	}
	in, err := ferry.NewInbox(b.store, cfg)
	require.NoError(t, err)
	return in
}

// award is the seed's business write: add amount points to user, checking
// that the account exists.
func (b *inboxBundle[TTx]) award(user, amount int64) func(ctx context.Context, tx TTx) error {
	return func(ctx context.Context, tx TTx) error {
		n, err := b.ledger.Add(ctx, tx, user, amount)
		if err != nil {
			return err
		}
		return ferry.ExpectAffected(n, 1)
	}
}

func (b *inboxBundle[TTx]) points(t *testing.T, user int64) int64 {
	t.Helper()
	p, found, err := b.ledger.Points(b.ctx, user)
	require.NoError(t, err)
	require.True(t, found, "account %d exists", user)
	return p
}

type award struct {
	UserID int64 `json:"user_id"`
	Amount int64 `json:"amount"`
}

// ExerciseInbox runs the inbox conformance suite.
func ExerciseInbox[TTx any](t *testing.T, h InboxHarness[TTx]) {
	if h.ConcurrentKeys == 0 {
		h.ConcurrentKeys = 1000
	}

	t.Run("SeedScenario", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		in := b.inbox(t, "points-award")
		op := ferry.Operation{Key: "order:42:paid", EventID: "event-001", Fields: award{7, 10}}

		// First delivery: marker and points commit together.
		res, err := in.Process(b.ctx, op, b.award(7, 10))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxApplied, res.Outcome)
		require.Equal(t, int64(10), b.points(t, 7))

		// Redelivery, re-wrapped with another event id: a duplicate.
		var ran atomic.Int64
		op.EventID = "event-002"
		res, err = in.Process(b.ctx, op, func(ctx context.Context, tx TTx) error { ran.Add(1); return nil })
		require.NoError(t, err)
		require.Equal(t, ferry.InboxDuplicate, res.Outcome)
		require.Equal(t, "event-001", res.AppliedEventID)
		require.Zero(t, ran.Load(), "a duplicate never runs the business function")
		require.Equal(t, int64(10), b.points(t, 7))

		// Same key, another amount: a conflict, recorded, never a success.
		op.EventID, op.Fields = "event-003", award{7, 20}
		res, err = in.Process(b.ctx, op, b.award(7, 20))
		require.ErrorIs(t, err, ferry.ErrConflict)
		require.ErrorIs(t, err, ferrytype.ErrPoison, "a conflict parks the delivery")
		require.Equal(t, ferry.InboxConflict, res.Outcome)
		require.Equal(t, int64(10), b.points(t, 7))
		c, err := b.store.GetConflict(b.ctx, res.ConflictID)
		require.NoError(t, err)
		require.Equal(t, "points-award", c.Consumer)
		require.Equal(t, "order:42:paid", c.Key)
		require.Equal(t, "event-001", c.Stored.EventID)
		require.Equal(t, "event-003", c.Incoming.EventID)
		require.JSONEq(t, `{"amount":10,"user_id":7}`, string(c.Stored.Fields))
		require.JSONEq(t, `{"amount":20,"user_id":7}`, string(c.Incoming.Fields))
		require.Equal(t, "OPEN", c.Status)
		require.Equal(t, int64(1), c.Occurrences)
		// Seen again: the same conflict, counted.
		res2, err := in.Process(b.ctx, op, b.award(7, 20))
		require.ErrorIs(t, err, ferry.ErrConflict)
		require.Equal(t, res.ConflictID, res2.ConflictID)
		c, err = b.store.GetConflict(b.ctx, res.ConflictID)
		require.NoError(t, err)
		require.Equal(t, int64(2), c.Occurrences)

		// Missing account: the effect check rolls everything back.
		res, err = in.Process(b.ctx, ferry.Operation{Key: "order:43:paid", EventID: "event-004", Fields: award{8, 10}}, b.award(8, 10))
		require.ErrorIs(t, err, ferry.ErrNoEffect)
		require.Zero(t, res.Outcome)
		_, err = b.store.GetMarker(b.ctx, "points-award", "order:43:paid")
		require.ErrorIs(t, err, ferrytype.ErrNotFound, "no marker without the effect")
		n, err := b.store.MarkerCount(b.ctx, "points-award")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("FieldsCompareCanonically", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		in := b.inbox(t, "points-award")
		_, err := in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e1", Fields: map[string]any{"user_id": 7, "amount": 10}}, b.award(7, 10))
		require.NoError(t, err)
		res, err := in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e2", Fields: json.RawMessage(`{"amount": 10.0, "user_id": 7}`)}, b.award(7, 10))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxDuplicate, res.Outcome)
	})

	t.Run("EachConsumerHasItsOwnMarkers", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		op := ferry.Operation{Key: "order:42:paid", EventID: "e1", Fields: award{7, 10}}
		for _, consumer := range []string{"points-award", "points-audit"} {
			res, err := b.inbox(t, consumer).Process(b.ctx, op, b.award(7, 10))
			require.NoError(t, err)
			require.Equal(t, ferry.InboxApplied, res.Outcome, consumer)
			res, err = b.inbox(t, consumer).Process(b.ctx, op, b.award(7, 10))
			require.NoError(t, err)
			require.Equal(t, ferry.InboxDuplicate, res.Outcome, consumer)
		}
		require.Equal(t, int64(20), b.points(t, 7), "two consumers, one effect each")
	})

	t.Run("BusinessErrorRollsBackTheMarker", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		in := b.inbox(t, "points-award")
		boom := errors.New("boom")
		op := ferry.Operation{Key: "k", EventID: "e1", Fields: award{7, 10}}
		_, err := in.Process(b.ctx, op, func(ctx context.Context, tx TTx) error {
			if err := b.award(7, 10)(ctx, tx); err != nil {
				return err
			}
			return boom // after the write: it must roll back too
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, int64(0), b.points(t, 7))
		res, err := in.Process(b.ctx, op, b.award(7, 10))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxApplied, res.Outcome, "the retry applies it")
		require.Equal(t, int64(10), b.points(t, 7))
	})

	t.Run("ConcurrentDeliveriesApplyOnce", func(t *testing.T) {
		b := setupInbox(t, h)
		keys := h.ConcurrentKeys
		b.open(t, 7)
		// The effect log has no unique key: a second effect would show.
		in := b.inbox(t, "points-award")
		var applied, duplicates atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				order := rand.Perm(keys)
				for _, k := range order {
					key := fmt.Sprintf("order:%d:paid", k)
					res, err := in.Process(b.ctx, ferry.Operation{Key: key, EventID: fmt.Sprintf("e-%d-%d", g, k), Fields: award{7, 1}},
						func(ctx context.Context, tx TTx) error {
							if err := b.ledger.Log(ctx, tx, key); err != nil {
								return err
							}
							return b.award(7, 1)(ctx, tx)
						})
					if err != nil {
						errs <- fmt.Errorf("key %s: %w", key, err)
						return
					}
					switch res.Outcome {
					case ferry.InboxApplied:
						applied.Add(1)
					case ferry.InboxDuplicate:
						duplicates.Add(1)
					default:
						errs <- fmt.Errorf("key %s: outcome %s", key, res.Outcome)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(keys), applied.Load(), "exactly one effect per key")
		require.Equal(t, int64(keys*15), duplicates.Load())
		require.Equal(t, int64(keys), b.points(t, 7))
		n, err := b.store.MarkerCount(b.ctx, "points-award")
		require.NoError(t, err)
		require.Equal(t, int64(keys), n)
		total, distinct, err := b.ledger.Logged(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(keys), total, "no effect applied twice")
		require.Equal(t, int64(keys), distinct, "no key lost")
	})

	t.Run("VersionGuardEndsInTheNewestState", func(t *testing.T) {
		b := setupInbox(t, h)
		const versions = 30
		b.open(t, 1)
		in := b.inbox(t, "order-view")
		setState := func(v int64) func(ctx context.Context, tx TTx) error {
			return func(ctx context.Context, tx TTx) error {
				n, err := b.ledger.Set(ctx, tx, 1, v)
				if err != nil {
					return err
				}
				return ferry.ExpectAffected(n, 1)
			}
		}
		var applied, stale int
		for _, i := range rand.Perm(versions) {
			v := int64(i + 1)
			res, err := in.Process(b.ctx, ferry.Operation{Key: fmt.Sprintf("order:1:v%d", v), EventID: fmt.Sprint(v),
				Fields: map[string]int64{"version": v}, Aggregate: "order:1", Version: v, Guard: ferry.GuardNewer}, setState(v))
			require.NoError(t, err)
			switch res.Outcome {
			case ferry.InboxApplied:
				applied++
			case ferry.InboxStale:
				stale++
				require.Greater(t, res.CurrentVersion, v)
			}
		}
		require.Equal(t, int64(versions), b.points(t, 1), "the newest version wins whatever the arrival order")
		require.Equal(t, versions, applied+stale)
		require.Positive(t, stale, "a shuffle of %d versions leaves some stale", versions)
		// A stale event redelivered is a duplicate of its recorded no-op.
		res, err := in.Process(b.ctx, ferry.Operation{Key: "order:1:v1", EventID: "1", Fields: map[string]int64{"version": 1},
			Aggregate: "order:1", Version: 1, Guard: ferry.GuardNewer}, setState(1))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxDuplicate, res.Outcome)
		require.Equal(t, int64(versions), b.points(t, 1))
	})

	t.Run("ContiguousOrderWaitsForTheGap", func(t *testing.T) {
		b := setupInbox(t, h)
		const versions = 9 // 2 digits each: the encoding fits an int64
		b.open(t, 1)
		in := b.inbox(t, "order-ledger")
		// points = points*100 + v: the final value encodes the order of
		// application.
		apply := func(v int64) func(ctx context.Context, tx TTx) error {
			return func(ctx context.Context, tx TTx) error {
				n, err := b.ledger.Append(ctx, tx, 1, v%100)
				if err != nil {
					return err
				}
				return ferry.ExpectAffected(n, 1)
			}
		}
		pending := rand.Perm(versions)
		gaps := 0
		for len(pending) > 0 {
			i := pending[0]
			pending = pending[1:]
			v := int64(i + 1)
			res, err := in.Process(b.ctx, ferry.Operation{Key: fmt.Sprintf("order:1:v%d", v), EventID: fmt.Sprint(v),
				Fields: map[string]int64{"v": v}, Aggregate: "order:1", Version: v, Guard: ferry.GuardContiguous}, apply(v))
			if errors.Is(err, ferry.ErrOutOfOrder) {
				gaps++
				pending = append(pending, i) // redelivered later
				continue
			}
			require.NoError(t, err)
			require.Equal(t, ferry.InboxApplied, res.Outcome)
		}
		var want int64
		for v := int64(1); v <= versions; v++ {
			want = want*100 + v
		}
		require.Equal(t, want, b.points(t, 1), "every version applied once, in order")
	})

	t.Run("ResolveConflictRecordsADecision", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		in := b.inbox(t, "points-award")
		_, err := in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e1", Fields: award{7, 10}}, b.award(7, 10))
		require.NoError(t, err)
		res, err := in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e2", Fields: award{7, 99}}, b.award(7, 99))
		require.ErrorIs(t, err, ferry.ErrConflict)
		open, err := b.store.Conflicts(b.ctx, ferrystore.ConflictFilter{Consumer: "points-award"})
		require.NoError(t, err)
		require.Len(t, open, 1)
		require.Nil(t, open[0].Resolution, "no decision on an open conflict")
		counts, err := b.store.OpenConflicts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"points-award": 1}, counts)
		require.NoError(t, b.store.ResolveConflict(b.ctx, res.ConflictID, ferrystore.Resolution{Decision: "keep-stored", By: "alice", Note: "typo upstream"}))
		require.ErrorIs(t, b.store.ResolveConflict(b.ctx, res.ConflictID, ferrystore.Resolution{Decision: "ignored"}), ferrytype.ErrNotFound)
		counts, err = b.store.OpenConflicts(b.ctx)
		require.NoError(t, err)
		require.Empty(t, counts, "a resolved conflict is not open")
		open, err = b.store.Conflicts(b.ctx, ferrystore.ConflictFilter{Consumer: "points-award"})
		require.NoError(t, err)
		require.Empty(t, open)
		all, err := b.store.Conflicts(b.ctx, ferrystore.ConflictFilter{All: true})
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, "RESOLVED", all[0].Status)
		r := all[0].Resolution
		require.NotNil(t, r)
		require.WithinDuration(t, time.Now(), r.ResolvedAt, time.Hour, "stamped by the database clock")
		require.Equal(t, &ferrystore.Resolution{Decision: "keep-stored", By: "alice", Note: "typo upstream", ResolvedAt: r.ResolvedAt}, r)
		require.Equal(t, int64(10), b.points(t, 7), "resolving changes no business data")
	})

	t.Run("PurgeMarkersRespectsTheReplayWindow", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		strict := b.inbox(t, "points-award")
		_, err := strict.PurgeMarkers(b.ctx, time.Hour, 10)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "a retention under the 7-day default window is refused")
		in := b.inbox(t, "points-award", func(c *ferry.InboxConfig) { c.ReplayWindow = time.Millisecond })
		for i := 0; i < 5; i++ {
			_, err := in.Process(b.ctx, ferry.Operation{Key: fmt.Sprint(i), EventID: fmt.Sprint(i), Fields: award{7, 1}}, b.award(7, 1))
			require.NoError(t, err)
		}
		n, err := b.store.PurgeableMarkers(b.ctx, time.Hour)
		require.NoError(t, err)
		require.Zero(t, n, "none is an hour old")
		waitFor(t, 10*time.Second, func() bool {
			n, err = b.store.PurgeableMarkers(b.ctx, time.Millisecond)
			require.NoError(t, err)
			return n == 5
		})
		n, err = b.store.MarkerCount(b.ctx, "")
		require.NoError(t, err)
		require.Equal(t, int64(5), n, "counting deletes nothing")
		var purged int64
		waitFor(t, 10*time.Second, func() bool {
			n, err := in.PurgeMarkers(b.ctx, time.Millisecond, 2)
			require.NoError(t, err)
			purged += n
			return purged == 5
		})
		n, err = b.store.MarkerCount(b.ctx, "")
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("ExistingMarkersFindsCommittedMarkersOfOneConsumer", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		points, sms := b.inbox(t, "points-award"), b.inbox(t, "sms")
		for _, k := range []string{"order:1:paid", "order:2:paid"} {
			_, err := points.Process(b.ctx, ferry.Operation{Key: k, EventID: k, Fields: award{7, 1}}, b.award(7, 1))
			require.NoError(t, err)
		}
		_, err := sms.Process(b.ctx, ferry.Operation{Key: "order:3:paid", EventID: "e3", Fields: award{7, 1}}, b.award(7, 1))
		require.NoError(t, err)
		// A rolled-back operation leaves no marker.
		_, err = points.Process(b.ctx, ferry.Operation{Key: "order:4:paid", EventID: "e4", Fields: award{8, 1}}, b.award(8, 1))
		require.ErrorIs(t, err, ferry.ErrNoEffect)

		got, err := b.store.ExistingMarkers(b.ctx, "points-award",
			[]string{"order:1:paid", "order:2:paid", "order:3:paid", "order:4:paid", "order:5:paid", "order:1:paid"})
		require.NoError(t, err)
		require.Equal(t, map[string]bool{"order:1:paid": true, "order:2:paid": true}, got,
			"another consumer's marker and a rolled-back operation do not count")
		got, err = b.store.ExistingMarkers(b.ctx, "points-award", nil)
		require.NoError(t, err)
		require.Empty(t, got)
		many := make([]string, ferrystore.MaxListLimit)
		for i := range many {
			many[i] = fmt.Sprintf("order:%d:paid", i)
		}
		got, err = b.store.ExistingMarkers(b.ctx, "points-award", many)
		require.NoError(t, err)
		require.Len(t, got, 2, "a full batch in one statement")
		_, err = b.store.ExistingMarkers(b.ctx, "points-award", append(many, "one more"))
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "bounded")
	})

	t.Run("RecentMarkersCountsTheWindowByConsumerAndOutcome", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		points, sms, view := b.inbox(t, "points-award"), b.inbox(t, "sms"), b.inbox(t, "order-view")
		for _, k := range []string{"order:1:paid", "order:2:paid"} {
			_, err := points.Process(b.ctx, ferry.Operation{Key: k, EventID: k, Fields: award{7, 1}}, b.award(7, 1))
			require.NoError(t, err)
		}
		_, err := sms.Process(b.ctx, ferry.Operation{Key: "order:1:paid", EventID: "e1", Fields: award{7, 1}}, b.award(7, 1))
		require.NoError(t, err)
		// Version 2 applied, then version 1 recorded as a stale no-op.
		for _, v := range []int64{2, 1} {
			_, err := view.Process(b.ctx, ferry.Operation{Key: fmt.Sprintf("order:1:v%d", v), EventID: fmt.Sprint(v),
				Fields: award{7, v}, Aggregate: "order:1", Version: v, Guard: ferry.GuardNewer},
				func(context.Context, TTx) error { return nil })
			require.NoError(t, err)
		}
		// A duplicate writes no marker and is not counted.
		res, err := points.Process(b.ctx, ferry.Operation{Key: "order:1:paid", EventID: "order:1:paid", Fields: award{7, 1}}, b.award(7, 1))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxDuplicate, res.Outcome)

		got, err := b.store.RecentMarkers(b.ctx, time.Hour)
		require.NoError(t, err)
		require.Equal(t, []ferrystore.MarkerCount{{Consumer: "order-view", Outcome: "applied", Markers: 1},
			{Consumer: "order-view", Outcome: "stale", Markers: 1}, {Consumer: "points-award", Outcome: "applied", Markers: 2},
			{Consumer: "sms", Outcome: "applied", Markers: 1}}, got)
		// A window shorter than the markers' age counts none of them.
		waitFor(t, 10*time.Second, func() bool {
			got, err := b.store.RecentMarkers(b.ctx, time.Millisecond)
			require.NoError(t, err)
			return len(got) == 0
		})
	})

	t.Run("FilterIsNeverAuthoritative", func(t *testing.T) {
		b := setupInbox(t, h)
		b.open(t, 7)
		f := &liar{}
		in := b.inbox(t, "points-award", func(c *ferry.InboxConfig) { c.Filter = f })
		// The filter claims every key was seen; the database has no marker,
		// so the operation is applied all the same.
		res, err := in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e1", Fields: award{7, 10}}, b.award(7, 10))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxApplied, res.Outcome)
		require.Equal(t, int64(1), f.remembered.Load())
		res, err = in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e2", Fields: award{7, 10}}, b.award(7, 10))
		require.NoError(t, err)
		require.Equal(t, ferry.InboxDuplicate, res.Outcome)
		res, err = in.Process(b.ctx, ferry.Operation{Key: "k", EventID: "e3", Fields: award{7, 11}}, b.award(7, 11))
		require.ErrorIs(t, err, ferry.ErrConflict, "a filter hit still compares the fields")
		require.Equal(t, int64(10), b.points(t, 7))
	})
}

// liar is a filter that claims it saw everything.
type liar struct{ remembered atomic.Int64 }

func (*liar) Seen(context.Context, string, string) (bool, error) { return true, nil }
func (l *liar) Remember(context.Context, string, string, time.Duration) error {
	l.remembered.Add(1)
	return nil
}
