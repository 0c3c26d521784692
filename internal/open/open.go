// Package open turns the CLI's --database-url and --broker-url into a store,
// an inbox store and a publisher. The URL's scheme picks the adapter; each
// store package parses and opens its own URLs, and names its schemes.
package open

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrylog/ferrybinlog"
	"github.com/ferrydev/ferry/ferrylog/ferrypgoutput"
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

// database is how one store package opens its URLs.
type database struct {
	schemes func() []string
	check   func(rawURL string) error // the URL's form, without connecting
	store   func(ctx context.Context, rawURL, table string) (ferrystore.Admin, error)
	// feed opens the database's log feed for the log relay; nil where
	// the database keeps no log a relay can read.
	feed  func(rawURL, table string, c *FeedConfig) (ferrystore.LogFeed, error)
	inbox func(ctx context.Context, rawURL string, cfg *InboxConfig) (Inbox, error)
}

// databases lists the store packages; each parses and opens its own URLs.
var databases = []database{
	{
		schemes: ferrymysql.Schemes,
		check: func(rawURL string) error {
			return checkMySQL(rawURL, func(u string) error { _, err := ferrymysql.ParseURL(u); return err })
		},
		store: func(ctx context.Context, rawURL, table string) (ferrystore.Admin, error) {
			return asStore(ferrymysql.Open(ctx, rawURL, &ferrymysql.Config{Table: table}))
		},
		feed: func(rawURL, table string, c *FeedConfig) (ferrystore.LogFeed, error) {
			return asFeed(ferrybinlog.New(&ferrybinlog.Config{URL: rawURL, Table: table, Logger: c.Logger}))
		},
		inbox: func(ctx context.Context, rawURL string, c *InboxConfig) (Inbox, error) {
			return asInbox(ferrymysql.OpenInbox(ctx, rawURL, &ferrymysql.InboxConfig{MarkerTable: c.MarkerTable,
				ConflictTable: c.ConflictTable, VersionTable: c.VersionTable, KeyTable: c.KeyTable}))
		},
	},
	{
		schemes: ferrypg.Schemes,
		check: func(rawURL string) error {
			return checkPostgres(rawURL, func(u string) error { _, err := ferrypg.ParseURL(u); return err })
		},
		store: func(ctx context.Context, rawURL, table string) (ferrystore.Admin, error) {
			return asStore(ferrypg.Open(ctx, rawURL, &ferrypg.Config{Table: table}))
		},
		feed: func(rawURL, table string, c *FeedConfig) (ferrystore.LogFeed, error) {
			return asFeed(ferrypgoutput.New(&ferrypgoutput.Config{URL: rawURL, Table: table, Slot: c.Slot,
				Publication: c.Publication, Logger: c.Logger}))
		},
		inbox: func(ctx context.Context, rawURL string, c *InboxConfig) (Inbox, error) {
			return asInbox(ferrypg.OpenInbox(ctx, rawURL, &ferrypg.InboxConfig{MarkerTable: c.MarkerTable,
				ConflictTable: c.ConflictTable, VersionTable: c.VersionTable, KeyTable: c.KeyTable}))
		},
	},
	{
		schemes: ferrysqlite.Schemes,
		check: func(rawURL string) error {
			_, _, err := ferrysqlite.DSN(rawURL)
			return err
		},
		store: func(ctx context.Context, rawURL, table string) (ferrystore.Admin, error) {
			return asStore(ferrysqlite.Open(ctx, rawURL, &ferrysqlite.Config{Table: table}))
		},
		inbox: func(ctx context.Context, rawURL string, c *InboxConfig) (Inbox, error) {
			return asInbox(ferrysqlite.OpenInbox(ctx, rawURL, &ferrysqlite.InboxConfig{MarkerTable: c.MarkerTable,
				ConflictTable: c.ConflictTable, VersionTable: c.VersionTable, KeyTable: c.KeyTable}))
		},
	},
}

