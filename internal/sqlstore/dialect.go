// Package sqlstore is the SQL that ferry's three stores share: the outbox
// (enqueue, claims, marks, the sweep, retention, the operator's listings),
// the heartbeat and lease tables beside it, the inbox (markers, conflicts,
// the version guard) and the idempotency keys. Every statement that differs
// between MySQL, PostgreSQL and SQLite only in spelling (the clock,
// durations, placeholders, id lists, bounded deletes, upserts) is written
// here once against a Dialect, with the decoding of the rows it reads. A
// store package (ferrymysql, ferrypg, ferrysqlite) keeps what truly
// differs: its claim, its enqueue, LISTEN, opening URLs, its migrations and
// the Dialect value itself. So a store call runs in its store package and
// this one, and nowhere else.
//
// The package is internal because the Dialect is not a stable API before
// ferry's first tag: it changes with every statement the stores come to
// share. A store outside this repository implements ferrystore.Store
// directly and runs the conformance suite (ferrystoretest).
package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
)

// Dialect spells the pieces of SQL that differ between databases. Every
// statement is written with ? placeholders and passed through Rebind.
type Dialect interface {
	// Name is the dialect's name, as ferrystore.Store.Dialect returns it.
	Name() string
	// Quote quotes a validated identifier.
	Quote(ident string) string
	// Rebind rewrites the ? placeholders of q into the dialect's own.
	Rebind(q string) string
	// Now is the database clock, in the form the dialect stores times.
	Now() string
	// Shift is the database clock moved by the signed duration bound at
	// its one ? placeholder, encoded by Duration.
	Shift() string
	// Duration encodes a signed duration as Shift's argument.
	Duration(d time.Duration) any
	// AgeMicros is how long ago the time expr was on the database clock,
	// in whole microseconds.
	AgeMicros(expr string) string
	// CountIf counts the rows of a group for which cond holds.
	CountIf(cond string) string
	// Text reads a JSON column as text.
	Text(col string) string
	// JSON is the placeholder of a JSON argument bound as text.
	JSON() string
	// In matches col against vals: "col IN (?, ?)" or
	// "col = ANY(?::text[])", with the arguments it binds.
	In(col string, vals []string) (string, []any)
	// DeleteLimited deletes at most a bound number of rows of table
	// matching where, the first in order; the statement's last placeholder
	// takes the bound.
	DeleteLimited(table, where, order string) string
	// After matches the rows after (at, id) in the order (col, event_id),
	// col being available_at or created_at, with the arguments it binds:
	// a condition that lets an index on (..., col, event_id) start at the
	// cursor.
	After(col string, at time.Time, id string) (string, []any)
	// NotAfter is the condition col <= at, col being available_at, with
	// the arguments it binds.
	NotAfter(col string, at time.Time) (string, []any)
	// Route is the expression of where a row is published, its
	// destination or else its type, as the DEAD index holds it.
	Route() string
	// Settled is the column to match a DEAD or DISCARDED status against,
	// so that the statement reads the indexes of those rows only: status
	// where they are partial indexes, or a column that is NULL for the
	// other statuses.
	Settled() string
	// SettledTerm is the predicate of the partial DEAD and DISCARDED
	// indexes, which a statement over those rows repeats where the
	// planner reads a partial index only for a statement that states it
	// (SQLite); "" where it proves the predicate itself.
	SettledTerm() string
	// DeadIndex is the hint, after the table's name, that makes a
	// statement read the DEAD index ("" where the planner needs none).
	DeadIndex() string
	// Tidy is the statement that brings the planner's statistics and the
	// table's visibility information up to date after a bulk change of
	// table (Admin.AfterBulk), "" where the database needs none.
	Tidy(table string) string
	// KeyText converts a business table's key column expr to text that
	// compares with aggregate_id through the aggregate index.
	KeyText(expr string) string
	// Moment makes a stored time expr comparable with Shift, and with
	// another Moment: in the order of the times it holds.
	Moment(expr string) string
	// ContainsFold matches text column col against the LIKE pattern bound
	// at its one ? placeholder, whose escape character is '!', ignoring
	// the case of ASCII letters at least.
	ContainsFold(col string) string
	// Concat concatenates text expressions.
	Concat(exprs ...string) string
	// Ping is a query of one round trip that reads the database.
	Ping() string
	// Upsert ends an INSERT whose row may exist already, by its primary
	// key key: the existing row takes the inserted values of cols instead.
	Upsert(key string, cols []string) string
	// UpsertIf ends an INSERT of one row whose primary key key may be
	// taken already: the existing row then takes the inserted values of
	// cols where cond holds of it, and stays as it is where it does not,
	// in the one statement, under the row's lock. cond names the existing
	// row's columns qualified by the quoted table's name, and an inserted
	// value as Inserted(col). MySQL sets cols in order, each assignment
	// seeing the ones before it: cond must still hold once the first of
	// cols holds its inserted value.
	UpsertIf(key string, cols []string, cond string) string
	// Inserted is the value the INSERT of an UpsertIf inserts in col.
	Inserted(col string) string
	// Update begins an UPDATE of outbox rows that changes no JSON column:
	// "UPDATE ", or on MySQL "UPDATE " behind MariaDB's executable comment
	// that skips CHECK constraints for the statement. MariaDB's JSON is a
	// LONGTEXT with a CHECK (json_valid) that it tests again on every
	// UPDATE, so a row written with the checks off could otherwise never be
	// claimed, recorded DEAD or discarded.
	Update() string
	// Classify wraps a driver error in ferry's classes
	// (ferrystore.Classifier).
	Classify(err error) error
}

// Pool is a store's own connections: statements and transactions.
type Pool interface {
	ferrystore.Executor
	// Begin starts a transaction.
	Begin(ctx context.Context) (Tx, error)
}

// Tx is a transaction begun on a Pool.
type Tx interface {
	ferrystore.Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// SQLPool adapts a database/sql pool to Pool.
func SQLPool(db *sql.DB) Pool { return sqlPool{ferrystore.SQL(db), db} }

type sqlPool struct {
	ferrystore.Executor
	db *sql.DB
}

func (p sqlPool) Begin(ctx context.Context) (Tx, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{ferrystore.SQL(tx), tx}, nil
}

type sqlTx struct {
	ferrystore.Executor
	tx *sql.Tx
}

func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

// later encodes a delay, never negative, for Shift.
func later(d Dialect, dur time.Duration) any { return d.Duration(max(dur, 0)) }

// ago encodes a time span back from now, never forward, for Shift.
func ago(d Dialect, dur time.Duration) any { return d.Duration(-max(dur, 0)) }
