// Package testsvc connects tests to the real services they need: MariaDB or
// MySQL, PostgreSQL, NATS, RabbitMQ, Redis. Addresses come from the
// environment, with loopback defaults. A test whose service is unreachable
// is skipped with a message saying so, unless FERRY_REQUIRE_SERVICES=1
// (set by CI), in which case it fails: CI never skips silently. Kafka is
// the exception: NewKafka starts an in-process kfake cluster, so Kafka
// tests never skip.
package testsvc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" for database/sql
	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/natsembed"
)

// Environment variables naming the services, and their defaults.
const (
	EnvRequire  = "FERRY_REQUIRE_SERVICES"
	EnvMySQL    = "FERRY_TEST_MYSQL_URL"
	EnvPostgres = "FERRY_TEST_POSTGRES_URL"
	EnvNATS     = "FERRY_TEST_NATS_URL"
	EnvAMQP     = "FERRY_TEST_AMQP_URL"
	EnvRedis    = "FERRY_TEST_REDIS_URL"
)

var defaults = map[string]string{
	EnvMySQL:    "mysql://root@127.0.0.1:3306/test",
	EnvPostgres: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	EnvNATS:     "nats://127.0.0.1:4222",
	EnvAMQP:     "amqp://guest:guest@127.0.0.1:5672/",
	EnvRedis:    "redis://127.0.0.1:6379/0",
}

// URL returns the service URL from env, or its loopback default.
func URL(env string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return defaults[env]
}

// Required reports whether unreachable services fail tests.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable skips t, or fails it when services are required.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (%v); start it with scripts/services.sh, or set %s=1 to make this a failure",
		what, err, EnvRequire)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Name returns a fresh identifier for a test table: prefix + 8 hex digits.
func Name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Context returns a context that ends when the test does, or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var (
	mysqlOnce sync.Once
	mysqlDB   *sql.DB
	mysqlErr  error
)

// MySQL returns a shared pool on the test MariaDB/MySQL database, opened
// as an application opens it: its sessions keep the server's default
// isolation level (REPEATABLE READ), unlike the pool of ferrymysql.Open.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	mysqlOnce.Do(func() {
		cfg, err := ferrymysql.ParseURL(URL(EnvMySQL))
		if err != nil {
			mysqlErr = err
			return
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			mysqlErr = err
			return
		}
		db := sql.OpenDB(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if mysqlErr = db.PingContext(ctx); mysqlErr != nil {
			db.Close()
			return
		}
		mysqlDB = db
		mysqlDB.SetMaxOpenConns(64)
	})
	if mysqlErr != nil {
		Unavailable(t, "MariaDB/MySQL at "+ferrytype.RedactURL(URL(EnvMySQL)), mysqlErr)
	}
	return mysqlDB
}

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgDB   *sql.DB
	pgErr  error
)

func openPostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(URL(EnvPostgres))
	if err != nil {
		pgErr = err
		return
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		pgErr = err
		return
	}
	pgPool = pool
	pgDB, pgErr = sql.Open("pgx", URL(EnvPostgres))
	if pgErr == nil {
		pgDB.SetMaxOpenConns(32)
	}
}

// Postgres returns a shared pgx pool on the test PostgreSQL database.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pgOnce.Do(openPostgres)
	if pgErr != nil {
		Unavailable(t, "PostgreSQL at "+ferrytype.RedactURL(URL(EnvPostgres)), pgErr)
	}
	return pgPool
}

// PostgresSQL returns a shared database/sql pool (pgx stdlib) on the test
// PostgreSQL database.
func PostgresSQL(t testing.TB) *sql.DB {
	t.Helper()
	Postgres(t)
	return pgDB
}

// SQLite returns a new SQLite database in a temporary directory, opened
// with ferry's settings.
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	s, err := ferrysqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "ferry.db"), nil)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.DB()
}

