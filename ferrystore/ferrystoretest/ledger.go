package ferrystoretest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
)

// Ledger is the business data the inbox cases write next to their
// markers, in the inbox's database: the seed's points accounts, and a log
// of effects without a unique key, on which a second effect of one
// operation would show. The writes that take a transaction are made in it:
// they commit, or roll back, with the operation's marker.
type Ledger[TTx any] interface {
	// Open creates user's account with 0 points, committed.
	Open(ctx context.Context, user int64) error
	// Add adds amount to user's points in tx, and returns how many
	// accounts it changed: 0 when user has none.
	Add(ctx context.Context, tx TTx, user, amount int64) (int64, error)
	// Set sets user's points to points in tx, and returns how many
	// accounts it changed.
	Set(ctx context.Context, tx TTx, user, points int64) (int64, error)
	// Append sets user's points to points*100 + digits in tx, so that the
	// order of the calls shows in the result, and returns how many
	// accounts it changed.
	Append(ctx context.Context, tx TTx, user, digits int64) (int64, error)
	// Points reads user's committed points; found is false when user has
	// no account.
	Points(ctx context.Context, user int64) (points int64, found bool, err error)
	// Log adds key to the effect log in tx.
	Log(ctx context.Context, tx TTx, key string) error
	// Logged counts the committed entries of the effect log, and the
	// distinct keys among them.
	Logged(ctx context.Context) (entries, keys int64, err error)
}

// sqlLedger is the Ledger of a SQL database: two tables under fresh names,
// created with exec and written through the store's transactions.
type sqlLedger[TTx any] struct {
	store      ferrystore.InboxDriver[TTx]
	exec       func(query string, args ...any) error
	table, log string
}

// newSQLLedger creates the tables of a SQL ledger, dropped when t ends.
func newSQLLedger[TTx any](t *testing.T, s ferrystore.InboxDriver[TTx], exec func(query string, args ...any) error) *sqlLedger[TTx] {
	t.Helper()
	require.NotNil(t, exec, "InboxHarness.New returned no statement runner, and the harness has no Ledger")
	l := &sqlLedger[TTx]{store: s, exec: exec, table: fmt.Sprintf("points_account_%d", rand.Uint32())}
	l.log = l.table + "_log"
	// The seed's points_account, under a fresh name.
	require.NoError(t, exec("CREATE TABLE "+l.table+" (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + l.table) })
	require.NoError(t, exec("CREATE TABLE "+l.log+" (business_key VARCHAR(128) NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + l.log) })
	return l
}

func (l *sqlLedger[TTx]) Open(_ context.Context, user int64) error {
	return l.exec(fmt.Sprintf("INSERT INTO %s VALUES (%d, 0)", l.table, user))
}

// update runs an UPDATE of the accounts in tx.
func (l *sqlLedger[TTx]) update(ctx context.Context, tx TTx, set string, args ...any) (int64, error) {
	return l.store.UnwrapTx(tx).Exec(ctx, bind(l.store.Dialect(), "UPDATE "+l.table+" SET "+set+" WHERE user_id = ?"), args...)
}

func (l *sqlLedger[TTx]) Add(ctx context.Context, tx TTx, user, amount int64) (int64, error) {
	return l.update(ctx, tx, "points = points + ?", amount, user)
}

func (l *sqlLedger[TTx]) Set(ctx context.Context, tx TTx, user, points int64) (int64, error) {
	return l.update(ctx, tx, "points = ?", points, user)
}

func (l *sqlLedger[TTx]) Append(ctx context.Context, tx TTx, user, digits int64) (int64, error) {
	return l.update(ctx, tx, "points = points * 100 + ?", digits, user)
}

// query reads one row of q, in a transaction of its own.
func (l *sqlLedger[TTx]) query(ctx context.Context, q string, args []any, dest ...any) (found bool, err error) {
	tx, err := l.store.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer l.store.Rollback(ctx, tx)
	rows, err := l.store.UnwrapTx(tx).Query(ctx, bind(l.store.Dialect(), q), args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	return true, rows.Scan(dest...)
}

func (l *sqlLedger[TTx]) Points(ctx context.Context, user int64) (int64, bool, error) {
	var p int64
	found, err := l.query(ctx, "SELECT points FROM "+l.table+" WHERE user_id = ?", []any{user}, &p)
	return p, found, err
}

func (l *sqlLedger[TTx]) Log(ctx context.Context, tx TTx, key string) error {
	_, err := l.store.UnwrapTx(tx).Exec(ctx, bind(l.store.Dialect(), "INSERT INTO "+l.log+" VALUES (?)"), key)
	return err
}

func (l *sqlLedger[TTx]) Logged(ctx context.Context) (entries, keys int64, err error) {
	_, err = l.query(ctx, "SELECT COUNT(*), COUNT(DISTINCT business_key) FROM "+l.log, nil, &entries, &keys)
	return entries, keys, err
}
