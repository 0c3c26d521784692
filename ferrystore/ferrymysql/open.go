package ferrymysql

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlstore"
	"github.com/ferrydev/ferry/internal/tlsfiles"
)

// ParseURL turns a URL of the form
//
//	mysql://user:password@host:3306/dbname?param=value
//
// into a go-sql-driver/mysql configuration. Query parameters are the
// driver's DSN parameters (timeout, readTimeout, tls, ...); in addition
// tls-ca, tls-cert and tls-key name PEM files for a custom TLS
// configuration, and socket=/path connects over a Unix socket. ferry sets
// parseTime=true and interpolateParams=true unless the URL says otherwise.
// Errors never contain the password.
func ParseURL(rawURL string) (*mysql.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: database URL %s: cannot parse", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return nil, fmt.Errorf("%w: database URL %s: scheme must be mysql://", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	q := u.Query()
	var tlsCfg *tls.Config
	if ca, cert, key := q.Get("tls-ca"), q.Get("tls-cert"), q.Get("tls-key"); ca != "" || cert != "" {
		tlsCfg = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		if err := tlsfiles.Apply(tlsCfg, ca, cert, key, tlsfiles.Names{CA: "tls-ca", Cert: "tls-cert", Key: "tls-key"}); err != nil {
			return nil, fmt.Errorf("%w: %v", ferrytype.ErrInvalidConfig, err)
		}
		q.Del("tls-ca")
		q.Del("tls-cert")
		q.Del("tls-key")
	}
	socket := q.Get("socket")
	q.Del("socket")
	if q.Get("parseTime") == "" {
		q.Set("parseTime", "true")
	}
	if q.Get("interpolateParams") == "" {
		q.Set("interpolateParams", "true")
	}
	cfg, err := mysql.ParseDSN("/" + strings.TrimPrefix(u.Path, "/") + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w: database URL %s: %v", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL), err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if socket != "" {
		cfg.Net, cfg.Addr = "unix", socket
	} else {
		host := u.Host
		if u.Port() == "" {
			host += ":3306"
		}
		cfg.Net, cfg.Addr = "tcp", host
	}
	if tlsCfg != nil {
		cfg.TLS = tlsCfg
	}
	return cfg, nil
}

// Schemes returns the URL schemes Open and OpenInbox accept.
func Schemes() []string { return []string{"mysql", "mariadb"} }

// openDB opens a pool of at most maxConns connections to the database at
// rawURL (see ParseURL) and checks that it answers within 10 seconds.
// With readCommitted every session runs READ COMMITTED from its start.
func openDB(ctx context.Context, rawURL string, maxConns int, readCommitted bool) (*sql.DB, error) {
	mc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var conn driver.Connector
	conn, err = mysql.NewConnector(mc)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	if readCommitted {
		conn = sessionSetup{conn, setReadCommitted}
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, ferrytype.RedactError(fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err), rawURL)
	}
	return db, nil
}

// Open connects to the database at rawURL (see ParseURL), checks that it
// answers, and returns a store that closes the pool on Close.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Store, error) {
	if _, err := New(new(sql.DB), cfg); err != nil {
		return nil, err
	}
	db, err := openDB(ctx, rawURL, 32, true)
	if err != nil {
		return nil, err
	}
	s, _ := New(db, cfg)
	s.SQLDB = sqlstore.NewSQLDB(db, true)
	s.sessionReadCommitted = true
	return s, nil
}

// setReadCommitted is run once on each connection of a pool Open opens.
// The claim must run under READ COMMITTED (see Store.claim); setting it
// for the session saves the claim a round trip, and the store's other
// statements touch rows by key or by the pending index, where READ
// COMMITTED only takes fewer gap locks. MySQL 8 and MariaDB both accept
// this spelling (their variables are named differently).
const setReadCommitted = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

// sessionSetup runs a statement on each new connection before the pool
// hands it out.
type sessionSetup struct {
	driver.Connector
	stmt string
}

func (c sessionSetup) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("ferrymysql: the driver's connection cannot run %q", c.stmt)
	}
	if _, err := ex.ExecContext(ctx, c.stmt, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("ferrymysql: %s: %w", c.stmt, err)
	}
	return conn, nil
}

// OpenInbox connects a small pool (4 connections) to the database at
// rawURL (see ParseURL), checks that it answers (not that the tables
// exist: the first query says so), and returns the inbox tables on it;
// Close closes the pool.
func OpenInbox(ctx context.Context, rawURL string, cfg *InboxConfig) (*Inbox, error) {
	if _, err := NewInbox(new(sql.DB), cfg); err != nil {
		return nil, err
	}
	db, err := openDB(ctx, rawURL, 4, false)
	if err != nil {
		return nil, err
	}
	s, _ := NewInbox(db, cfg)
	s.SQLTxs = sqlstore.SQLTxs{SQLDB: sqlstore.NewSQLDB(db, true)}
	return s, nil
}

// DB returns the pool of a store made by New or Open: begin the
// transactions that write business rows and EnqueueTx their events on it
// (a pool Open opened runs every session at READ COMMITTED). Close closes
// it only when Open opened it.
func (s *Store) DB() *sql.DB { return s.SQLDB.DB() }

// DB returns the pool of an inbox made by NewInbox or OpenInbox: the pool
// whose transactions the inbox begins (the *sql.Tx its business functions
// are given), for the consumer's other queries and for migrating the
// business tables. Close closes it only when OpenInbox opened it.
func (s *Inbox) DB() *sql.DB { return s.SQLTxs.DB() }
