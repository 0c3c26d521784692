package ferrysqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

//go:embed inbox_migrations/*.sql
var inboxMigrationsFS embed.FS

// InboxConfig configures an Inbox store. The zero value (or nil) uses the
// defaults. Names are validated (letters, digits and underscores, not
// starting with a digit, at most 49 bytes) and quoted.
type InboxConfig struct {
	// MarkerTable holds the markers. Default "consumed_operation".
	MarkerTable string
	// ConflictTable holds recorded conflicts. Default "ferry_conflict".
	ConflictTable string
	// VersionTable holds the order guard's versions. Default
	// "ferry_version".
	VersionTable string
	// KeyTable holds idempotency keys (ferryhttp). Default
	// "ferry_idempotency_key".
	KeyTable string
}

// Inbox is the inbox tables in SQLite. It implements
// ferrystore.InboxDriver[*sql.Tx]. Open the database with ferry's settings
// (Open, or _txlock=immediate): a transaction then takes the write lock at
// BEGIN, which serialises concurrent deliveries of one operation.
type Inbox struct {
	sqlstore.InboxBase
	sqlstore.SQLTxs
	sqlstore.Keys
	tables     sqlstore.InboxTables
	m, c, v, k string
}

var _ ferrystore.IdempotencyDriver[*sql.Tx] = (*Inbox)(nil)

// NewInbox returns the inbox tables on db. It never closes db.
func NewInbox(db *sql.DB, cfg *InboxConfig) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrysqlite.NewInbox: db is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	t, err := sqlstore.ResolveInboxTables(cfg.MarkerTable, cfg.ConflictTable, cfg.VersionTable, cfg.KeyTable, MaxTableLen)
	if err != nil {
		return nil, err
	}
	s := &Inbox{SQLTxs: sqlstore.SQLTxs{SQLDB: sqlstore.NewSQLDB(db, false)}, tables: t,
		m: quote(t.Markers), c: quote(t.Conflicts), v: quote(t.Versions), k: quote(t.Keys)}
	s.InboxBase = sqlstore.InboxBase{Pool: ferrystore.SQL(db), SQL: sqlstore.PlainInboxSQL(s.m, s.c, now)}
	s.Keys = sqlstore.NewKeys(dialect{}, ferrystore.SQL(db), s.k, "DELETE FROM "+s.k+" WHERE key_hash IN (SELECT key_hash FROM "+
		s.k+" WHERE expires_at <= "+now+" ORDER BY expires_at LIMIT ?)")
	return s, nil
}

// Dialect returns "sqlite".
func (s *Inbox) Dialect() string { return "sqlite" }

// Migrations returns the inbox migrations rendered for its tables.
func (s *Inbox) Migrations() (fs.FS, error) {
	return migrate.Render(inboxMigrationsFS, "inbox_migrations", map[string]string{
		"Markers": s.m, "Conflicts": s.c, "Versions": s.v, "Keys": s.k,
		"KeysExpiresIndex":     quote(s.tables.Keys + "_expires_idx"),
		"MarkersCreatedIndex":  quote(s.tables.Markers + "_created_idx"),
		"ConflictsStatusIndex": quote(s.tables.Conflicts + "_status_idx"),
	})
}

// Migrate creates or upgrades the inbox tables.
func (s *Inbox) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return Apply(ctx, s.DB(), "inbox:"+s.tables.Markers, fsys)
}

// RecordConflict stores c, or counts one more occurrence of it.
func (s *Inbox) RecordConflict(ctx context.Context, c ferrystore.Conflict) (int64, error) {
	var id int64
	err := s.DB().QueryRowContext(ctx, "INSERT INTO "+s.c+" (consumer_name, business_key, stored_event_id, stored_fields,"+
		" stored_fingerprint, incoming_event_id, incoming_fields, incoming_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"+
		" ON CONFLICT (consumer_name, business_key, incoming_fingerprint)"+
		" DO UPDATE SET occurrences = occurrences + 1, last_seen = "+now+" RETURNING id",
		c.Consumer, c.Key, c.Stored.EventID, string(c.Stored.Fields), c.Stored.Fingerprint,
		c.Incoming.EventID, string(c.Incoming.Fields), c.Incoming.Fingerprint).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record conflict: %w", err)
	}
	return id, nil
}

// AdvanceVersion moves the aggregate's version; the immediate transaction
// holds the database's write lock.
func (s *Inbox) AdvanceVersion(ctx context.Context, ex ferrystore.Executor, consumer, aggregate string, version int64, contiguous bool) (int64, bool, error) {
	if _, err := ex.Exec(ctx, "INSERT OR IGNORE INTO "+s.v+" (consumer_name, aggregate, version) VALUES (?, ?, 0)",
		consumer, aggregate); err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	return sqlstore.AdvanceVersion(ctx, ex,
		"SELECT version FROM "+s.v+" WHERE consumer_name = ? AND aggregate = ?",
		"UPDATE "+s.v+" SET version = ? WHERE consumer_name = ? AND aggregate = ?",
		consumer, aggregate, version, contiguous)
}

// Classify wraps a driver error in ferry's classes (see
// ferrystore.Classifier).
func (s *Inbox) Classify(err error) error { return classify(err) }

// RecentMarkers counts the markers created within the last `within`, per
// consumer and outcome, through the range of the created_at index.
func (s *Inbox) RecentMarkers(ctx context.Context, within time.Duration) ([]ferrystore.MarkerCount, error) {
	rows, err := ferrystore.SQL(s.DB()).Query(ctx, "SELECT consumer_name, outcome, COUNT(*) FROM "+s.m+
		" WHERE created_at >= "+nowPlus+" GROUP BY consumer_name, outcome ORDER BY consumer_name, outcome", modifier(-within))
	if err != nil {
		return nil, fmt.Errorf("recent markers: %w", err)
	}
	return sqlstore.ScanMarkerCounts(rows)
}

// PurgeableMarkers counts the markers older than olderThan.
func (s *Inbox) PurgeableMarkers(ctx context.Context, olderThan time.Duration) (int64, error) {
	return sqlstore.QueryCount(ctx, ferrystore.SQL(s.DB()), "count purgeable markers",
		"SELECT COUNT(*) FROM "+s.m+" WHERE created_at < "+nowPlus, modifier(-olderThan))
}

// PurgeMarkers deletes up to limit markers older than olderThan.
func (s *Inbox) PurgeMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := ferrystore.SQL(s.DB()).Exec(ctx, "DELETE FROM "+s.m+" WHERE rowid IN (SELECT rowid FROM "+s.m+
		" WHERE created_at < "+nowPlus+" ORDER BY created_at LIMIT ?)", modifier(-olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge markers: %w", err)
	}
	return n, nil
}
