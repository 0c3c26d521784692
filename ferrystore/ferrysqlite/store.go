// Package ferrysqlite is ferry's embedded, zero-setup store: SQLite through
// modernc.org/sqlite (pure Go, no cgo).
//
// SQLite has one writer at a time, so claims need no SKIP LOCKED: a claim
// is a single UPDATE ... RETURNING statement, which takes the write lock
// for its duration. Open sets WAL mode, a busy timeout and immediate
// transactions (so a transaction that will write takes the write lock at
// BEGIN instead of failing with SQLITE_BUSY on its first write). The
// "database clock" is the clock of the process running SQLite.
package ferrysqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
	"github.com/ferrydev/ferry/internal/sqlutil"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// DefaultTable is the outbox table's default name, the seed schema's.
const DefaultTable = "outbox_event"

// Config configures a Store. The zero value (or nil) uses the defaults.
type Config struct {
	// Table is the outbox table. Default "outbox_event". The store also
	// uses Table+"_seq" and indexes named after the table. Validated
	// against ^[A-Za-z_][A-Za-z0-9_]{0,48}$ and quoted.
	Table string
}

// Store is an outbox table in SQLite. It implements
// ferrystore.Driver[*sql.Tx].
type Store struct {
	db    *sql.DB
	owned bool
	table string
	q     queries
}

var _ ferrystore.Driver[*sql.Tx] = (*Store)(nil)

type queries struct {
	t, seq string

	claim, claimOrdered, markSent, markFailed, expired, purge, stats, seqUpsert string
}

// New returns a store on db, opened with modernc.org/sqlite. The store
// never closes db.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrysqlite.New: db is nil", ferrytype.ErrInvalidConfig)
	}
	table := DefaultTable
	if cfg != nil && cfg.Table != "" {
		table = cfg.Table
	}
	if err := ferrytype.ValidateIdentifier("table", table, 49); err != nil {
		return nil, err
	}
	return &Store{db: db, table: table, q: buildQueries(table)}, nil
}

func quote(name string) string { return `"` + name + `"` }

// now is the database clock as stored: UTC text with milliseconds.
const now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

// nowPlus is now shifted by a modifier bound as a parameter ("+1.500 seconds").
const nowPlus = "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)"

func modifier(d time.Duration) string { return fmt.Sprintf("%+.6f seconds", d.Seconds()) }

const returning = " RETURNING event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers," +
	" destination, exchange, attempts, created_at"

func buildQueries(table string) queries {
	t, seq := quote(table), quote(table+"_seq")
	q := queries{t: t, seq: seq}
	update := "UPDATE " + t + " SET status = 'SENDING', lease_token = ?, locked_until = " + nowPlus +
		", attempts = attempts + 1 WHERE event_id IN ("
	q.claim = update + "SELECT event_id FROM " + t + " WHERE status = 'NEW' AND available_at <= " + now +
		" ORDER BY available_at, event_id LIMIT ?)" + returning
	q.claimOrdered = update + "SELECT e.event_id FROM " + t + " e WHERE e.status = 'NEW' AND e.available_at <= " + now +
		" AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE p.aggregate_type = e.aggregate_type" +
		" AND p.aggregate_id = e.aggregate_id AND p.aggregate_seq < e.aggregate_seq AND p.status NOT IN ('SENT', 'DISCARDED'))" +
		" ORDER BY e.available_at, e.event_id LIMIT ?)" + returning
	q.markSent = "UPDATE " + t + " SET status = 'SENT', lease_token = NULL, locked_until = NULL, sent_at = " + now +
		" WHERE status = 'SENDING' AND lease_token = ? AND event_id IN ({ids})"
	q.markFailed = "UPDATE " + t + " SET status = ?, available_at = " + nowPlus +
		", lease_token = NULL, locked_until = NULL, last_error = ? WHERE status = 'SENDING' AND lease_token = ? AND event_id = ?"
	q.expired = "SELECT event_id, lease_token, attempts FROM " + t +
		" WHERE status = 'SENDING' AND locked_until < " + now + " ORDER BY locked_until LIMIT ?"
	q.purge = "DELETE FROM " + t + " WHERE event_id IN (SELECT event_id FROM " + t +
		" WHERE status = 'SENT' AND available_at < " + nowPlus + " AND sent_at < " + nowPlus +
		" ORDER BY available_at, event_id LIMIT ?)"
	q.stats = "SELECT COALESCE(SUM(status = 'NEW'), 0), COALESCE(SUM(status = 'SENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0)," +
		" COALESCE(SUM(status = 'NEW' AND available_at <= " + now + "), 0)," +
		" COALESCE(CAST((julianday('now') - julianday(MIN(CASE WHEN status IN ('NEW', 'SENDING') THEN created_at END))) * 86400000000 AS INTEGER), 0)" +
		" FROM " + t + " WHERE status IN ('NEW', 'SENDING', 'DEAD')"
	q.seqUpsert = "INSERT INTO " + seq + " (aggregate_type, aggregate_id, last_seq) VALUES (?, ?, ?)" +
		" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + excluded.last_seq RETURNING last_seq"
	return q
}

