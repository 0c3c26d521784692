package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// Target is the database a bench runs against, on tables of its own: the
// outbox store as the relay uses it, and a database/sql pool with a driver
// on the same table for business transactions.
type Target struct {
	// Dialect is "mysql", "postgres" or "sqlite".
	Dialect string
	// Store is the outbox as the relay opens it (pgx for PostgreSQL).
	Store ferrystore.Store
	// DB is a database/sql pool on the same database.
	DB *sql.DB
	// Driver writes events in *sql.Tx transactions of DB.
	Driver ferrystore.Driver[*sql.Tx]
	// Aggregates the drains' events belong to, round robin: what an
	// ordered drain can claim at once. Default 1,000.
	Aggregates int

	name   string // prefix of every table the bench creates
	url    string // the database URL, for relays in their own processes
	closes []func()
	tables []string // tables to drop on Close, in order
}

// aggregates is how many aggregates n drained events belong to.
func (t *Target) aggregates(n int) int {
	a := t.Aggregates
	if a <= 0 {
		a = DefaultAggregates
	}
	return max(min(a, n), 1)
}

// DefaultAggregates is the drains' default number of aggregates.
const DefaultAggregates = 1000

// OpenTarget opens the database at rawURL (mysql://, postgres://, sqlite:)
// and creates an outbox table named after prefix, which Close drops again.
func OpenTarget(ctx context.Context, rawURL, prefix string) (*Target, error) {
	t := &Target{name: prefix, url: rawURL}
	table := prefix + "_outbox"
	// The URL's scheme picks the store, as for ferry relay; the bench then
	// needs each store's own connections for its producers.
	st, err := open.Store(ctx, rawURL, table)
	if err != nil {
		return nil, err
	}
	t.closes = append(t.closes, func() { st.Close() })
	switch s := st.(type) {
	case *ferrymysql.Store:
		t.Dialect, t.Store, t.DB, t.Driver = "mysql", s, s.DB(), s
	case *ferrypg.Store:
		db := stdlib.OpenDBFromPool(s.Pool())
		t.closes = append([]func(){func() { db.Close() }}, t.closes...)
		d, err := ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
		if err != nil {
			t.Close()
			return nil, err
		}
		t.Dialect, t.Store, t.DB, t.Driver = "postgres", s, db, d
	case *ferrysqlite.Store:
		t.Dialect, t.Store, t.DB, t.Driver = "sqlite", s, s.DB(), s
	default:
		t.Close()
		return nil, fmt.Errorf("%w: database URL %s: the bench has no producers for a %s store",
			ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL), st.Dialect())
	}
	t.tables = append(t.tables, table, table+"_seq", table+"_relay", table+"_lease")
	if err := t.Store.Migrate(ctx); err != nil {
		t.Close()
		return nil, fmt.Errorf("create the bench's outbox table %s: %w", table, err)
	}
	return t, nil
}

// Close drops the tables the bench created and closes the connections.
func (t *Target) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range t.tables {
		_, _ = t.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.quote(name))
	}
	for _, name := range t.tables {
		_, _ = t.DB.ExecContext(ctx, "DELETE FROM ferry_migration WHERE component IN ('outbox:"+name+"', 'inbox:"+name+"')")
	}
	for _, c := range t.closes {
		c()
	}
}

func (t *Target) quote(name string) string {
	if t.Dialect == "mysql" {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// bind rewrites ? placeholders as $1, $2, ... for PostgreSQL.
func (t *Target) bind(q string) string { return sqlstore.Rebind(t.Dialect, q) }

// now is the dialect's current-time expression with sub-second precision.
func (t *Target) now() string {
	switch t.Dialect {
	case "mysql":
		return "NOW(6)"
	case "postgres":
		return "now()"
	}
	return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
}

// table creates a business table named prefix_suffix with columns cols,
// dropped on Close, and returns its quoted name.
func (t *Target) table(ctx context.Context, suffix, cols string) (string, error) {
	name := t.name + "_" + suffix
	q := t.quote(name)
	if _, err := t.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+q); err != nil {
		return "", err
	}
	if _, err := t.DB.ExecContext(ctx, "CREATE TABLE "+q+" ("+cols+")"); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	t.tables = append([]string{name}, t.tables...)
	return q, nil
}

// truncate empties the outbox table between runs.
func (t *Target) truncate(ctx context.Context) error {
	for _, name := range []string{t.Store.Table(), t.Store.Table() + "_seq"} {
		q := "DELETE FROM " + t.quote(name)
		if t.Dialect != "sqlite" {
			q = "TRUNCATE TABLE " + t.quote(name)
		}
		if _, err := t.DB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("empty %s: %w", name, err)
		}
	}
	return nil
}

