package testsvc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/errclass"
)

// DeadKind is one kind of row InsertDead writes.
type DeadKind struct {
	// Destination and Type of the event (Type "OrderPaid" when empty).
	Destination, Type string
	// Error is its last error; each {n} in it becomes the row's number,
	// each {m} that number modulo 256. Its class is recorded with it, as a
	// relay does (the class of Error with 1 for each number).
	Error string
	// Unclassified leaves the class out, as for a row that failed before
	// the table had migration 0004.
	Unclassified bool
	// Payload is the event's JSON payload; {} when empty.
	Payload string
}

// Unclassified returns kinds with Unclassified set on each: rows that
// failed before the table had migration 0004.
func Unclassified(kinds []DeadKind) []DeadKind {
	out := make([]DeadKind, len(kinds))
	for i, k := range kinds {
		k.Unclassified = true
		out[i] = k
	}
	return out
}

// InsertDead writes n DEAD rows into the outbox table of st with one
// INSERT ... SELECT, in a few seconds for 100,000 rows. Row i (0 ≤ i < n)
// is of kinds[i % len(kinds)]; its event id is "dead-<i>", i in six digits
// (dead-000042), so that the ids sort as the rows were created, as
// ferry's own (UUIDv7) do; its aggregate
// order:<i>, its attempts 20; it was created a day ago
// plus i/7 milliseconds, so that seven rows share each creation time and
// their order rests on the event id.
func InsertDead(t testing.TB, st SQLStore, n int, kinds ...DeadKind) {
	t.Helper()
	if n < 1 || n > 1_000_000 || len(kinds) == 0 {
		t.Fatalf("InsertDead: %d rows of %d kinds", n, len(kinds))
	}
	d := st.Kind
	lit := func(s string) string {
		s = strings.ReplaceAll(s, "'", "''")
		if d == "mysql" {
			s = strings.ReplaceAll(s, `\`, `\\`)
		}
		return "'" + s + "'"
	}
	text := func(expr string) string {
		if d == "mysql" {
			return "CAST(" + expr + " AS CHAR)"
		}
		return "CAST(" + expr + " AS TEXT)"
	}
	concat := func(parts ...string) string {
		if d == "mysql" {
			return "CONCAT(" + strings.Join(parts, ", ") + ")"
		}
		return "(" + strings.Join(parts, " || ") + ")"
	}
	template := func(s string) string {
		parts := []string{}
		for s != "" {
			i := strings.IndexByte(s, '{')
			if i < 0 || len(s) < i+3 || s[i+2] != '}' || (s[i+1] != 'n' && s[i+1] != 'm') {
				parts = append(parts, lit(s))
				break
			}
			if i > 0 {
				parts = append(parts, lit(s[:i]))
			}
			if s[i+1] == 'n' {
				parts = append(parts, text("i"))
			} else {
				parts = append(parts, text("i % 256"))
			}
			s = s[i+3:]
		}
		if len(parts) == 1 {
			return parts[0]
		}
		return concat(parts...)
	}
	pick := func(val func(DeadKind) string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "CASE i %% %d", len(kinds))
		for j, k := range kinds {
			fmt.Fprintf(&b, " WHEN %d THEN %s", j, val(k))
		}
		return b.String() + " END"
	}
	var created string
	switch d {
	case "postgres":
		created = "now() - interval '1 day' + (i / 7) * interval '1 millisecond'"
	case "mysql":
		created = "NOW(6) - INTERVAL 1 DAY + INTERVAL ((i DIV 7) * 1000) MICROSECOND"
	case "sqlite":
		created = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 day', '+' || ((i / 7) / 1000.0) || ' seconds')"
	default:
		t.Fatalf("InsertDead: unknown store kind %q", d)
	}
	digits := "(SELECT 0 AS x UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	// As many digits as n needs: 0 .. 10^k-1.
	terms, from := []string{}, []string{}
	for k, scale := 0, 1; scale < n; k, scale = k+1, scale*10 {
		terms = append(terms, fmt.Sprintf("%d * d%d.x", scale, k))
		from = append(from, digits+fmt.Sprintf(" d%d", k))
	}
	nums := "SELECT " + strings.Join(terms, " + ") + " AS i FROM " + strings.Join(from, " CROSS JOIN ")
	if n == 1 {
		nums = "SELECT 0 AS i"
	}
	padded := "LPAD(" + text("i") + ", 6, '0')"
	if d == "sqlite" {
		padded = "printf('%06d', i)"
	}
	payload := pick(func(k DeadKind) string {
		if k.Payload == "" {
			return "'{}'"
		}
		return lit(k.Payload)
	})
	if d == "postgres" {
		payload = "CAST(" + payload + " AS json)"
	}
	table := `"` + st.Driver.Table() + `"`
	if d == "mysql" {
		table = "`" + st.Driver.Table() + "`"
	}
	q := "INSERT INTO " + table + " (event_id, aggregate_type, aggregate_id, event_type, payload, destination, status, attempts," +
		" last_error, error_class, created_at, available_at) SELECT " + concat(lit("dead-"), padded) + ", 'order', " + text("i") + ", " +
		pick(func(k DeadKind) string {
			if k.Type == "" {
				return lit("OrderPaid")
			}
			return lit(k.Type)
		}) + ", " + payload + ", " + pick(func(k DeadKind) string { return lit(k.Destination) }) + ", 'DEAD', 20, " +
		pick(func(k DeadKind) string { return template(k.Error) }) + ", " +
		pick(func(k DeadKind) string {
			if k.Unclassified {
				return "NULL"
			}
			return lit(errclass.Of(strings.NewReplacer("{n}", "1", "{m}", "1").Replace(k.Error)))
		}) + ", " + created + ", " + created +
		" FROM (" + nums + ") nums WHERE i < " + fmt.Sprint(n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := st.DB.ExecContext(ctx, q); err != nil {
		t.Fatalf("InsertDead: %v\n%s", err, q)
	}
}
