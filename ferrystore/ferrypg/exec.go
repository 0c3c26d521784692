package ferrypg

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrydev/ferry/ferrystore"
)

// PgxQuerier is implemented by *pgxpool.Pool, *pgx.Conn and pgx.Tx.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Pgx adapts a pgx pool, connection or transaction to ferrystore.Executor.
func Pgx(q PgxQuerier) ferrystore.Executor { return pgxExecutor{q} }

type pgxExecutor struct{ q PgxQuerier }

func (e pgxExecutor) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := e.q.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (e pgxExecutor) Query(ctx context.Context, query string, args ...any) (ferrystore.Rows, error) {
	rows, err := e.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return r.Rows.Err() }

// conn is what the store needs from its own pool: statements and
// transactions, through pgx or database/sql.
type conn interface {
	ferrystore.Executor
	begin(ctx context.Context) (txn, error)
}

type txn interface {
	ferrystore.Executor
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type pgxConn struct {
	ferrystore.Executor
	pool interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
}

func (c pgxConn) begin(ctx context.Context) (txn, error) {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTxn{Pgx(tx), tx}, nil
}

type pgxTxn struct {
	ferrystore.Executor
	tx pgx.Tx
}

func (t pgxTxn) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTxn) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type sqlConn struct {
	ferrystore.Executor
	db *sql.DB
}

func (c sqlConn) begin(ctx context.Context) (txn, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTxn{ferrystore.SQL(tx), tx}, nil
}

type sqlTxn struct {
	ferrystore.Executor
	tx *sql.Tx
}

func (t sqlTxn) commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTxn) rollback(context.Context) error { return t.tx.Rollback() }
