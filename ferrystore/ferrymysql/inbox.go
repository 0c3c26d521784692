package ferrymysql

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
// starting with a digit, at most 63 bytes) and
// quoted.
type InboxConfig struct {
	// MarkerTable holds the markers. Default "consumed_operation", the
	// seed's name (with ferry's generic columns).
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

// Inbox is the inbox tables in MySQL or MariaDB. It implements
// ferrystore.InboxDriver[*sql.Tx].
type Inbox struct {
	sqlstore.InboxBase
	sqlstore.SQLTxs
	sqlstore.Keys
	tables     sqlstore.InboxTables
	m, c, v, k string // quoted
}

var _ ferrystore.IdempotencyDriver[*sql.Tx] = (*Inbox)(nil)

// NewInbox returns the inbox tables on db. It never closes db.
func NewInbox(db *sql.DB, cfg *InboxConfig) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrymysql.NewInbox: db is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	t, err := sqlstore.ResolveInboxTables(cfg.MarkerTable, cfg.ConflictTable, cfg.VersionTable, cfg.KeyTable, MaxInboxTableLen)
	if err != nil {
		return nil, err
	}
	s := &Inbox{SQLTxs: sqlstore.SQLTxs{SQLDB: sqlstore.NewSQLDB(db, false)}, tables: t,
		m: quote(t.Markers), c: quote(t.Conflicts), v: quote(t.Versions), k: quote(t.Keys)}
	s.InboxBase = sqlstore.InboxBase{Pool: ferrystore.SQL(db), SQL: sqlstore.PlainInboxSQL(s.m, s.c, "NOW(6)")}
	s.Keys = sqlstore.NewKeys(dialect{}, ferrystore.SQL(db), s.k,
		"DELETE FROM "+s.k+" WHERE expires_at <= NOW(6) ORDER BY expires_at LIMIT ?")
	return s, nil
}

// Dialect returns "mysql".
func (s *Inbox) Dialect() string { return "mysql" }

// Migrations returns the inbox migrations rendered for its tables.
func (s *Inbox) Migrations() (fs.FS, error) {
	return migrate.Render(inboxMigrationsFS, "inbox_migrations",
		map[string]string{"Markers": s.m, "Conflicts": s.c, "Versions": s.v, "Keys": s.k})
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
	res, err := s.DB().ExecContext(ctx, "INSERT INTO "+s.c+" (consumer_name, business_key, stored_event_id, stored_fields,"+
		" stored_fingerprint, incoming_event_id, incoming_fields, incoming_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"+
		" ON DUPLICATE KEY UPDATE occurrences = occurrences + 1, last_seen = NOW(6), id = LAST_INSERT_ID(id)",
		c.Consumer, c.Key, c.Stored.EventID, string(c.Stored.Fields), c.Stored.Fingerprint,
		c.Incoming.EventID, string(c.Incoming.Fields), c.Incoming.Fingerprint)
	if err != nil {
		return 0, fmt.Errorf("record conflict: %w", err)
	}
	return res.LastInsertId()
}

// AdvanceVersion moves the aggregate's version under its row lock.
func (s *Inbox) AdvanceVersion(ctx context.Context, ex ferrystore.Executor, consumer, aggregate string, version int64, contiguous bool) (int64, bool, error) {
	// Create the row if needed, then lock it: no gap locks, no deadlock
	// between two first deliveries of one aggregate.
	if _, err := ex.Exec(ctx, "INSERT INTO "+s.v+" (consumer_name, aggregate, version) VALUES (?, ?, 0)"+
		" ON DUPLICATE KEY UPDATE version = version", consumer, aggregate); err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	return sqlstore.AdvanceVersion(ctx, ex, "SELECT version FROM "+s.v+" WHERE consumer_name = ? AND aggregate = ? FOR UPDATE",
		"UPDATE "+s.v+" SET version = ? WHERE consumer_name = ? AND aggregate = ?", consumer, aggregate, version, contiguous)
}

// Classify wraps a driver error in ferry's classes (see
// ferrystore.Classifier).
func (s *Inbox) Classify(err error) error { return classify(err) }

// RecentMarkers counts the markers created within the last `within`, per
// consumer and outcome, through the range of idx_created.
func (s *Inbox) RecentMarkers(ctx context.Context, within time.Duration) ([]ferrystore.MarkerCount, error) {
	rows, err := ferrystore.SQL(s.DB()).Query(ctx, "SELECT consumer_name, outcome, COUNT(*) FROM "+s.m+
		" WHERE created_at >= NOW(6) - INTERVAL ? MICROSECOND GROUP BY consumer_name, outcome"+
		" ORDER BY consumer_name, outcome", sqlstore.Micros(within))
	if err != nil {
		return nil, fmt.Errorf("recent markers: %w", err)
	}
	return sqlstore.ScanMarkerCounts(rows)
}

// PurgeableMarkers counts the markers older than olderThan.
func (s *Inbox) PurgeableMarkers(ctx context.Context, olderThan time.Duration) (int64, error) {
	return sqlstore.QueryCount(ctx, ferrystore.SQL(s.DB()), "count purgeable markers",
		"SELECT COUNT(*) FROM "+s.m+" WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND", sqlstore.Micros(olderThan))
}

// PurgeMarkers deletes up to limit markers older than olderThan.
func (s *Inbox) PurgeMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := ferrystore.SQL(s.DB()).Exec(ctx, "DELETE FROM "+s.m+" WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND"+
		" ORDER BY created_at LIMIT ?", sqlstore.Micros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge markers: %w", err)
	}
	return n, nil
}
