package ferrypg

import (
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/sqlstore"
)

// dialect spells PostgreSQL's SQL for the shared store: timestamptz times
// from now(), durations as a bigint count of microseconds, id lists as one
// text[] argument.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

// Classify wraps a driver error in ferry's classes.
func (dialect) Classify(err error) error { return classify(err) }

func (dialect) Name() string                 { return "postgres" }
func (dialect) Quote(name string) string     { return quote(name) }
func (dialect) Rebind(q string) string       { return sqlstore.Rebind("postgres", q) }
func (dialect) Now() string                  { return "now()" }
func (dialect) Shift() string                { return "now() + ?::bigint * interval '1 microsecond'" }
func (dialect) Duration(d time.Duration) any { return d.Microseconds() }
func (dialect) CountIf(cond string) string   { return "count(*) FILTER (WHERE " + cond + ")" }
func (dialect) Text(col string) string       { return col + "::text" }
func (dialect) JSON() string                 { return "?::json" }
func (dialect) KeyText(expr string) string   { return expr + "::text" }
func (dialect) Moment(expr string) string    { return expr }
func (dialect) Ping() string                 { return "SELECT 1" }
func (dialect) Update() string               { return "UPDATE " }

// ContainsFold is ILIKE, which folds every letter by the database's
// locale.
func (dialect) ContainsFold(col string) string { return col + " ILIKE ? ESCAPE '!'" }

func (dialect) Concat(exprs ...string) string { return "(" + strings.Join(exprs, " || ") + ")" }

func (dialect) AgeMicros(expr string) string {
	return "(EXTRACT(EPOCH FROM now() - " + expr + ") * 1000000)::bigint"
}

func (dialect) In(col string, vals []string) (string, []any) {
	return col + " = ANY(?::text[])", []any{vals}
}

// DeleteLimited deletes through a sub-select that skips rows another
// transaction holds, so that two purges never wait for each other.
func (dialect) DeleteLimited(table, where, order string) string {
	return "DELETE FROM " + table + " WHERE event_id IN (SELECT event_id FROM " + table +
		" WHERE " + where + " ORDER BY " + order + " LIMIT ? FOR UPDATE SKIP LOCKED)"
}

// After is a row comparison, which walks an index from the cursor.
func (dialect) After(col string, at time.Time, id string) (string, []any) {
	return "(" + col + ", event_id) > (?::timestamptz, ?::text)", []any{at, id}
}

// NotAfter compares col with at.
func (dialect) NotAfter(col string, at time.Time) (string, []any) {
	return col + " <= ?::timestamptz", []any{at}
}

// Route is the expression of the DEAD index, which PostgreSQL matches.
func (dialect) Route() string {
	return "(CASE WHEN destination = '' THEN event_type ELSE destination END)"
}

// Settled is status: the DEAD and DISCARDED indexes are partial.
func (dialect) Settled() string { return "status" }

// SettledTerm is empty: PostgreSQL proves the partial indexes' predicate.
func (dialect) SettledTerm() string { return "" }

// Tidy vacuums and analyzes the table: the visibility map marks the pages
// a bulk change touched all-visible again, so that the counts' index-only
// scans read no row, and the statistics see the statuses it moved.
// SKIP_LOCKED: when autovacuum holds the table, it is doing the same.
// A role that does not own the table gets a warning from PostgreSQL, not
// an error, and the table is left to autovacuum.
func (dialect) Tidy(table string) string { return "VACUUM (ANALYZE, SKIP_LOCKED) " + table }

// DeadIndex is empty: PostgreSQL picks the DEAD index by itself.
func (dialect) DeadIndex() string { return "" }

// UpsertIf is ON CONFLICT ... DO UPDATE ... WHERE cond: the statement
// changes no row when cond does not hold.
func (d dialect) UpsertIf(key string, cols []string, cond string) string {
	return d.Upsert(key, cols) + " WHERE " + cond
}

// Inserted is the excluded row's value.
func (dialect) Inserted(col string) string { return "excluded." + col }

// Upsert is ON CONFLICT ... DO UPDATE with the excluded row's values.
func (dialect) Upsert(key string, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = excluded." + c
	}
	return "ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ")
}
