package ferrysqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// DSN turns a URL into a modernc.org/sqlite data source name with ferry's
// settings: WAL journal, a 10 s busy timeout, immediate transactions,
// synchronous=FULL (a committed event survives a power cut). Accepted forms:
//
//	sqlite:///absolute/path/file.db
//	sqlite:relative/path/file.db
//	sqlite::memory:                 (one connection, gone on Close)
//
// Query parameters are passed to the driver and override ferry's.
func DSN(rawURL string) (dsn string, memory bool, err error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "sqlite" {
		return "", false, fmt.Errorf("%w: database URL %q: want sqlite:///path/file.db", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	path := u.Opaque
	switch {
	case path != "":
	case u.Host != "": // sqlite://relative/file.db
		path = u.Host + u.Path
	default: // sqlite:///absolute/file.db, also with extra slashes
		path = u.Path
		if strings.HasPrefix(path, "/") {
			path = "/" + strings.TrimLeft(path, "/")
		}
	}
	if path == "" {
		return "", false, fmt.Errorf("%w: database URL %q has no file path", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	memory = path == ":memory:"
	q := u.Query()
	set := func(k, v string) {
		if q.Get(k) == "" {
			q.Set(k, v)
		}
	}
	set("_txlock", "immediate")
	if len(q["_pragma"]) == 0 {
		q["_pragma"] = []string{"busy_timeout(10000)", "foreign_keys(1)", "synchronous(FULL)"}
		if !memory {
			q["_pragma"] = append(q["_pragma"], "journal_mode(WAL)")
		}
	}
	return "file:" + strings.TrimPrefix(path, "file:") + "?" + q.Encode(), memory, nil
}

// Schemes returns the URL schemes Open and OpenInbox accept.
func Schemes() []string { return []string{"sqlite"} }

// openDB opens the database at rawURL (see DSN) and checks that it
// answers.
func openDB(ctx context.Context, rawURL string) (*sql.DB, error) {
	dsn, memory, err := DSN(rawURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	if memory {
		db.SetMaxOpenConns(1)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	return db, nil
}

// Open opens the SQLite database at rawURL (see DSN) and returns a store
// that closes it on Close.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Store, error) {
	if _, err := New(new(sql.DB), cfg); err != nil {
		return nil, err
	}
	db, err := openDB(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	s, _ := New(db, cfg)
	s.SQLDB = sqlstore.NewSQLDB(db, true)
	return s, nil
}

// OpenInbox opens the SQLite database at rawURL (see DSN) and returns the
// inbox tables in it; Close closes the database.
func OpenInbox(ctx context.Context, rawURL string, cfg *InboxConfig) (*Inbox, error) {
	if _, err := NewInbox(new(sql.DB), cfg); err != nil {
		return nil, err
	}
	db, err := openDB(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	s, _ := NewInbox(db, cfg)
	s.SQLTxs = sqlstore.SQLTxs{SQLDB: sqlstore.NewSQLDB(db, true)}
	return s, nil
}

// DB returns the database of a store made by New or Open: begin the
// transactions that write business rows and EnqueueTx their events on it.
// Close closes it only when Open opened it.
func (s *Store) DB() *sql.DB { return s.SQLDB.DB() }

// DB returns the database of an inbox made by NewInbox or OpenInbox: the
// one whose transactions the inbox begins (the *sql.Tx its business
// functions are given), for the consumer's other queries and for creating
// the business tables. Close closes it only when OpenInbox opened it.
func (s *Inbox) DB() *sql.DB { return s.SQLTxs.DB() }
