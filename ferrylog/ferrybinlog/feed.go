package ferrybinlog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrytype"
)

// DefaultTable is the outbox table a feed reads when Config.Table is empty.
const DefaultTable = ferrymysql.DefaultTable

// maxTable is the longest outbox table name, as ferrymysql allows it.
const maxTable = 57

// Config configures a Feed.
type Config struct {
	// URL is the database whose binlog the feed reads, in ferrymysql's
	// form (see ferrymysql.ParseURL):
	//
	//	mysql://user:password@host:3306/database?tls=true
	//
	// The database is the schema of the outbox table. Its TLS options
	// (tls=true, tls=skip-verify, tls-ca, tls-cert, tls-key) apply to the
	// SQL queries and to the replication connection alike. The user needs
	// REPLICATION SLAVE and BINLOG MONITOR (MySQL: REPLICATION CLIENT) on
	// *.*, and SELECT on the outbox table. Required.
	URL string
	// Table is the outbox table. Default "outbox_event". Validated as
	// ferrymysql validates it (letters, digits and underscores, not
	// starting with a digit, at most 57 bytes).
	Table string
	// ServerID is the replica server id the feed registers with while it
	// streams; it must differ from the server's own and from every other
	// replica's, or the server drops one of the two connections. Default:
	// a random id in [1<<30, 1<<31).
	ServerID uint32
	// Logger receives the feed's and the replication client's warnings
	// and errors. Default: none (a discarding logger).
	Logger *slog.Logger
}

// Feed is a ferrystore.LogFeed reading the binlog of a MariaDB or MySQL
// server with go-mysql-org/go-mysql's replication client. Its positions
// are binlog coordinates, "file:offset" ("binlog.000003:1234"), each the
// end of a transaction. Its methods are safe for concurrent use; Stream
// runs once at a time per feed.
type Feed struct {
	rawURL   string
	mc       *mysql.Config
	schema   string
	table    string
	serverID uint32
	logger   *slog.Logger
	db       *sql.DB

	// closeCtx ends when Close is called, which ends a running Stream.
	closeCtx context.Context
	closeFn  context.CancelFunc

	mu         sync.Mutex
	statusStmt string // the statement that showed the binlog's end
	streaming  bool
	flushed    pos // the last Flushed position, zero when none
	streamed   pos // the last position Stream reported or started at
	closed     bool
}

var _ ferrystore.LogFeed = (*Feed)(nil)

// New returns a feed for cfg. It validates cfg and does not connect:
// Check tells whether the server is set up for it.
func New(cfg *Config) (*Feed, error) {
	if cfg == nil || cfg.URL == "" {
		return nil, fmt.Errorf("%w: ferrybinlog: Config.URL is required", ferrytype.ErrInvalidConfig)
	}
	mc, err := ferrymysql.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("ferrybinlog: Config.URL: %w", err)
	}
	if mc.DBName == "" {
		return nil, fmt.Errorf("%w: ferrybinlog: Config.URL %s names no database (mysql://user@host:3306/database)",
			ferrytype.ErrInvalidConfig, ferrytype.RedactURL(cfg.URL))
	}
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	if err := ferrytype.ValidateIdentifier("ferrybinlog: Config.Table", table, maxTable); err != nil {
		return nil, err
	}
	id := cfg.ServerID
	if id == 0 {
		id = randomServerID()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if mc.TLS != nil && !mc.TLS.InsecureSkipVerify && mc.Net != "unix" {
		// ParseURL leaves tls=true verifying the name of the driver's
		// default address (127.0.0.1): verify the server's own.
		mc.TLS = mc.TLS.Clone()
		if h, _, err := net.SplitHostPort(mc.Addr); err == nil {
			mc.TLS.ServerName = h
		}
	}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: ferrybinlog: Config.URL %s: %v", ferrytype.ErrInvalidConfig,
			ferrytype.RedactURL(cfg.URL), ferrytype.RedactSecrets(err.Error(), cfg.URL))
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(5 * time.Minute)
	f := &Feed{rawURL: cfg.URL, mc: mc, schema: mc.DBName, table: table, serverID: id, logger: logger, db: db}
	f.closeCtx, f.closeFn = context.WithCancel(context.Background())
	return f, nil
}

// randomServerID returns a server id in [1<<30, 1<<31).
func randomServerID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return 1<<30 | binary.LittleEndian.Uint32(b[:])&(1<<30-1)
}

// Source returns "binlog host:port" (or "binlog /path/to/socket").
func (f *Feed) Source() string { return "binlog " + f.mc.Addr }

// Flushed records pos as the feed's checkpoint for Lag. The binlog is
// kept by the server's own expiry (binlog_expire_logs_seconds), which a
// replica cannot hold back, so Flushed changes nothing on the server.
func (f *Feed) Flushed(p ferrystore.LogPosition) {
	parsed, err := parsePos(p)
	if err != nil {
		f.logger.Warn("ferrybinlog: flushed position ignored", "position", string(p), "error", err)
		return
	}
	f.mu.Lock()
	f.flushed = parsed
	f.mu.Unlock()
}

// Close ends a running Stream (which returns an error wrapping
// ferrytype.ErrClosed) and closes the feed's connections. Calling it
// again does nothing.
func (f *Feed) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	f.closeFn()
	return f.db.Close()
}

// wrap returns err with context and with the URL's password removed.
func (f *Feed) wrap(err error, format string, args ...any) error {
	return ferrytype.RedactError(fmt.Errorf("ferrybinlog: "+format+": %w", append(args, err)...), f.rawURL)
}

// host returns the host name of the server's address, for TLS.
func (f *Feed) host() string {
	h, _, err := net.SplitHostPort(f.mc.Addr)
	if err != nil {
		return f.mc.Addr
	}
	return h
}

// quietHandler passes on the records of at least min to h: go-mysql logs
// each connection and each rotation at Info.
type quietHandler struct {
	h   slog.Handler
	min slog.Level
}

func (q quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= q.min && q.h.Enabled(ctx, l)
}
func (q quietHandler) Handle(ctx context.Context, r slog.Record) error { return q.h.Handle(ctx, r) }
func (q quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{q.h.WithAttrs(as), q.min}
}
func (q quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{q.h.WithGroup(name), q.min}
}
