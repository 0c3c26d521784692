package ferrypg

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

//go:embed inbox_migrations/*.sql
var inboxMigrationsFS embed.FS

// InboxConfig configures an inbox store. The zero value (or nil) uses the
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

type inboxCore struct {
	sqlstore.InboxBase
	sqlstore.Keys
	c           sqlstore.Pool
	close       func()
	tables      sqlstore.InboxTables
	m, cf, v, k string
}

// Inbox is the inbox tables used through pgx. It implements
// ferrystore.InboxDriver[pgx.Tx].
type Inbox struct {
	inboxCore
	pool *pgxpool.Pool
}

// StdlibInbox is the inbox tables used through database/sql with pgx's
// stdlib driver. It implements ferrystore.InboxDriver[*sql.Tx].
type StdlibInbox struct {
	inboxCore
	sqlstore.SQLTxs
}

var (
	_ ferrystore.IdempotencyDriver[pgx.Tx]  = (*Inbox)(nil)
	_ ferrystore.IdempotencyDriver[*sql.Tx] = (*StdlibInbox)(nil)
)

func newInboxCore(c sqlstore.Pool, cfg *InboxConfig) (inboxCore, error) {
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	t, err := sqlstore.ResolveInboxTables(cfg.MarkerTable, cfg.ConflictTable, cfg.VersionTable, cfg.KeyTable, MaxTableLen)
	if err != nil {
		return inboxCore{}, err
	}
	s := inboxCore{c: c, tables: t, m: quote(t.Markers), cf: quote(t.Conflicts), v: quote(t.Versions), k: quote(t.Keys)}
	s.Keys = sqlstore.NewKeys(dialect{}, c, s.k, "DELETE FROM "+s.k+" WHERE key_hash IN (SELECT key_hash FROM "+s.k+
		" WHERE expires_at <= now() ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED)")
	s.InboxBase = sqlstore.InboxBase{Pool: c, SQL: sqlstore.InboxSQL{
		InsertMarker: "INSERT INTO " + s.m + " (consumer_name, business_key, event_id, fields, fingerprint, outcome)" +
			" VALUES ($1, $2, $3, $4::jsonb, $5, $6)",
		GetMarker: "SELECT consumer_name, business_key, event_id, fields::text, fingerprint, outcome, created_at FROM " +
			s.m + " WHERE consumer_name = $1 AND business_key = $2",
		Conflicts: "SELECT " + pgConflictColumns + " FROM " + s.cf +
			" WHERE ($1::boolean OR status = 'OPEN') AND ($2::text = '' OR consumer_name = $3) ORDER BY id DESC LIMIT $4",
		GetConflict: "SELECT " + pgConflictColumns + " FROM " + s.cf + " WHERE id = $1",
		ResolveConflict: "UPDATE " + s.cf + " SET status = 'RESOLVED', decision = $1, resolved_by = $2, note = $3," +
			" resolved_at = now() WHERE id = $4 AND status = 'OPEN'",
		MarkerCount:   "SELECT count(*) FROM " + s.m + " WHERE $1::text = '' OR consumer_name = $2",
		OpenConflicts: "SELECT consumer_name, COUNT(*) FROM " + s.cf + " WHERE status = 'OPEN' GROUP BY consumer_name",
		ExistingMarkers: func(consumer string, keys []string) (string, []any) {
			return "SELECT business_key FROM " + s.m + " WHERE consumer_name = $1 AND business_key = ANY($2::text[])",
				[]any{consumer, keys}
		},
	}}
	return s, nil
}

// NewInbox returns the inbox tables on pool. It never closes pool.
func NewInbox(pool *pgxpool.Pool, cfg *InboxConfig) (*Inbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: ferrypg.NewInbox: pool is nil", ferrytype.ErrInvalidConfig)
	}
	c, err := newInboxCore(pgxPool{Pgx(pool), pool}, cfg)
	if err != nil {
		return nil, err
	}
	return &Inbox{inboxCore: c, pool: pool}, nil
}

// NewStdlibInbox returns the inbox tables on db (pgx's stdlib driver). It
// never closes db.
func NewStdlibInbox(db *sql.DB, cfg *InboxConfig) (*StdlibInbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrypg.NewStdlibInbox: db is nil", ferrytype.ErrInvalidConfig)
	}
	c, err := newInboxCore(sqlstore.SQLPool(db), cfg)
	if err != nil {
		return nil, err
	}
	return &StdlibInbox{inboxCore: c, SQLTxs: sqlstore.SQLTxs{SQLDB: sqlstore.NewSQLDB(db, false)}}, nil
}

// Begin starts a transaction.
func (s *Inbox) Begin(ctx context.Context) (pgx.Tx, error) { return s.pool.Begin(ctx) }

// Commit commits tx.
func (s *Inbox) Commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

// Rollback rolls tx back.
func (s *Inbox) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

// UnwrapTx returns an executor for tx.
func (s *Inbox) UnwrapTx(tx pgx.Tx) ferrystore.Executor { return Pgx(tx) }