// asStore and asInbox return a store package's result as the interface,
// checking err first: a typed nil pointer returned as the interface would
// not compare equal to nil.
func asStore[S ferrystore.Admin](s S, err error) (ferrystore.Admin, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func asFeed[F ferrystore.LogFeed](f F, err error) (ferrystore.LogFeed, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

// FeedConfig tunes a log feed; empty fields take the feed's defaults.
type FeedConfig struct {
	// Slot and Publication name PostgreSQL's replication slot and
	// publication (default "ferry_" + table).
	Slot, Publication string
	Logger            *slog.Logger
}

// Feed returns the log feed of the outbox table named table in the
// database at rawURL, for the log relay: the binlog of mysql://, logical
// replication of postgres://. It does not connect.
func Feed(rawURL, table string, cfg *FeedConfig) (ferrystore.LogFeed, error) {
	d, err := databaseFor(rawURL)
	if err != nil {
		return nil, err
	}
	if d.feed == nil {
		return nil, fmt.Errorf("%w: SQLite keeps no change log a relay can read: use the polling relay (--source poll)",
			ferrytype.ErrInvalidConfig)
	}
	if err := ValidateDatabaseURL(rawURL); err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &FeedConfig{}
	}
	return d.feed(rawURL, table, cfg)
}

func asInbox[S Inbox](s S, err error) (Inbox, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// databaseFor returns the store package whose schemes include rawURL's.
func databaseFor(rawURL string) (database, error) {
	sch := scheme(rawURL)
	for _, d := range databases {
		if slices.Contains(d.schemes(), sch) {
			return d, nil
		}
	}
	return database{}, schemeError(rawURL)
}

// Store opens the outbox table named table (default when empty) in the
// database at rawURL: mysql://, postgres:// (or postgresql://), sqlite:.
// Every store is an Admin: the relay uses its Store part, the operator's
// commands the rest.
func Store(ctx context.Context, rawURL, table string) (ferrystore.Admin, error) {
	d, err := databaseFor(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ValidateDatabaseURL(rawURL); err != nil {
		return nil, err
	}
	return d.store(ctx, rawURL, table)
}

// schemeError explains a database URL without a known scheme.
func schemeError(rawURL string) error {
	if strings.TrimSpace(rawURL) == "" {
		return fmt.Errorf("%w: no database URL: set --database-url or FERRY_DATABASE_URL (%s)",
			ferrytype.ErrInvalidConfig, databaseForms)
	}
	return unschemed("database", rawURL, "mysql, postgres or sqlite", databaseForms)
}

// InboxConfig names an inbox's tables; empty names take the stores'
// defaults (consumed_operation, ferry_conflict, ferry_version).
type InboxConfig struct {
	MarkerTable, ConflictTable, VersionTable, KeyTable string
}

// Inbox is an inbox store with the idempotency keys of its database, as
// every store package opens it.
type Inbox interface {
	ferrystore.InboxStore
	ferrystore.IdempotencyStore
}

// InboxStore opens the inbox tables (markers, conflicts, versions,
// idempotency keys) of the consumer database at rawURL, with the same
// schemes as Store. The store it returns closes its connections on Close.
// It checks that the database answers, not that the tables exist: the
// first query says so.
func InboxStore(ctx context.Context, rawURL string, cfg *InboxConfig) (Inbox, error) {
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	d, err := databaseFor(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ValidateDatabaseURL(rawURL); err != nil {
		return nil, err
	}
	return d.inbox(ctx, rawURL, cfg)
}

// NATSConfig is the stream topology of a NATS publisher.
type NATSConfig = ferrynats.Config

// AMQPConfig is the topology and settings of a RabbitMQ publisher.
type AMQPConfig = ferryamqp.Config

// KafkaConfig is the topic derivation and topology of a Kafka publisher.
type KafkaConfig = ferrykafka.Config

// BrokerConfig holds the settings of each kind of publisher; Publisher
// uses the one the URL's scheme picks.
type BrokerConfig struct {
	NATS  NATSConfig
	AMQP  AMQPConfig
	Kafka KafkaConfig
	// Logger receives a NATS publisher's connection moves (the AMQP and
	// Kafka configs carry their own).
	Logger *slog.Logger
}

// broker is one broker package: the URL schemes it serves, its name as
// OpenTelemetry's messaging.system, and how it connects a publisher.
type broker struct {
	schemes func() []string
	system  string
	check   func(rawURL string) error // the URL's form, without connecting
	dial    func(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error)
}

// brokers is every broker package the CLI serves, in one explicit table:
// each package names its own schemes.
var brokers = []broker{
	{
		schemes: ferrynats.Schemes,
		system:  "nats",
		check:   checkNATS,
		dial: func(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error) {
			return asPublisher(ferrynats.Dial(ctx, rawURL, &ferrynats.DialConfig{Config: cfg.NATS, Logger: cfg.Logger}))
		},
	},
	{
		schemes: ferryamqp.Schemes,
		system:  "rabbitmq",
		check:   checkAMQP,
		dial: func(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error) {
			return asPublisher(ferryamqp.Dial(ctx, rawURL, &cfg.AMQP))
		},
	},
	{
		schemes: ferrykafka.Schemes,
		system:  "kafka",
		check:   checkKafka,
		dial: func(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error) {
			return asPublisher(ferrykafka.Dial(ctx, rawURL, &cfg.Kafka))
		},
	},
	{
		schemes: RedisSchemes,
		system:  "redis",
		check:   checkRedis,
		dial: func(ctx context.Context, rawURL string, _ *BrokerConfig) (ferrybroker.Publisher, error) {
			return dialRedis(ctx, rawURL)
		},
	},
}

func asPublisher[P ferrybroker.Publisher](p P, err error) (ferrybroker.Publisher, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

func brokerFor(rawURL string) (broker, bool) {
	sch := scheme(rawURL)
	for _, b := range brokers {
		if slices.Contains(b.schemes(), sch) {
			return b, true
		}
	}
	return broker{}, false
}

// IsAMQP reports whether rawURL names a RabbitMQ server.
func IsAMQP(rawURL string) bool { return BrokerSystem(rawURL) == "rabbitmq" }

// IsKafka reports whether rawURL names Kafka brokers.
func IsKafka(rawURL string) bool { return BrokerSystem(rawURL) == "kafka" }

// BrokerSystem names the broker at rawURL as OpenTelemetry's
// messaging.system does ("nats", "rabbitmq", "kafka"), or "" for an
// unknown scheme.
func BrokerSystem(rawURL string) string {
	b, _ := brokerFor(rawURL)
	return b.system
}

// brokerForURL returns the broker package whose schemes include rawURL's,
// or an error that says what rawURL lacks.
func brokerForURL(rawURL string) (broker, error) {
	if b, ok := brokerFor(rawURL); ok {
		return b, nil
	}
	if strings.TrimSpace(rawURL) == "" {
		return broker{}, fmt.Errorf("%w: no broker URL: set --broker-url or FERRY_BROKER_URL (%s)",
			ferrytype.ErrInvalidConfig, brokerForms)
	}
	return broker{}, unschemed("broker", rawURL, brokerSchemes, brokerForms)
}

// Publisher connects to the broker at rawURL: nats:// or tls:// (NATS
// JetStream), amqp:// or amqps:// (RabbitMQ), kafka:// or kafkas://
// (Kafka), redis:// or rediss:// (Redis Streams, through Watermill's
// redisstream publisher). It checks rawURL's form
// first (see ValidateBrokerURL).
func Publisher(ctx context.Context, rawURL string, cfg *BrokerConfig) (ferrybroker.Publisher, error) {
	if cfg == nil {
		cfg = &BrokerConfig{}
	}
	b, err := brokerForURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ValidateBrokerURL(rawURL); err != nil {
		return nil, err
	}
	return b.dial(ctx, rawURL, cfg)
}
