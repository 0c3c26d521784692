// Package shop is ferry's reference system: an order service, a relay, a
// points consumer and an SMS consumer, each a separate process, wired
// through ferry's outbox, relay, broker, inbox and task worker. RunRole
// runs one of them, with crash points and lost confirms injected on
// request. The shop's binary (cmd/shop) hands its arguments to RunRole:
// the chaos harness runs that binary's roles on MariaDB or PostgreSQL with
// RabbitMQ, killing its processes and breaking its connections, and
// RunDemo (`shop demo`) runs the same roles, as processes of the same
// binary, on SQLite and an embedded NATS server (or Kafka), killing each
// once at a crash point. Both then check the result against the
// databases. Fault injection lives here and in that binary, never in
// ferry's own commands or binary.
//
// The data:
//
//   - orders database: shop_order (the ground truth: what committed), the
//     outbox (outbox_event), and shop_injected (the faults the order
//     service injected on purpose: poison payloads, conflicting payments).
//   - points database: points_account (the seed's), shop_award_log (one
//     row per points effect, deliberately without a unique key, so that a
//     second effect would show), the inbox tables, and sms_task (the SMS
//     consumer's task outbox).
//   - the SMS gateway: an HTTP service that honours Idempotency-Key and
//     counts calls and executions per key.
package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// Event types and their destinations (NATS subjects, AMQP routing keys).
const (
	OrderCreated = "OrderCreated"
	OrderPaid    = "OrderPaid"
	RouteCreated = "shop.order.created"
	RoutePaid    = "shop.order.paid"
	// TaskTable is the SMS consumer's task outbox.
	TaskTable = "sms_task"
	// Users is the number of points accounts, user ids 1..Users.
	Users = 50
)

// Consumer names: each has its own inbox markers.
const (
	PointsConsumer = "points-award"
	SMSConsumer    = "sms-notify"
)

// PaidPayload is the OrderPaid event body.
type PaidPayload struct {
	OrderID int64 `json:"order_id"`
	UserID  int64 `json:"user_id"`
	Amount  int64 `json:"amount"`
}

// DB is an open shop database: a database/sql pool and its dialect.
type DB struct {
	*sql.DB
	Dialect string
	close   func() error
}

// maxConns bounds a shop pool; as many are kept idle. database/sql keeps
// two by default, so a process whose relay lanes, sweeper and heartbeat
// query at once closed a connection after nearly every query and opened
// another: on PostgreSQL, a backend forked and its caches loaded each
// time.
const maxConns = 16

// Open opens the database at url (mysql://, postgres://, sqlite:).
func Open(ctx context.Context, url string) (*DB, error) {
	switch {
	case strings.HasPrefix(url, "mysql:") || strings.HasPrefix(url, "mariadb:"):
		cfg, err := ferrymysql.ParseURL(url)
		if err != nil {
			return nil, err
		}
		if pct := commitResetPct(); pct > 0 {
			cfg.DialFunc = commitResetDial(pct, (&net.Dialer{}).DialContext)
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(conn)
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, err
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		return &DB{DB: db, Dialect: "mysql", close: db.Close}, nil
	case strings.HasPrefix(url, "postgres:") || strings.HasPrefix(url, "postgresql:"):
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		if pct := commitResetPct(); pct > 0 {
			cfg.DialFunc = commitResetDial(pct, cfg.DialFunc)
		}
		db := stdlib.OpenDB(*cfg)
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, err
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		return &DB{DB: db, Dialect: "postgres", close: db.Close}, nil
	case strings.HasPrefix(url, "sqlite:"):
		s, err := ferrysqlite.Open(ctx, url, nil)
		if err != nil {
			return nil, err
		}
		return &DB{DB: s.DB(), Dialect: "sqlite", close: s.Close}, nil
	}
	return nil, fmt.Errorf("shop: unsupported database URL scheme in %q", url)
}

// Close closes the pool.
func (db *DB) Close() error { return db.close() }

// Q rewrites ? placeholders for PostgreSQL.
func (db *DB) Q(q string) string { return sqlstore.Rebind(db.Dialect, q) }

// Outbox returns the outbox store of table on db.
func (db *DB) Outbox(table string) (ferrystore.Driver[*sql.Tx], error) {
	switch db.Dialect {
	case "mysql":
		return ferrymysql.New(db.DB, &ferrymysql.Config{Table: table})
	case "postgres":
		return ferrypg.NewStdlib(db.DB, &ferrypg.Config{Table: table})
	default:
		return ferrysqlite.New(db.DB, &ferrysqlite.Config{Table: table})
	}
}

// Inbox returns the inbox store on db (default table names).
func (db *DB) Inbox() (ferrystore.IdempotencyDriver[*sql.Tx], error) {
	switch db.Dialect {
	case "mysql":
		return ferrymysql.NewInbox(db.DB, nil)
	case "postgres":
		return ferrypg.NewStdlibInbox(db.DB, nil)
	default:
		return ferrysqlite.NewInbox(db.DB, nil)
	}
}

// SetupOrders creates the orders database's tables and migrates its outbox.
func SetupOrders(ctx context.Context, db *DB) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS shop_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, amount BIGINT NOT NULL, status VARCHAR(16) NOT NULL)",
		// What the order service broke on purpose, for the checker.
		"CREATE TABLE IF NOT EXISTS shop_injected (order_id BIGINT NOT NULL, kind VARCHAR(16) NOT NULL, PRIMARY KEY (order_id, kind))",
		// The payments: no unique key per order on purpose, so that a
		// second charge shows.
		"CREATE TABLE IF NOT EXISTS shop_payment (id VARCHAR(64) PRIMARY KEY, order_id BIGINT NOT NULL, amount BIGINT NOT NULL)",
		// The answer the order service got for each payment, for the
		// checker to compare with what committed.
		"CREATE TABLE IF NOT EXISTS shop_payment_reply (order_id BIGINT PRIMARY KEY, status INT NOT NULL," +
			" payment_id VARCHAR(64) NOT NULL, attempts INT NOT NULL, replayed BOOLEAN NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("setup orders: %w", err)
		}
	}
	ob, err := db.Outbox("")
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	// The payments API's idempotency keys are an inbox table.
	ib, err := db.Inbox()
	if err != nil {
		return err
	}
	return ib.Migrate(ctx)
}

// SetupPoints creates the points database's tables, accounts, inbox and
// task outbox.
func SetupPoints(ctx context.Context, db *DB) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS points_account (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)",
		// No unique key on purpose: a second effect for one order shows.
		"CREATE TABLE IF NOT EXISTS shop_award_log (order_id BIGINT NOT NULL, user_id BIGINT NOT NULL, amount BIGINT NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("setup points: %w", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM points_account").Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		var vals []string
		for u := 1; u <= Users; u++ {
			vals = append(vals, fmt.Sprintf("(%d, 0)", u))
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO points_account VALUES "+strings.Join(vals, ",")); err != nil {
			return fmt.Errorf("setup points: %w", err)
		}
	}
	ib, err := db.Inbox()
	if err != nil {
		return err
	}
	if err := ib.Migrate(ctx); err != nil {
		return err
	}
	tasks, err := db.Outbox(TaskTable)
	if err != nil {
		return err
	}
	return tasks.Migrate(ctx)
}

var errNoAccount = errors.New("shop: no such account")
