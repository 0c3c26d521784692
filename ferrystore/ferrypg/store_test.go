package ferrypg_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrystoretest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

func lockRow(ctx context.Context, t *testing.T, s ferrystore.Store, id string) func() {
	tx, err := Postgres(t).Begin(ctx)
	require.NoError(t, err)
	var got string
	require.NoError(t, tx.QueryRow(ctx, `SELECT event_id FROM "`+s.Table()+`" WHERE event_id = $1 FOR UPDATE`, id).Scan(&got))
	return func() { require.NoError(t, tx.Rollback(ctx)) }
}

func exec(ctx context.Context, t *testing.T, _ ferrystore.Store, query string) {
	_, err := Postgres(t).Exec(ctx, query)
	require.NoError(t, err, query)
}

func TestConformancePgx(t *testing.T) {
	t.Parallel()
	ferrystoretest.Exercise(t, ferrystoretest.Harness[pgx.Tx]{
		New: func(t *testing.T) ferrystore.Driver[pgx.Tx] {
			s, err := ferrypg.New(Postgres(t), &ferrypg.Config{Table: testenv.Name("ft_")})
			require.NoError(t, err)
			db := PostgresSQL(t)
			testenv.Migrated(t, s, func(q string) error { _, err := db.Exec(q); return err })
			return s
		},
		NewWithTable: func(table string) (ferrystore.Driver[pgx.Tx], error) {
			return ferrypg.New(new(pgxpool.Pool), &ferrypg.Config{Table: table})
		},
		Begin: func(ctx context.Context, t *testing.T, _ ferrystore.Driver[pgx.Tx]) (pgx.Tx, func() error, func() error) {
			tx, err := Postgres(t).Begin(ctx)
			require.NoError(t, err)
			return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
		},
		LockRow: lockRow,
		Exec:    exec,
	})
}

var stdlibHarness = ferrystoretest.Harness[*sql.Tx]{
	New: func(t *testing.T) ferrystore.Driver[*sql.Tx] { return Store(t) },
	NewWithTable: func(table string) (ferrystore.Driver[*sql.Tx], error) {
		return ferrypg.NewStdlib(sql.OpenDB(nil), &ferrypg.Config{Table: table})
	},
	Begin: func(ctx context.Context, t *testing.T, _ ferrystore.Driver[*sql.Tx]) (*sql.Tx, func() error, func() error) {
		tx, err := PostgresSQL(t).BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, tx.Commit, tx.Rollback
	},
	LockRow: lockRow,
	Exec:    exec,
}

func TestConformanceStdlib(t *testing.T) { ferrystoretest.Exercise(t, stdlibHarness) }

func TestClassifyKeepsTheDriverError(t *testing.T) {
	t.Parallel()
	err := ferrystoretest.DuplicateEvent(t, stdlibHarness)
	require.ErrorIs(t, err, ferrytype.ErrDuplicate)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
}

func pgInbox[D ferrystore.IdempotencyDriver[T], T any](t *testing.T, mk func(*ferrypg.InboxConfig) (D, error)) (ferrystore.IdempotencyDriver[T], func(string, ...any) error) {
	db := PostgresSQL(t)
	m, c, v := testenv.InboxTables()
	k := m + "k"
	s, err := mk(&ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	require.NoError(t, err)
	exec := func(q string, args ...any) error { _, err := db.Exec(q, args...); return err }
	testenv.MigratedInbox(t, s, func(q string) error { return exec(q) }, m, m, c, v, k)
	return s, exec
}

func TestKeysConformancePgx(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[pgx.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[pgx.Tx] {
			s, _ := pgInbox[*ferrypg.Inbox, pgx.Tx](t, func(c *ferrypg.InboxConfig) (*ferrypg.Inbox, error) {
				return ferrypg.NewInbox(Postgres(t), c)
			})
			return s
		},
	})
}

func TestKeysConformanceStdlib(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[*sql.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[*sql.Tx] {
			s, _ := pgInbox[*ferrypg.StdlibInbox, *sql.Tx](t, func(c *ferrypg.InboxConfig) (*ferrypg.StdlibInbox, error) {
				return ferrypg.NewStdlibInbox(PostgresSQL(t), c)
			})
			return s
		},
	})
}

func TestInboxConformancePgx(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[pgx.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[pgx.Tx], func(string, ...any) error) {
			return pgInbox[*ferrypg.Inbox, pgx.Tx](t, func(c *ferrypg.InboxConfig) (*ferrypg.Inbox, error) {
				return ferrypg.NewInbox(Postgres(t), c)
			})
		},
	})
}

func TestInboxConformanceStdlib(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[*sql.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[*sql.Tx], func(string, ...any) error) {
			return pgInbox[*ferrypg.StdlibInbox, *sql.Tx](t, func(c *ferrypg.InboxConfig) (*ferrypg.StdlibInbox, error) {
				return ferrypg.NewStdlibInbox(PostgresSQL(t), c)
			})
		},
		ConcurrentKeys: 300,
	})
}
