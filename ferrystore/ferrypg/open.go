package ferrypg

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry/ferrytype"
)

// Schemes returns the URL schemes Open and OpenInbox accept.
func Schemes() []string { return []string{"postgres", "postgresql"} }

// openPool connects a pgx pool of at least minConns connections to the
// database at rawURL and checks that it answers within 10 seconds.
func openPool(ctx context.Context, rawURL string, minConns int32) (*pgxpool.Pool, error) {
	pc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if pc.MaxConns < minConns {
		pc.MaxConns = minConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	return pool, nil
}

// ParseURL parses rawURL as Open does (a postgres:// URL or any
// connection string pgx accepts), without connecting. The error says what
// pgx found wrong, never with the password.
func ParseURL(rawURL string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx says "cannot parse `<the URL, best-effort redacted>`: why":
		// keep why, and name the URL redacted by ferry.
		reason := err.Error()
		if strings.HasPrefix(reason, "cannot parse `") {
			if i := strings.LastIndex(reason, "`: "); i > 0 {
				reason = reason[i+3:]
			}
		}
		return nil, ferrytype.RedactError(fmt.Errorf("%w: database URL %s: cannot parse: %s", ferrytype.ErrInvalidConfig,
			ferrytype.RedactURL(rawURL), reason), rawURL)
	}
	return pc, nil
}

// Open connects a pgx pool to the database at rawURL
// (postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=...,
// any libpq connection string pgx accepts, TLS included), checks that it
// answers, and returns a store that closes the pool on Close. Errors never
// contain the password.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Store, error) {
	if _, err := newCore(nil, cfg); err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, rawURL, 8)
	if err != nil {
		return nil, err
	}
	s, _ := New(pool, cfg)
	s.close = pool.Close
	return s, nil
}

// OpenInbox connects a pgx pool to the database at rawURL (as Open does),
// checks that it answers (not that the tables exist: the first query says
// so), and returns the inbox tables on it; Close closes the pool.
func OpenInbox(ctx context.Context, rawURL string, cfg *InboxConfig) (*Inbox, error) {
	if _, err := newInboxCore(nil, cfg); err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, rawURL, 0)
	if err != nil {
		return nil, err
	}
	s, _ := NewInbox(pool, cfg)
	s.close = pool.Close
	return s, nil
}

// Pool returns the pgx pool of a store made by New or Open: begin the
// transactions that write business rows and EnqueueTx their events on it.
// Close closes it only when Open opened it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Pool returns the pgx pool of an inbox made by NewInbox or OpenInbox: the
// pool whose transactions the inbox begins (the pgx.Tx its business
// functions are given), for the consumer's other queries and for
// migrating the business tables. Close closes it only when OpenInbox
// opened it.
func (s *Inbox) Pool() *pgxpool.Pool { return s.pool }

// DB returns the database/sql pool of an inbox made by NewStdlibInbox.
// The inbox never closes it.
func (s *StdlibInbox) DB() *sql.DB { return s.SQLTxs.DB() }