// Kinds names the stores reachable through database/sql.
var Kinds = []string{"mysql", "postgres", "sqlite"}

// SQLStore is a migrated outbox on a fresh table, used through
// database/sql.
type SQLStore struct {
	Kind   string
	DB     *sql.DB
	Driver ferrystore.Driver[*sql.Tx]
}

// Store returns a migrated store of kind on a fresh table, dropped when the
// test ends. It skips (or fails) the test when the database is
// unreachable.
func Store(t testing.TB, kind string) SQLStore {
	t.Helper()
	table := Name("ft_")
	var (
		db  *sql.DB
		drv ferrystore.Driver[*sql.Tx]
		err error
	)
	switch kind {
	case "mysql":
		db = MySQL(t)
		drv, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
	case "postgres":
		db = PostgresSQL(t)
		drv, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
	case "sqlite":
		db = SQLite(t)
		drv, err = ferrysqlite.New(db, &ferrysqlite.Config{Table: table})
	default:
		t.Fatalf("unknown store kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	Migrated(t, drv, func(stmt string) error { _, err := db.Exec(stmt); return err })
	return SQLStore{Kind: kind, DB: db, Driver: drv}
}

// Migrated migrates s and drops its tables when the test ends; exec runs
// one statement on the store's database.
func Migrated(t testing.TB, s ferrystore.Store, exec func(string) error) {
	t.Helper()
	ctx := Context(t, time.Minute)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", s.Table(), err)
	}
	t.Cleanup(func() {
		for _, name := range []string{s.Table() + "_relay", s.Table() + "_seq", s.Table()} {
			q := `DROP TABLE IF EXISTS "` + name + `"`
			if s.Dialect() == "mysql" {
				q = "DROP TABLE IF EXISTS `" + name + "`"
			}
			if err := exec(q); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		}
		q := "DELETE FROM ferry_migration WHERE component = 'outbox:" + s.Table() + "'"
		if err := exec(q); err != nil {
			t.Logf("forget migrations of %s: %v", s.Table(), err)
		}
	})
}

// NATS returns a connection to the test NATS server (with JetStream),
// closed when the test ends.
func NATS(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(URL(EnvNATS), nats.Timeout(3*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		Unavailable(t, "NATS at "+URL(EnvNATS), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var (
	embedOnce sync.Once
	embedURL  string
	embedErr  error
)

// EmbeddedNATS returns a connection to a NATS server (JetStream on) running
// in the test process, shared by the package's tests.
func EmbeddedNATS(t testing.TB) *nats.Conn {
	t.Helper()
	embedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-nats-")
		if err != nil {
			embedErr = err
			return
		}
		s, err := natsembed.Start(dir)
		if err != nil {
			embedErr = err
			return
		}
		embedURL = s.ClientURL()
	})
	if embedErr != nil {
		t.Fatalf("embedded NATS: %v", embedErr)
	}
	nc, err := nats.Connect(embedURL)
	if err != nil {
		t.Fatalf("connect to embedded NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// InboxTables returns fresh names for an inbox's marker, conflict and
// version tables.
func InboxTables() (markers, conflicts, versions string) {
	base := Name("fi_")
	return base + "_m", base + "_c", base + "_v"
}

// MigratedInbox migrates s and drops tables when the test ends; exec runs
// one statement on the store's database.
func MigratedInbox(t testing.TB, s ferrystore.InboxStore, exec func(string) error, markers string, tables ...string) {
	t.Helper()
	ctx := Context(t, time.Minute)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate inbox: %v", err)
	}
	t.Cleanup(func() {
		for _, name := range tables {
			q := `DROP TABLE IF EXISTS "` + name + `"`
			if s.Dialect() == "mysql" {
				q = "DROP TABLE IF EXISTS `" + name + "`"
			}
			if err := exec(q); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		}
		_ = exec("DELETE FROM ferry_migration WHERE component = 'inbox:" + markers + "'")
	})
}
