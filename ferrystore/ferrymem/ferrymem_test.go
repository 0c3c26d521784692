package ferrymem_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrystore/ferrystoretest"
)

var harness = ferrystoretest.Harness[*ferrymem.Tx]{
	New: func(t *testing.T) ferrystore.Driver[*ferrymem.Tx] {
		s, err := ferrymem.New(ferrymem.NewDB(nil), nil)
		require.NoError(t, err)
		require.NoError(t, s.Migrate(context.Background()))
		return s
	},
	NewWithTable: func(table string) (ferrystore.Driver[*ferrymem.Tx], error) {
		return ferrymem.New(ferrymem.NewDB(nil), &ferrymem.Config{Table: table})
	},
	Begin: func(ctx context.Context, t *testing.T, s ferrystore.Driver[*ferrymem.Tx]) (*ferrymem.Tx, func() error, func() error) {
		tx, err := s.(*ferrymem.Store).DB().Begin(ctx)
		require.NoError(t, err)
		return tx, tx.Commit, tx.Rollback
	},
	InsertRaw: func(_ context.Context, t *testing.T, s ferrystore.Store, r ferrystoretest.RawRow) {
		require.NoError(t, ferrymem.InsertRaw(s.(*ferrymem.Store), r.ID, r.Columns, r.Values))
	},
	ReadsBesideWriters: true,
	Schemaless:         true,
}

func TestConformance(t *testing.T) { ferrystoretest.Exercise(t, harness) }

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[*ferrymem.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[*ferrymem.Tx], func(string, ...any) error) {
			in, err := ferrymem.NewInbox(ferrymem.NewDB(nil), nil)
			require.NoError(t, err)
			require.NoError(t, in.Migrate(context.Background()))
			return in, nil
		},
		Ledger: func(*testing.T, ferrystore.InboxDriver[*ferrymem.Tx]) ferrystoretest.Ledger[*ferrymem.Tx] {
			return &ledger{points: map[int64]int64{}}
		},
	})
}

func TestKeysConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[*ferrymem.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[*ferrymem.Tx] {
			in, err := ferrymem.NewInbox(ferrymem.NewDB(nil), nil)
			require.NoError(t, err)
			return in
		},
	})
}

// ledger is the inbox suite's business data in memory, written at the
// commit of the operation's transaction (Tx.OnCommit): what a user's unit
// test of a consumer does.
type ledger struct {
	mu     sync.Mutex
	points map[int64]int64
	log    []string
}

func (l *ledger) Open(_ context.Context, user int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.points[user] = 0
	return nil
}

// update changes user's points with f when tx commits; it returns how many
// accounts it changes.
func (l *ledger) update(tx *ferrymem.Tx, user int64, f func(int64) int64) (int64, error) {
	l.mu.Lock()
	_, ok := l.points[user]
	l.mu.Unlock()
	if !ok {
		return 0, nil
	}
	return 1, tx.OnCommit(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.points[user] = f(l.points[user])
	})
}

func (l *ledger) Add(_ context.Context, tx *ferrymem.Tx, user, amount int64) (int64, error) {
	return l.update(tx, user, func(p int64) int64 { return p + amount })
}

func (l *ledger) Set(_ context.Context, tx *ferrymem.Tx, user, points int64) (int64, error) {
	return l.update(tx, user, func(int64) int64 { return points })
}

func (l *ledger) Append(_ context.Context, tx *ferrymem.Tx, user, digits int64) (int64, error) {
	return l.update(tx, user, func(p int64) int64 { return p*100 + digits })
}

func (l *ledger) Points(_ context.Context, user int64) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.points[user]
	return p, ok, nil
}

func (l *ledger) Log(_ context.Context, tx *ferrymem.Tx, key string) error {
	return tx.OnCommit(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.log = append(l.log, key)
	})
}

func (l *ledger) Logged(context.Context) (entries, keys int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	distinct := map[string]bool{}
	for _, k := range l.log {
		distinct[k] = true
	}
	return int64(len(l.log)), int64(len(distinct)), nil
}
