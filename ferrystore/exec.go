package ferrystore

import (
	"context"
	"database/sql"
)

// Executor runs statements on a connection or inside a transaction. Stores
// write their SQL once against it; adapters exist for database/sql (SQL)
// and pgx (ferrypg).
type Executor interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query. The caller closes the rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is the subset of *sql.Rows and pgx.Rows that stores use.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// SQLQuerier is implemented by *sql.DB, *sql.Conn and *sql.Tx.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SQL adapts a database/sql connection, pool or transaction to Executor.
func SQL(q SQLQuerier) Executor { return sqlExecutor{q} }

type sqlExecutor struct{ q SQLQuerier }

func (e sqlExecutor) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := e.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (e sqlExecutor) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := e.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}
