package ferrymysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrystoretest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

var harness = ferrystoretest.Harness[*sql.Tx]{
	New: func(t *testing.T) ferrystore.Driver[*sql.Tx] { return testsvc.Store(t, "mysql").Driver },
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
	err := ferrystoretest.DuplicateEvent(t, harness)
	require.ErrorIs(t, err, ferrytype.ErrDuplicate)
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	require.Equal(t, uint16(1062), me.Number)
}

func TestInboxConformance(t *testing.T) {
	ferrystoretest.ExerciseInbox(t, ferrystoretest.InboxHarness[*sql.Tx]{
		New: func(t *testing.T) (ferrystore.InboxDriver[*sql.Tx], func(string, ...any) error) {
			return mysqlInbox(t)
		},
	})
}

func mysqlInbox(t *testing.T) (*ferrymysql.Inbox, func(string, ...any) error) {
	db := testsvc.MySQL(t)
	m, c, v := testsvc.InboxTables()
	k := m + "k"
	s, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	require.NoError(t, err)
	exec := func(q string, args ...any) error { _, err := db.Exec(q, args...); return err }
	testsvc.MigratedInbox(t, s, func(q string) error { return exec(q) }, m, m, c, v, k)
	return s, exec
}

func TestKeysConformance(t *testing.T) {
	ferrystoretest.ExerciseKeys(t, ferrystoretest.KeysHarness[*sql.Tx]{
		New: func(t *testing.T) ferrystore.IdempotencyDriver[*sql.Tx] {
			s, _ := mysqlInbox(t)
			return s
		},
	})
}
