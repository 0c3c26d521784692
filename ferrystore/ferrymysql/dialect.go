package ferrymysql

import (
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/sqlstore"
)

// dialect spells MySQL's and MariaDB's SQL for the shared store: DATETIME(6)
// times from NOW(6), durations as microseconds.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

// Classify wraps a driver error in ferry's classes.
func (dialect) Classify(err error) error { return classify(err) }

func (dialect) Name() string                 { return "mysql" }
func (dialect) Quote(name string) string     { return quote(name) }
func (dialect) Rebind(q string) string       { return q }
func (dialect) Now() string                  { return "NOW(6)" }
func (dialect) Shift() string                { return "NOW(6) + INTERVAL ? MICROSECOND" }
func (dialect) Duration(d time.Duration) any { return d.Microseconds() }
func (dialect) CountIf(cond string) string   { return "COALESCE(SUM(" + cond + "), 0)" }
func (dialect) Text(col string) string       { return col }
func (dialect) JSON() string                 { return "?" }
func (dialect) Moment(expr string) string    { return expr }
func (dialect) Ping() string                 { return "SELECT 1" }

// ContainsFold lowers both sides: the outbox's text is in a binary
// collation, whose LIKE is case-sensitive.
func (dialect) ContainsFold(col string) string { return "LOWER(" + col + ") LIKE LOWER(?) ESCAPE '!'" }

func (dialect) Concat(exprs ...string) string { return "CONCAT(" + strings.Join(exprs, ", ") + ")" }
func (dialect) Update() string {
	return "/*M! SET STATEMENT check_constraint_checks = 0 FOR */ UPDATE "
}
func (dialect) AgeMicros(expr string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + expr + ", NOW(6))"
}
func (dialect) In(col string, vals []string) (string, []any) { return sqlstore.InList(col, vals) }

// KeyText converts the key to utf8mb4 text in the outbox's binary
// collation, so that the comparison with aggregate_id can use its index.
func (dialect) KeyText(expr string) string {
	return "CONVERT(" + expr + " USING utf8mb4) COLLATE utf8mb4_bin"
}

// DeleteLimited uses MySQL's DELETE ... ORDER BY ... LIMIT.
func (dialect) DeleteLimited(table, where, order string) string {
	return "DELETE FROM " + table + " WHERE " + where + " ORDER BY " + order + " LIMIT ?"
}

// After bounds col from below first, a range on the index, and checks the
// tie on event_id among the rows it reads.
func (dialect) After(col string, at time.Time, id string) (string, []any) {
	at = at.UTC()
	return "(" + col + " >= ? AND (" + col + " > ? OR event_id > ?))", []any{at, at, id}
}

// NotAfter compares col with at in UTC, as After does.
func (dialect) NotAfter(col string, at time.Time) (string, []any) {
	return col + " <= ?", []any{at.UTC()}
}

// Route and Settled are migration 0004's virtual columns.
func (dialect) Route() string   { return "route" }
func (dialect) Settled() string { return "settled_status" }

// SettledTerm is empty: MySQL has no partial index.
func (dialect) SettledTerm() string { return "" }

// Tidy is empty: InnoDB's purge and its persistent statistics follow a
// bulk change by themselves, and its secondary indexes need no
// visibility map.
func (dialect) Tidy(table string) string { return "" }

// DeadIndex forces idx_dead: see Outbox.deadHint.
func (dialect) DeadIndex() string { return " FORCE INDEX (idx_dead)" }

// UpsertIf sets each column to IF(cond, VALUES(col), col): MySQL evaluates
// the assignments in order, so cond is asked again for each, and must keep
// its answer once the first column holds its new value.
func (dialect) UpsertIf(_ string, cols []string, cond string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = IF(" + cond + ", VALUES(" + c + "), " + c + ")"
	}
	return "ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}

// Inserted is VALUES(col).
func (dialect) Inserted(col string) string { return "VALUES(" + col + ")" }

// Upsert uses ON DUPLICATE KEY UPDATE with VALUES(col), which MariaDB and
// MySQL 8 both read (MySQL 8.0.20+ prefers a row alias, which MariaDB
// lacks, and only warns).
func (dialect) Upsert(_ string, cols []string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = VALUES(" + c + ")"
	}
	return "ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}
