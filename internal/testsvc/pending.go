package testsvc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// PendingKind is one kind of row InsertPending writes.
type PendingKind struct {
	// Destination and Type of the event (Type "OrderPaid" when empty).
	Destination, Type string
	// Attempts the event took so far.
	Attempts int
	// Error is its last error; none when empty.
	Error string
	// Payload is the event's JSON payload; {} when empty.
	Payload string
}

// PendingRows describes the NEW rows InsertPending writes.
type PendingRows struct {
	// N is the number of rows, 1 to 1,000,000.
	N int
	// Prefix begins each event id: row i's is Prefix followed by i in
	// seven digits (pend-0000042 with the default "pend-"), so that the ids
	// sort as the rows were created, as ferry's own (UUIDv7) do.
	Prefix string
	// Ago is how long before now row 0 was created and made available
	// (an hour when zero); row i was created i/7 milliseconds after it, so
	// that seven rows share each time and their order rests on the event
	// id. The rows are available from their creation: the backlog of a
	// relay that fell behind.
	Ago time.Duration
	// Kinds of the rows: row i is of Kinds[i % len(Kinds)]. One kind of
	// destination orders.paid when empty.
	Kinds []PendingKind
}

// InsertPending writes rows NEW into the outbox table of st with one
// INSERT ... SELECT, as InsertDead writes DEAD ones: a backlog of a million
// events in a minute or two rather than through a million enqueues.
func InsertPending(t testing.TB, st SQLStore, rows PendingRows) {
	t.Helper()
	n, kinds, prefix := rows.N, rows.Kinds, rows.Prefix
	if len(kinds) == 0 {
		kinds = []PendingKind{{Destination: "orders.paid"}}
	}
	if prefix == "" {
		prefix = "pend-"
	}
	ago := rows.Ago
	if ago == 0 {
		ago = time.Hour
	}
	if n < 1 || n > 1_000_000 {
		t.Fatalf("InsertPending: %d rows", n)
	}
	d := st.Kind
	lit := func(s string) string {
		s = strings.ReplaceAll(s, "'", "''")
		if d == "mysql" {
			s = strings.ReplaceAll(s, `\`, `\\`)
		}
		return "'" + s + "'"
	}
	pick := func(val func(PendingKind) string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "CASE i %% %d", len(kinds))
		for j, k := range kinds {
			fmt.Fprintf(&b, " WHEN %d THEN %s", j, val(k))
		}
		return b.String() + " END"
	}
	micros := ago.Microseconds()
	var created, padded, text string
	switch d {
	case "postgres":
		created = fmt.Sprintf("now() - interval '%d microseconds' + (i / 7) * interval '1 millisecond'", micros)
		padded, text = "LPAD(CAST(i AS TEXT), 7, '0')", "CAST(i AS TEXT)"
	case "mysql":
		created = fmt.Sprintf("NOW(6) - INTERVAL %d MICROSECOND + INTERVAL ((i DIV 7) * 1000) MICROSECOND", micros)
		padded, text = "LPAD(CAST(i AS CHAR), 7, '0')", "CAST(i AS CHAR)"
	case "sqlite":
		created = fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-%.6f seconds', '+' || ((i / 7) / 1000.0) || ' seconds')",
			ago.Seconds())
		padded, text = "printf('%07d', i)", "CAST(i AS TEXT)"
	default:
		t.Fatalf("InsertPending: unknown store kind %q", d)
	}
	digits := "(SELECT 0 AS x UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	terms, from := []string{}, []string{}
	for k, scale := 0, 1; scale < n; k, scale = k+1, scale*10 {
		terms = append(terms, fmt.Sprintf("%d * d%d.x", scale, k))
		from = append(from, digits+fmt.Sprintf(" d%d", k))
	}
	nums := "SELECT " + strings.Join(terms, " + ") + " AS i FROM " + strings.Join(from, " CROSS JOIN ")
	if n == 1 {
		nums = "SELECT 0 AS i"
	}
	payload := pick(func(k PendingKind) string {
		if k.Payload == "" {
			return "'{}'"
		}
		return lit(k.Payload)
	})
	if d == "postgres" {
		payload = "CAST(" + payload + " AS json)"
	}
	id := "(" + lit(prefix) + " || " + padded + ")"
	table := `"` + st.Driver.Table() + `"`
	if d == "mysql" {
		id = "CONCAT(" + lit(prefix) + ", " + padded + ")"
		table = "`" + st.Driver.Table() + "`"
	}
	q := "INSERT INTO " + table + " (event_id, aggregate_type, aggregate_id, event_type, payload, destination, status, attempts," +
		" last_error, created_at, available_at) SELECT " + id + ", 'order', " + text + ", " +
		pick(func(k PendingKind) string {
			if k.Type == "" {
				return lit("OrderPaid")
			}
			return lit(k.Type)
		}) + ", " + payload + ", " + pick(func(k PendingKind) string { return lit(k.Destination) }) + ", 'NEW', " +
		pick(func(k PendingKind) string { return fmt.Sprint(k.Attempts) }) + ", " +
		pick(func(k PendingKind) string {
			if k.Error == "" {
				return "NULL"
			}
			return lit(k.Error)
		}) + ", " + created + ", " + created +
		" FROM (" + nums + ") nums WHERE i < " + fmt.Sprint(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := st.DB.ExecContext(ctx, q); err != nil {
		t.Fatalf("InsertPending: %v\n%s", err, q)
	}
}

// Analyze updates the planner's statistics of the outbox table of st after
// a bulk load, as InnoDB's background statistics and PostgreSQL's
// autovacuum do on a live table (VACUUM also sets the visibility map that
// lets PostgreSQL read an index alone).
func Analyze(t testing.TB, st SQLStore) {
	t.Helper()
	q := "ANALYZE " + st.Driver.Table()
	switch st.Kind {
	case "mysql":
		q = "ANALYZE TABLE " + st.Driver.Table()
	case "postgres":
		q = "VACUUM ANALYZE " + st.Driver.Table()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rows, err := st.DB.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("analyze %s: %v", st.Driver.Table(), err)
	}
	rows.Close()
}
