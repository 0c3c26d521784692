package ferrysqlite

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/sqlstore"
)

// now is the database clock as stored: UTC text with milliseconds.
const now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

// nowPlus is now shifted by a modifier bound as a parameter ("+1.500000 seconds").
const nowPlus = "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)"

func modifier(d time.Duration) string { return fmt.Sprintf("%+.6f seconds", d.Seconds()) }

// dialect spells SQLite's SQL for the shared store: times are UTC text that
// sorts as it compares, durations are date-function modifiers.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

// Classify wraps a driver error in ferry's classes.
func (dialect) Classify(err error) error { return classify(err) }

func (dialect) Name() string                 { return "sqlite" }
func (dialect) Quote(name string) string     { return quote(name) }
func (dialect) Rebind(q string) string       { return q }
func (dialect) Now() string                  { return now }
func (dialect) Shift() string                { return nowPlus }
func (dialect) Duration(d time.Duration) any { return modifier(d) }
func (dialect) CountIf(cond string) string   { return "COALESCE(SUM(" + cond + "), 0)" }
func (dialect) Text(col string) string       { return col }
func (dialect) JSON() string                 { return "?" }
func (dialect) KeyText(expr string) string   { return "CAST(" + expr + " AS TEXT)" }

// Ping reads the schema, so that an unreadable database file fails.
func (dialect) Ping() string   { return "SELECT count(*) FROM sqlite_schema" }
func (dialect) Update() string { return "UPDATE " }

func (dialect) AgeMicros(expr string) string {
	return "CAST((julianday('now') - julianday(" + expr + ")) * 86400000000 AS INTEGER)"
}

// Moment compares times through julianday(), whatever their exact text
// format, at the price of not using an index on the column.
func (dialect) Moment(expr string) string { return "julianday(" + expr + ")" }

// ContainsFold is LIKE, which folds ASCII letters only.
func (dialect) ContainsFold(col string) string { return col + " LIKE ? ESCAPE '!'" }

func (dialect) Concat(exprs ...string) string { return "(" + strings.Join(exprs, " || ") + ")" }

func (dialect) In(col string, vals []string) (string, []any) { return sqlstore.InList(col, vals) }

func (dialect) DeleteLimited(table, where, order string) string {
	return "DELETE FROM " + table + " WHERE event_id IN (SELECT event_id FROM " + table +
		" WHERE " + where + " ORDER BY " + order + " LIMIT ?)"
}

// After compares available_at with the cursor as stored (ferry writes it:
// UTC text with milliseconds), and created_at through Moment (a row written
// by hand may hold another format).
func (d dialect) After(col string, at time.Time, id string) (string, []any) {
	s := at.UTC().Format("2006-01-02 15:04:05.000")
	c, b := col, "?"
	if col != "available_at" {
		c, b = d.Moment(col), d.Moment("?")
	}
	return "(" + c + " > " + b + " OR (" + c + " = " + b + " AND event_id > ?))", []any{s, s, id}
}

// NotAfter compares available_at with at as stored (ferry writes it: UTC
// text with milliseconds), as After does.
func (dialect) NotAfter(col string, at time.Time) (string, []any) {
	return col + " <= ?", []any{at.UTC().Format("2006-01-02 15:04:05.000")}
}

// Route is the expression of the DEAD index, which SQLite matches.
func (dialect) Route() string {
	return "(CASE WHEN destination = '' THEN event_type ELSE destination END)"
}

// Settled is status: the DEAD and DISCARDED indexes are partial.
func (dialect) Settled() string { return "status" }

// SettledTerm is the partial indexes' predicate word for word: SQLite
// reads a partial index only for a statement that states it.
func (dialect) SettledTerm() string { return "status IN ('DEAD', 'DISCARDED')" }

// Tidy is empty: SQLite's indexes need no visibility map.
func (dialect) Tidy(table string) string { return "" }

// DeadIndex is empty: SQLite picks the DEAD index by itself.
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
