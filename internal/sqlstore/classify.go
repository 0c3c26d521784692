package sqlstore

import (
	"context"

	"github.com/ferrydev/ferry/ferrystore"
)

// Classifying wraps p so that every error its statements, rows and
// transactions return is passed through classify.
func Classifying(p Pool, classify func(error) error) Pool { return classPool{p, classify} }

type classPool struct {
	p Pool
	c func(error) error
}

func (p classPool) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	n, err := p.p.Exec(ctx, q, args...)
	return n, p.c(err)
}

func (p classPool) Query(ctx context.Context, q string, args ...any) (ferrystore.Rows, error) {
	return classQuery(p.p, p.c, ctx, q, args)
}

func (p classPool) Begin(ctx context.Context) (Tx, error) {
	tx, err := p.p.Begin(ctx)
	if err != nil {
		return nil, p.c(err)
	}
	return classTx{tx, p.c}, nil
}

type classTx struct {
	tx Tx
	c  func(error) error
}

func (t classTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	n, err := t.tx.Exec(ctx, q, args...)
	return n, t.c(err)
}

func (t classTx) Query(ctx context.Context, q string, args ...any) (ferrystore.Rows, error) {
	return classQuery(t.tx, t.c, ctx, q, args)
}

func (t classTx) Commit(ctx context.Context) error   { return t.c(t.tx.Commit(ctx)) }
func (t classTx) Rollback(ctx context.Context) error { return t.c(t.tx.Rollback(ctx)) }

func classQuery(ex ferrystore.Executor, c func(error) error, ctx context.Context, q string, args []any) (ferrystore.Rows, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, c(err)
	}
	return classRows{rows, c}, nil
}

type classRows struct {
	ferrystore.Rows
	c func(error) error
}

func (r classRows) Scan(dest ...any) error { return r.c(r.Rows.Scan(dest...)) }
func (r classRows) Err() error             { return r.c(r.Rows.Err()) }
func (r classRows) Close() error           { return r.c(r.Rows.Close()) }
