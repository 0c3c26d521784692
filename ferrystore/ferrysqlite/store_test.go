package ferrysqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrystore/ferrystoretest"
	"github.com/ferrydev/ferry/ferrytype"
)

var harness = ferrystoretest.Harness[*sql.Tx]{
	New: func(t *testing.T) ferrystore.Driver[*sql.Tx] { return Store(t) },
	NewWithTable: func(table string) (ferrystore.Driver[*sql.Tx], error) {
		return ferrysqlite.New(sql.OpenDB(nil), &ferrysqlite.Config{Table: table})
	},
	Begin: func(ctx context.Context, t *testing.T, s ferrystore.Driver[*sql.Tx]) (*sql.Tx, func() error, func() error) {
		tx, err := s.(*ferrysqlite.Store).DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, tx.Commit, tx.Rollback
	},
	Exec: func(ctx context.Context, t *testing.T, s ferrystore.Store, query string) {
		_, err := s.(*ferrysqlite.Store).DB().ExecContext(ctx, query)
		require.NoError(t, err, query)
	},
}

func TestConformance(t *testing.T) { ferrystoretest.Exercise(t, harness) }

func TestClassifyKeepsTheDriverError(t *testing.T) {
	t.Parallel()
	err := ferrystoretest.DuplicateEvent(t, harness)
	require.ErrorIs(t, err, ferrytype.ErrDuplicate)
	var se *sqlite.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, se.Code())
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[*sql.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[*sql.Tx], func(string, ...any) error) {
			db := SQLite(t)
			s, err := ferrysqlite.NewInbox(db, nil)
			require.NoError(t, err)
			require.NoError(t, s.Migrate(context.Background()))
			return s, func(q string, args ...any) error { _, err := db.Exec(q, args...); return err }
		},
		// SQLite runs one writer at a time: fewer keys keep the test short.
		ConcurrentKeys: 300,
	})
}

func TestKeysConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[*sql.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[*sql.Tx] {
			s, err := ferrysqlite.NewInbox(SQLite(t), nil)
			require.NoError(t, err)
			require.NoError(t, s.Migrate(context.Background()))
			return s
		},
	})
}

func TestClassifyBusyIsLockConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := ferrysqlite.Open(ctx, "sqlite://"+path, nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx))
	tx, err := s.DB().BeginTx(ctx, nil) // immediate: it holds the write lock
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()

	impatient, err := ferrysqlite.Open(ctx, "sqlite://"+path+"?_pragma=busy_timeout(0)", nil)
	require.NoError(t, err)
	defer impatient.Close()
	_, err = impatient.DB().BeginTx(ctx, nil)
	require.Error(t, err)
	err = impatient.Classify(err)
	require.ErrorIs(t, err, ferrytype.ErrLockConflict)
	require.ErrorIs(t, err, ferrytype.ErrRetryable)
	var se *sqlite.Error
	require.ErrorAs(t, err, &se)
}