// Dialect returns "postgres".
func (s *inboxCore) Dialect() string { return "postgres" }

// Close closes the pool if the inbox opened it (OpenInbox); a pool the
// caller passed in stays open.
func (s *inboxCore) Close() error {
	if s.close != nil {
		s.close()
	}
	return nil
}

// Migrations returns the inbox migrations rendered for its tables.
func (s *inboxCore) Migrations() (fs.FS, error) {
	return migrate.Render(inboxMigrationsFS, "inbox_migrations", map[string]string{
		"Markers": s.m, "Conflicts": s.cf, "Versions": s.v, "Keys": s.k,
		"KeysExpiresIndex":     quote(s.tables.Keys + "_expires_idx"),
		"MarkersCreatedIndex":  quote(s.tables.Markers + "_created_idx"),
		"ConflictsStatusIndex": quote(s.tables.Conflicts + "_status_idx"),
	})
}

// Migrate creates or upgrades the inbox tables.
func (s *inboxCore) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return apply(ctx, s.c, "inbox:"+s.tables.Markers, fsys)
}

// RecordConflict stores c, or counts one more occurrence of it.
func (s *inboxCore) RecordConflict(ctx context.Context, c ferrystore.Conflict) (int64, error) {
	rows, err := s.c.Query(ctx, "INSERT INTO "+s.cf+" AS c (consumer_name, business_key, stored_event_id, stored_fields,"+
		" stored_fingerprint, incoming_event_id, incoming_fields, incoming_fingerprint)"+
		" VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb, $8)"+
		" ON CONFLICT (consumer_name, business_key, incoming_fingerprint)"+
		" DO UPDATE SET occurrences = c.occurrences + 1, last_seen = now() RETURNING id",
		c.Consumer, c.Key, c.Stored.EventID, string(c.Stored.Fields), c.Stored.Fingerprint,
		c.Incoming.EventID, string(c.Incoming.Fields), c.Incoming.Fingerprint)
	if err != nil {
		return 0, fmt.Errorf("record conflict: %w", err)
	}
	defer rows.Close()
	var id int64
	if rows.Next() {
		err = rows.Scan(&id)
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("record conflict: %w", err)
	}
	return id, nil
}

// AdvanceVersion moves the aggregate's version under its row lock.
func (s *inboxCore) AdvanceVersion(ctx context.Context, ex ferrystore.Executor, consumer, aggregate string, version int64, contiguous bool) (int64, bool, error) {
	if _, err := ex.Exec(ctx, "INSERT INTO "+s.v+" (consumer_name, aggregate, version) VALUES ($1, $2, 0)"+
		" ON CONFLICT (consumer_name, aggregate) DO NOTHING", consumer, aggregate); err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	return sqlstore.AdvanceVersion(ctx, ex,
		"SELECT version FROM "+s.v+" WHERE consumer_name = $1 AND aggregate = $2 FOR UPDATE",
		"UPDATE "+s.v+" SET version = $1 WHERE consumer_name = $2 AND aggregate = $3",
		consumer, aggregate, version, contiguous)
}

// Classify wraps a driver error in ferry's classes (see
// ferrystore.Classifier).
func (s *inboxCore) Classify(err error) error { return classify(err) }

// RecentMarkers counts the markers created within the last `within`, per
// consumer and outcome, through the range of the created_at index.
func (s *inboxCore) RecentMarkers(ctx context.Context, within time.Duration) ([]ferrystore.MarkerCount, error) {
	rows, err := s.c.Query(ctx, "SELECT consumer_name, outcome, COUNT(*) FROM "+s.m+
		" WHERE created_at >= now() - $1::bigint * interval '1 microsecond' GROUP BY consumer_name, outcome"+
		" ORDER BY consumer_name, outcome", sqlstore.Micros(within))
	if err != nil {
		return nil, fmt.Errorf("recent markers: %w", err)
	}
	return sqlstore.ScanMarkerCounts(rows)
}

// PurgeableMarkers counts the markers older than olderThan.
func (s *inboxCore) PurgeableMarkers(ctx context.Context, olderThan time.Duration) (int64, error) {
	return sqlstore.QueryCount(ctx, s.c, "count purgeable markers",
		"SELECT COUNT(*) FROM "+s.m+" WHERE created_at < now() - $1::bigint * interval '1 microsecond'", sqlstore.Micros(olderThan))
}

// PurgeMarkers deletes up to limit markers older than olderThan.
func (s *inboxCore) PurgeMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := s.c.Exec(ctx, "DELETE FROM "+s.m+" WHERE (consumer_name, business_key) IN (SELECT consumer_name, business_key FROM "+
		s.m+" WHERE created_at < now() - $1::bigint * interval '1 microsecond' ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
		sqlstore.Micros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge markers: %w", err)
	}
	return n, nil
}

var pgConflictColumns = "id, consumer_name, business_key, stored_event_id, stored_fields::text, stored_fingerprint," +
	" incoming_event_id, incoming_fields::text, incoming_fingerprint, occurrences, first_seen, last_seen, status," +
	" decision, resolved_by, note, resolved_at"
