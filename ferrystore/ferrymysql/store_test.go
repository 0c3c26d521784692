package ferrymysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrystoretest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

var harness = ferrystoretest.Harness[*sql.Tx]{
	New: func(t *testing.T) ferrystore.Driver[*sql.Tx] { return Store(t) },
	NewWithTable: func(table string) (ferrystore.Driver[*sql.Tx], error) {
		return ferrymysql.New(sql.OpenDB(nil), &ferrymysql.Config{Table: table})
	},
	Begin: func(ctx context.Context, t *testing.T, s ferrystore.Driver[*sql.Tx]) (*sql.Tx, func() error, func() error) {
		tx, err := s.(*ferrymysql.Store).DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, tx.Commit, tx.Rollback
	},
	LockRow: func(ctx context.Context, t *testing.T, s ferrystore.Store, id string) func() {
		tx, err := s.(*ferrymysql.Store).DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		var got string
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT event_id FROM `"+s.Table()+"` WHERE event_id = ? FOR UPDATE", id).Scan(&got))
		return func() { require.NoError(t, tx.Rollback()) }
	},
	Exec: func(ctx context.Context, t *testing.T, s ferrystore.Store, query string) {
		_, err := s.(*ferrymysql.Store).DB().ExecContext(ctx, query)
		require.NoError(t, err, query)
	},
}

func TestConformance(t *testing.T) { ferrystoretest.Exercise(t, harness) }

func TestClassifyKeepsTheDriverError(t *testing.T) {
	t.Parallel()
	err := ferrystoretest.DuplicateEvent(t, harness)
	require.ErrorIs(t, err, ferrytype.ErrDuplicate)
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	require.Equal(t, uint16(1062), me.Number)
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[*sql.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[*sql.Tx], func(string, ...any) error) {
			return mysqlInbox(t)
		},
	})
}

func mysqlInbox(t *testing.T) (*ferrymysql.Inbox, func(string, ...any) error) {
	db := MySQL(t)
	m, c, v := testenv.InboxTables()
	k := m + "k"
	s, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	require.NoError(t, err)
	exec := func(q string, args ...any) error { _, err := db.Exec(q, args...); return err }
	testenv.MigratedInbox(t, s, func(q string) error { return exec(q) }, m, m, c, v, k)
	return s, exec
}

func TestKeysConformance(t *testing.T) {
	t.Parallel()
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[*sql.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[*sql.Tx] {
			s, _ := mysqlInbox(t)
			return s
		},
	})
}

// opened is a store of ferrymysql.Open on a fresh migrated table: its
// pool's sessions run READ COMMITTED, so its claims skip the per-claim
// isolation statement.
func opened(t *testing.T) *ferrymysql.Store {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	MySQL(t) // skips or fails the test when MariaDB is not reachable
	s, err := ferrymysql.Open(ctx, testenv.URL(testenv.EnvMySQL), &ferrymysql.Config{Table: testenv.Name("ft_")})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	testenv.Migrated(t, s, func(q string) error { _, err := s.DB().Exec(q); return err })
	return s
}

// TestConformanceOpened runs the whole suite on a store of Open, whose
// claims rely on the session's isolation level. Producers write through
// an application's pool (REPEATABLE READ), as in production: the claims
// must still never conflict with them.
func TestConformanceOpened(t *testing.T) {
	t.Parallel()
	h := harness
	h.New = func(t *testing.T) ferrystore.Driver[*sql.Tx] { return opened(t) }
	h.Begin = func(ctx context.Context, t *testing.T, _ ferrystore.Driver[*sql.Tx]) (*sql.Tx, func() error, func() error) {
		tx, err := MySQL(t).BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, tx.Commit, tx.Rollback
	}
	ferrystoretest.Exercise(t, h)
}

// TestOpenSessionsReadCommitted checks every connection of an opened
// store's pool, not only the first: each runs READ COMMITTED, while the
// application's pool keeps the server's default.
func TestOpenSessionsReadCommitted(t *testing.T) {
	t.Parallel()
	s := opened(t)
	ctx := testenv.Context(t, time.Minute)
	level := func(c *sql.Conn) string {
		var v string
		err := c.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&v)
		if err != nil { // MariaDB before 11.1 names it tx_isolation
			require.NoError(t, c.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&v))
		}
		return v
	}
	var conns []*sql.Conn
	for range 4 {
		c, err := s.DB().Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.Equal(t, "READ-COMMITTED", level(c))
		require.NoError(t, c.Close())
	}
	app, err := MySQL(t).Conn(ctx)
	require.NoError(t, err)
	defer app.Close()
	require.Equal(t, "REPEATABLE-READ", level(app))
}
