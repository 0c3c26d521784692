// Package testsvc connects tests to the real services they need: MariaDB or
// MySQL, PostgreSQL, NATS, RabbitMQ, Redis. Addresses come from the
// environment, with loopback defaults. A test whose service is unreachable
// is skipped with a message saying so, unless FERRY_REQUIRE_SERVICES=1
// (set by CI), in which case it fails: CI never skips silently. Kafka is
// the exception: NewKafka starts an in-process kfake cluster, so Kafka
// tests never skip.
//
// It is a module of its own, which requires every adapter, kfake and
// nats-server: only modules no program imports (integration, cmd/ferry,
// examples, deploy, chaos) require it. A library module's tests use
// testenv (in the core) and their broker's own test package instead.
package testsvc

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" for database/sql
	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats/ferrynatstest"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The generic parts of the test bed, from testenv (core module), and the
// adapters' own test helpers (ferryamqptest, ferrynatstest), under the names
// the test bed's users know.
const (
	EnvRequire         = testenv.EnvRequire
	EnvMySQL           = testenv.EnvMySQL
	EnvPostgres        = testenv.EnvPostgres
	EnvNATS            = testenv.EnvNATS
	EnvAMQP            = testenv.EnvAMQP
	EnvRedis           = testenv.EnvRedis
	EnvMySQLBinlog     = testenv.EnvMySQLBinlog
	EnvPostgresLogical = testenv.EnvPostgresLogical
	EnvRabbitMQCtl     = ferryamqptest.EnvRabbitMQCtl
	EnvDisruptAMQP     = ferryamqptest.EnvDisruptAMQP
	EnvDisruptNode     = ferryamqptest.EnvDisruptNode
)

var (
	URL           = testenv.URL
	Required      = testenv.Required
	Unavailable   = testenv.Unavailable
	Slow          = testenv.Slow
	Name          = testenv.Name
	Context       = testenv.Context
	WaitFor       = testenv.WaitFor
	BinlogLock    = testenv.BinlogLock
	Proxy         = testenv.Proxy
	Migrated      = testenv.Migrated
	InboxTables   = testenv.InboxTables
	MigratedInbox = testenv.MigratedInbox

	UseRabbitMQ            = ferryamqptest.UseRabbitMQ
	DisruptRabbitMQ        = ferryamqptest.DisruptRabbitMQ
	RabbitMQ               = ferryamqptest.RabbitMQ
	RabbitMQQueue          = ferryamqptest.RabbitMQQueue
	DeleteRabbitMQQueue    = ferryamqptest.DeleteRabbitMQQueue
	DeleteRabbitMQExchange = ferryamqptest.DeleteRabbitMQExchange
	ReadRabbitMQQueue      = ferryamqptest.ReadRabbitMQQueue
	RabbitMQCtl            = ferryamqptest.RabbitMQCtl
	DisruptTarget          = ferryamqptest.DisruptTarget

	NewCerts        = testenv.NewCerts
	NATS            = ferrynatstest.NATS
	JetStreamStream = ferrynatstest.JetStreamStream
	ReadStream      = ferrynatstest.ReadStream
)

// Types of the test bed's helpers.
type (
	LogBuffer    = testenv.LogBuffer
	Certs        = testenv.Certs
	RabbitQueue  = ferryamqptest.RabbitQueue
	RabbitMQNode = ferryamqptest.Node
	StreamMsg    = ferrynatstest.StreamMsg
)

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
	Driver SQLDriver
}

// SQLDriver is what every store of database/sql is: a driver of *sql.Tx
// with the operator's surface.
type SQLDriver interface {
	ferrystore.Driver[*sql.Tx]
	ferrystore.Admin
}

// Store returns a migrated store of kind on a fresh table, dropped when the
// test ends. It skips (or fails) the test when the database is
// unreachable.
func Store(t testing.TB, kind string) SQLStore {
	t.Helper()
	table := Name("ft_")
	var (
		db  *sql.DB
		drv SQLDriver
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

// StoreOwnDatabase is Store, on PostgreSQL in a database made for the
// test (dropped when it ends), and returns the URL of the store's database.
// A test whose verdict rests on what a vacuum marks all-visible (an
// index-only scan, a plan that prefers one) needs it: an open transaction
// or an ANALYZE of another test in the shared database holds back the
// vacuum's horizon, but those of other databases do not. Other kinds get
// Store and their shared database's URL.
func StoreOwnDatabase(t testing.TB, kind string) (SQLStore, string) {
	t.Helper()
	if kind != "postgres" {
		env := map[string]string{"mysql": EnvMySQL, "sqlite": ""}[kind]
		st := Store(t, kind)
		if env == "" {
			return st, ""
		}
		return st, URL(env)
	}
	admin := PostgresSQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := Name("ferry_own_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	u, err := url.Parse(URL(EnvPostgres))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := ferrypg.NewStdlib(db, &ferrypg.Config{Table: Name("ft_")})
	if err != nil {
		t.Fatal(err)
	}
	Migrated(t, drv, func(stmt string) error { _, err := db.Exec(stmt); return err })
	return SQLStore{Kind: kind, DB: db, Driver: drv}, u.String()
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

var (
	logDBOnce sync.Once
	logDBs    = map[string]*sql.DB{}
	logDBErrs = map[string]error{}
)

// LogStore returns a migrated store of kind ("mysql" or "postgres") on a
// fresh table in the database that keeps a change log for the log relay
// (EnvMySQLBinlog: MariaDB with its binlog in ROW format; EnvPostgresLogical:
// PostgreSQL with wal_level=logical), dropped when the test ends. It skips
// (or fails) the test when that server is unreachable, and returns the
// server's URL with it.
func LogStore(t testing.TB, kind string) (SQLStore, string) {
	t.Helper()
	logDBOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cfg, err := ferrymysql.ParseURL(URL(EnvMySQLBinlog)); err != nil {
			logDBErrs["mysql"] = err
		} else if conn, err := mysql.NewConnector(cfg); err != nil {
			logDBErrs["mysql"] = err
		} else {
			db := sql.OpenDB(conn)
			if err := db.PingContext(ctx); err != nil {
				db.Close()
				logDBErrs["mysql"] = err
			} else {
				db.SetMaxOpenConns(64)
				logDBs["mysql"] = db
			}
		}
		db, err := sql.Open("pgx", URL(EnvPostgresLogical))
		if err == nil {
			err = db.PingContext(ctx)
		}
		if err != nil {
			logDBErrs["postgres"] = err
		} else {
			db.SetMaxOpenConns(32)
			logDBs["postgres"] = db
		}
	})
	env := map[string]string{"mysql": EnvMySQLBinlog, "postgres": EnvPostgresLogical}[kind]
	if env == "" {
		t.Fatalf("no log database of kind %q", kind)
	}
	if err := logDBErrs[kind]; err != nil {
		Unavailable(t, kind+" with a change log at "+ferrytype.RedactURL(URL(env)), err)
	}
	db := logDBs[kind]
	table := Name("ft_")
	var (
		drv SQLDriver
		err error
	)
	if kind == "mysql" {
		drv, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
	} else {
		drv, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
	}
	if err != nil {
		t.Fatal(err)
	}
	Migrated(t, drv, func(stmt string) error { _, err := db.Exec(stmt); return err })
	return SQLStore{Kind: kind, DB: db, Driver: drv}, URL(env)
}
