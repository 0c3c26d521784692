package ferrypg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/sqlstore"
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

// pgxPool is a pgx pool as the store's own connections.
type pgxPool struct {
	ferrystore.Executor
	pool interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
}

func (c pgxPool) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{Pgx(tx), tx}, nil
}

type pgxTx struct {
	ferrystore.Executor
	tx pgx.Tx
}

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