// Dialect returns "sqlite".
func (s *Store) Dialect() string { return "sqlite" }

// Table returns the outbox table's name.
func (s *Store) Table() string { return s.table }

// DB returns the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// UnwrapTx returns an executor for the caller's transaction.
func (s *Store) UnwrapTx(tx *sql.Tx) ferrystore.Executor { return ferrystore.SQL(tx) }

// Close closes the database if the store opened it (Open).
func (s *Store) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// Enqueue inserts rows in ex, assigning aggregate sequence numbers.
func (s *Store) Enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	if len(rows) == 0 {
		return nil
	}
	seqs := make([]int64, len(rows))
	var groups []sqlutil.AggregateGroup
	if !opts.SkipSequence {
		groups = sqlutil.GroupByAggregate(rows)
	}
	for _, g := range groups {
		r, err := ex.Query(ctx, s.q.seqUpsert, g.Type, g.ID, len(g.Rows))
		if err != nil {
			return fmt.Errorf("enqueue: assign aggregate sequence: %w", err)
		}
		var last int64
		if r.Next() {
			err = r.Scan(&last)
		}
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("enqueue: assign aggregate sequence: %w", err)
		}
		for j, i := range g.Rows {
			seqs[i] = last - int64(len(g.Rows)-1-j)
		}
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.q.t + " (event_id, aggregate_type, aggregate_id, aggregate_seq, event_type," +
		" payload, headers, destination, exchange, available_at) VALUES ")
	args := make([]any, 0, len(rows)*10)
	for i := range rows {
		ev := &rows[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, " + nowPlus + ")")
		h, err := sqlutil.EncodeHeaders(ev.Headers)
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		var headers any
		if h != nil {
			headers = string(h)
		}
		args = append(args, ev.ID, ev.AggregateType, ev.AggregateID, seqs[i], ev.Type, string(ev.Payload), headers,
			ev.Destination, ev.Exchange, modifier(ev.Delay))
	}
	if _, err := ex.Exec(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("enqueue: insert into %s: %w", s.table, err)
	}
	return nil
}

