// Package open turns the CLI's --database-url and --broker-url into a store,
// an inbox store and a publisher. The URL's scheme picks the adapter.
package open

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

func scheme(raw string) string {
	s, _, ok := strings.Cut(raw, ":")
	if !ok {
		return ""
	}
	return strings.ToLower(s)
}

// Store opens the outbox table named table (default when empty) in the
// database at rawURL: mysql://, postgres:// (or postgresql://), sqlite:.
func Store(ctx context.Context, rawURL, table string) (ferrystore.Store, error) {
	// Each case checks err itself: a typed nil pointer returned as the
	// interface would not compare equal to nil.
	switch scheme(rawURL) {
	case "mysql", "mariadb":
		s, err := ferrymysql.Open(ctx, rawURL, &ferrymysql.Config{Table: table})
		if err != nil {
			return nil, err
		}
		return s, nil
	case "postgres", "postgresql":
		s, err := ferrypg.Open(ctx, rawURL, &ferrypg.Config{Table: table})
		if err != nil {
			return nil, err
		}
		return s, nil
	case "sqlite":
		s, err := ferrysqlite.Open(ctx, rawURL, &ferrysqlite.Config{Table: table})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, schemeError(rawURL)
}

// schemeError explains a database URL without a known scheme.
func schemeError(rawURL string) error {
	if scheme(rawURL) == "" {
		return fmt.Errorf("%w: no database URL: set --database-url or FERRY_DATABASE_URL "+
			"(mysql://user:pass@host:3306/db, postgres://user:pass@host:5432/db, sqlite:///path/file.db)", ferrytype.ErrInvalidConfig)
	}
	return fmt.Errorf("%w: database URL %s: unknown scheme %q (want mysql, postgres or sqlite)",
		ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL), scheme(rawURL))
}

// InboxConfig names an inbox's tables; empty names take the stores'
// defaults (consumed_operation, ferry_conflict, ferry_version).
type InboxConfig struct {
	MarkerTable, ConflictTable, VersionTable string
}

// InboxStore opens the inbox tables (markers, conflicts, versions) of the
// consumer database at rawURL, with the same schemes as Store. The store it
// returns closes its connections on Close. It checks that the database
// answers, not that the tables exist: the first query says so.
func InboxStore(ctx context.Context, rawURL string, cfg *InboxConfig) (ferrystore.InboxStore, error) {
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	switch scheme(rawURL) {
	case "mysql", "mariadb":
		mc, err := ferrymysql.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err)
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(4)
		return owned(ctx, rawURL, db.PingContext, db.Close, func() (ferrystore.InboxStore, error) {
			return ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: cfg.MarkerTable,
				ConflictTable: cfg.ConflictTable, VersionTable: cfg.VersionTable})
		})
	case "postgres", "postgresql":
		pc, err := pgxpool.ParseConfig(rawURL)
		if err != nil {
			return nil, fmt.Errorf("%w: database URL %s: cannot parse", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err)
		}
		return owned(ctx, rawURL, pool.Ping, func() error { pool.Close(); return nil }, func() (ferrystore.InboxStore, error) {
			return ferrypg.NewInbox(pool, &ferrypg.InboxConfig{MarkerTable: cfg.MarkerTable,
				ConflictTable: cfg.ConflictTable, VersionTable: cfg.VersionTable})
		})
	case "sqlite":
		dsn, memory, err := ferrysqlite.DSN(rawURL)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", rawURL, err)
		}
		if memory {
			db.SetMaxOpenConns(1)
		}
		return owned(ctx, rawURL, db.PingContext, db.Close, func() (ferrystore.InboxStore, error) {
			return ferrysqlite.NewInbox(db, &ferrysqlite.InboxConfig{MarkerTable: cfg.MarkerTable,
				ConflictTable: cfg.ConflictTable, VersionTable: cfg.VersionTable})
		})
	}
	return nil, schemeError(rawURL)
}

// owned builds the inbox store (which validates its table names without
// I/O), pings the database, and makes Close close the connections; on any
// failure it closes them at once.
func owned(ctx context.Context, rawURL string, ping func(context.Context) error, closeDB func() error,
	build func() (ferrystore.InboxStore, error)) (ferrystore.InboxStore, error) {
	s, err := build()
	if err != nil {
		_ = closeDB()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ping(pctx); err != nil {
		_ = closeDB()
		return nil, fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err)
	}
	return ownedInbox{InboxStore: s, closeDB: closeDB}, nil
}

// ownedInbox is an inbox store on connections it opened itself.
type ownedInbox struct {
	ferrystore.InboxStore
	closeDB func() error
}

// Close closes the store's connections.
func (o ownedInbox) Close() error { return o.closeDB() }

// NATSConfig is the stream topology of a NATS publisher.
type NATSConfig = ferrynats.Config

// AMQPConfig is the topology and settings of a RabbitMQ publisher.
type AMQPConfig = ferryamqp.Config

// BrokerConfig holds the settings of each kind of publisher; Publisher
// uses the one the URL's scheme picks.
type BrokerConfig struct {
	NATS NATSConfig
	AMQP AMQPConfig
}

// IsAMQP reports whether rawURL names a RabbitMQ server.
func IsAMQP(rawURL string) bool {
	s := scheme(rawURL)
	return s == "amqp" || s == "amqps"
}

// Publisher connects to the broker at rawURL: nats:// or tls:// (NATS
// JetStream), amqp:// or amqps:// (RabbitMQ).
func Publisher(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error) {
	if cfg == nil {
		cfg = &BrokerConfig{}
	}
	switch scheme(rawURL) {
	case "nats", "tls":
		p, err := ferrynats.Dial(ctx, rawURL, &ferrynats.DialConfig{Config: cfg.NATS})
		if err != nil {
			return nil, err
		}
		return p, nil
	case "amqp", "amqps":
		p, err := ferryamqp.Dial(ctx, rawURL, &cfg.AMQP)
		if err != nil {
			return nil, err
		}
		return p, nil
	case "":
		return nil, fmt.Errorf("%w: no broker URL: set --broker-url or FERRY_BROKER_URL "+
			"(nats://host:4222, amqp://user:pass@host:5672/vhost)", ferrytype.ErrInvalidConfig)
	}
	if _, err := url.Parse(rawURL); err != nil {
		return nil, fmt.Errorf("%w: broker URL %s: cannot parse", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	return nil, fmt.Errorf("%w: broker URL %s: unknown scheme %q (want nats, tls, amqp or amqps)", ferrytype.ErrInvalidConfig,
		ferrytype.RedactURL(rawURL), scheme(rawURL))
}