// Payload is the event body every bench publishes: about 1 KiB of JSON,
// the size the machine's raw limits were measured with.
var Payload = func() json.RawMessage {
	items := make([]map[string]any, 12)
	for i := range items {
		items[i] = map[string]any{"sku": fmt.Sprintf("SKU-%06d", i), "qty": i + 1, "price": "19.90",
			"name": "A product with a reasonably descriptive name"}
	}
	b, _ := json.Marshal(map[string]any{"orderId": 42, "userId": 7, "amount": "238.80", "currency": "EUR", "items": items})
	return b
}()

// fill enqueues n events through EnqueueTx, 500 per transaction, to
// destination dest; event i belongs to aggregate agg(i).
func (t *Target) fill(ctx context.Context, n int, dest string, agg func(i int) string) error {
	ob, err := ferry.NewOutbox(t.Driver, nil)
	if err != nil {
		return err
	}
	const perTx = 500
	for i := 0; i < n; i += perTx {
		evs := make([]ferry.Event, 0, perTx)
		for j := i; j < n && j < i+perTx; j++ {
			evs = append(evs, ferry.Event{AggregateType: "order", AggregateID: agg(j), Type: "OrderPaid",
				Destination: dest, Payload: Payload})
		}
		if err := t.enqueueTx(ctx, ob, evs); err != nil {
			return err
		}
	}
	return nil
}

// enqueueTx commits evs through ob in one transaction of its own.
func (t *Target) enqueueTx(ctx context.Context, ob *ferry.Outbox[*sql.Tx], evs []ferry.Event) error {
	tx, err := t.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := ob.EnqueueTx(ctx, tx, evs...); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// retain adds n SENT rows to the outbox table, as retention would find
// them, 100,000 per statement, generated by the database itself.
func (t *Target) retain(ctx context.Context, n int) error {
	digits := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	num := "a.d*10000 + b.d*1000 + c.d*100 + e.d*10 + f.d"
	from := " FROM " + digits + " a CROSS JOIN " + digits + " b CROSS JOIN " + digits + " c CROSS JOIN " +
		digits + " e CROSS JOIN " + digits + " f"
	id := func(chunk int) string {
		n := fmt.Sprintf("(%d + %s)", chunk*100000, num)
		if t.Dialect == "mysql" {
			return "CONCAT('retained-', " + n + ")"
		}
		return "'retained-' || " + n
	}
	for chunk := 0; chunk*100000 < n; chunk++ {
		size := min(100000, n-chunk*100000)
		q := "INSERT INTO " + t.quote(t.Store.Table()) +
			" (event_id, aggregate_type, aggregate_id, event_type, payload, status, attempts, available_at, created_at, sent_at)" +
			" SELECT " + id(chunk) + ", 'order', " + id(chunk) + ", 'OrderPaid', '{}', 'SENT', 1, " + t.now() + ", " + t.now() + ", " + t.now() +
			from + fmt.Sprintf(" WHERE %s < %d", num, size)
		if _, err := t.DB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("retain rows %d..: %w", chunk*100000, err)
		}
	}
	if t.Dialect == "postgres" {
		_, err := t.DB.ExecContext(ctx, "ANALYZE "+t.quote(t.Store.Table()))
		return err
	}
	if t.Dialect == "mysql" {
		_, err := t.DB.ExecContext(ctx, "ANALYZE TABLE "+t.quote(t.Store.Table()))
		return err
	}
	return nil
}