// Claim leases up to p.Limit rows with one UPDATE ... RETURNING statement.
func (s *Store) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	query := s.q.claim
	if p.Ordered {
		query = s.q.claimOrdered
	}
	rows, err := s.db.QueryContext(ctx, query, p.Token, modifier(p.Lease), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var out []ferrytype.Message
	for rows.Next() {
		var (
			m       ferrytype.Message
			headers sql.NullString
			created sqlutil.NullTime
		)
		if err := rows.Scan(&m.ID, &m.AggregateType, &m.AggregateID, &m.Sequence, &m.Type, &m.Payload,
			&headers, &m.Destination, &m.Exchange, &m.Attempt, &created); err != nil {
			return nil, fmt.Errorf("claim: scan: %w", err)
		}
		if headers.Valid {
			if m.Headers, err = sqlutil.DecodeHeaders([]byte(headers.String)); err != nil {
				return nil, fmt.Errorf("claim: event %s: %w", m.ID, err)
			}
		}
		m.CreatedAt = created.Time
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// MarkSent marks SENT the ids still SENDING under token.
func (s *Store) MarkSent(ctx context.Context, token string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, token)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := ferrystore.SQL(s.db).Exec(ctx, strings.Replace(s.q.markSent, "{ids}", sqlutil.Placeholders(len(ids), false, 0), 1), args...)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return n, nil
}

// MarkFailed records failed attempts in one transaction.
func (s *Store) MarkFailed(ctx context.Context, fails []ferrystore.Failure) (_ int64, err error) {
	if len(fails) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("mark failed: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var total int64
	for _, f := range fails {
		status := ferrytype.StatusNew
		if f.Dead {
			status = ferrytype.StatusDead
		}
		n, err := ferrystore.SQL(tx).Exec(ctx, s.q.markFailed, string(status), modifier(f.Delay),
			sqlutil.Truncate(f.Error, 2000), f.Token, f.ID)
		if err != nil {
			return 0, fmt.Errorf("mark failed %s: %w", f.ID, err)
		}
		total += n
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("mark failed: commit: %w", err)
	}
	return total, nil
}

// ExpiredLeases returns SENDING rows whose lease ended.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]ferrystore.Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.q.expired, limit)
	if err != nil {
		return nil, fmt.Errorf("expired leases: %w", err)
	}
	defer rows.Close()
	var out []ferrystore.Lease
	for rows.Next() {
		var l ferrystore.Lease
		if err := rows.Scan(&l.ID, &l.Token, &l.Attempts); err != nil {
			return nil, fmt.Errorf("expired leases: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// PurgeSent deletes up to limit SENT rows older than olderThan.
func (s *Store) PurgeSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	m := modifier(-olderThan)
	n, err := ferrystore.SQL(s.db).Exec(ctx, s.q.purge, m, m, limit)
	if err != nil {
		return 0, fmt.Errorf("purge sent: %w", err)
	}
	return n, nil
}

// Stats counts pending, sending and dead rows.
func (s *Store) Stats(ctx context.Context) (ferrystore.Stats, error) {
	var st ferrystore.Stats
	var oldest int64
	if err := s.db.QueryRowContext(ctx, s.q.stats).Scan(&st.New, &st.Sending, &st.Dead, &st.Ready, &oldest); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	st.OldestPending = time.Duration(oldest) * time.Microsecond
	return st, nil
}

func migrationData(table string) map[string]string {
	return map[string]string{
		"Table":          quote(table),
		"SeqTable":       quote(table + "_seq"),
		"PendingIndex":   quote(table + "_pending_idx"),
		"AggregateIndex": quote(table + "_aggregate_idx"),
	}
}

// Migrations returns the migrations rendered for this store's table.
func (s *Store) Migrations() (fs.FS, error) {
	return migrate.Render(migrationsFS, "migrations", migrationData(s.table))
}

// MigrationFS returns the migrations for table (DefaultTable when empty),
// for use with another migration tool.
func MigrationFS(table string) (fs.FS, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ferrytype.ValidateIdentifier("table", table, 49); err != nil {
		return nil, err
	}
	return migrate.Render(migrationsFS, "migrations", migrationData(table))
}

// Migrate applies pending migrations in one immediate transaction.
func (s *Store) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return Apply(ctx, s.db, "outbox:"+s.table, fsys)
}

// Get returns one row by event id.
func (s *Store) Get(ctx context.Context, id string) (ferrystore.Row, error) {
	rows, err := ferrystore.SQL(s.db).Query(ctx, "SELECT "+sqlutil.RowColumns+" FROM "+s.q.t+" WHERE event_id = ?", id)
	if err != nil {
		return ferrystore.Row{}, fmt.Errorf("get event %s: %w", id, err)
	}
	return sqlutil.ScanRow(rows, id)
}
