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
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// DefaultTable is the outbox table's default name, the seed schema's.
const DefaultTable = sqlstore.DefaultTable

// Config configures a Store. The zero value (or nil) uses the defaults.
type Config struct {
	// Table is the outbox table. Default "outbox_event". The store also
	// uses Table+"_seq", Table+"_relay" (the relays' heartbeats) and
	// indexes named after the table. Validated (letters, digits and
	// underscores, not starting with a digit, at most 49 bytes, as on
	// PostgreSQL) and quoted.
	Table string
}

// Store is an outbox table in SQLite. It implements
// ferrystore.Driver[*sql.Tx].
type Store struct {
	sqlstore.Outbox
	sqlstore.SQLDB
	q queries
}

var (
	_ ferrystore.Driver[*sql.Tx] = (*Store)(nil)
	_ ferrystore.Admin           = (*Store)(nil)
)

type queries struct {
	claim, claimOrdered, claimIDs, claimIDsOrdered, seqUpsert string
}

// MaxTableLen is the longest outbox or inbox table name, in bytes, as on
// PostgreSQL (SQLite has no limit of its own): a table's name carries over
// from one database to the other.
const MaxTableLen = 49

// New returns a store on db, opened with modernc.org/sqlite. The store
// never closes db.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrysqlite.New: db is nil", ferrytype.ErrInvalidConfig)
	}
	var configured string
	if cfg != nil {
		configured = cfg.Table
	}
	table, err := sqlstore.TableName(configured, MaxTableLen)
	if err != nil {
		return nil, err
	}
	return &Store{Outbox: sqlstore.NewOutbox(dialect{}, sqlstore.SQLPool(db), table), SQLDB: sqlstore.NewSQLDB(db, false),
		q: buildQueries(table)}, nil
}

func quote(name string) string { return `"` + name + `"` }

const returning = " RETURNING event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers," +
	" destination, exchange, attempts, created_at"

func buildQueries(table string) queries {
	t, seq := quote(table), quote(table+"_seq")
	var q queries
	// TransitionClaim: the pending index, status NEW, oldest available
	// first; the UPDATE holds SQLite's write lock, so no row is skipped.
	update := "UPDATE " + t + " SET status = 'SENDING', lease_token = ?, locked_until = " + nowPlus +
		", attempts = attempts + 1 WHERE event_id IN ("
	q.claim = update + "SELECT event_id FROM " + t + " WHERE status = 'NEW' AND available_at <= " + now +
		" ORDER BY available_at, event_id LIMIT ?)" + returning
	q.claimOrdered = update + "SELECT e.event_id FROM " + t + " e WHERE e.status = 'NEW' AND e.available_at <= " + now +
		" AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE " + sqlstore.HeldBack + ")" +
		" ORDER BY e.available_at, e.event_id LIMIT ?)" + returning
	// The log relay's claims: the rows of the ids at {{IDS}}, by primary
	// key.
	q.claimIDs = update + "SELECT e.event_id FROM " + t + " e WHERE e.status = 'NEW' AND e.available_at <= " + now +
		" AND {{IDS}} ORDER BY e.available_at, e.event_id LIMIT ?)" + returning
	q.claimIDsOrdered = update + "SELECT e.event_id FROM " + t + " e WHERE e.status = 'NEW' AND e.available_at <= " + now +
		" AND {{IDS}} AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE " + sqlstore.HeldBack + ")" +
		" ORDER BY e.available_at, e.event_id LIMIT ?)" + returning
	q.seqUpsert = "INSERT INTO " + seq + " (aggregate_type, aggregate_id, last_seq) VALUES (?, ?, ?)" +
		" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + excluded.last_seq RETURNING last_seq"
	return q
}

// Enqueue inserts rows in ex, assigning aggregate sequence numbers.
func (s *Store) Enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	return classify(s.enqueue(ctx, ex, rows, opts))
}

func (s *Store) enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	if len(rows) == 0 {
		return nil
	}
	seqs := make([]int64, len(rows))
	var groups []sqlstore.AggregateGroup
	if !opts.SkipSequence {
		groups = sqlstore.GroupByAggregate(rows)
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
	seq := make([]string, len(rows))
	for i, n := range seqs {
		seq[i] = strconv.FormatInt(n, 10)
	}
	return sqlstore.Insert(ctx, &s.Outbox, ex, rows, seq)
}

// Claim leases up to p.Limit rows with one UPDATE ... RETURNING statement.
func (s *Store) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	msgs, err := s.claim(ctx, p)
	return msgs, classify(err)
}

func (s *Store) claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	query, args := s.q.claim, []any{p.Token, modifier(p.Lease), p.Limit}
	switch {
	case len(p.IDs) > 0:
		q := s.q.claimIDs
		if p.Ordered {
			q = s.q.claimIDsOrdered
		}
		cond, ids := sqlstore.InList("e.event_id", p.IDs)
		query = strings.Replace(q, "{{IDS}}", cond, 1)
		args = append(append([]any{p.Token, modifier(p.Lease)}, ids...), p.Limit)
	case p.Ordered:
		query = s.q.claimOrdered
	}
	rows, err := s.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	msgs, bad, err := sqlstore.ScanClaimed(rows, sqlstore.CheckPayloads)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	// The claim statement committed: malformed rows are SENDING under
	// p.Token and go on to DEAD with a statement of their own.
	if err := s.Bury(ctx, ferrystore.SQL(s.DB()), p.Token, bad); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	sqlstore.Report(p, bad)
	return msgs, nil
}

// Migrations returns the migrations rendered for this store's table.
func (s *Store) Migrations() (fs.FS, error) { return MigrationFS(s.Table()) }

// MigrationFS returns the migrations for table (DefaultTable when empty),
// for use with another migration tool.
func MigrationFS(table string) (fs.FS, error) {
	return sqlstore.MigrationFS(dialect{}, migrationsFS, table, MaxTableLen)
}

// CheckSchema compares the table with the embedded migrations
// (ferrystore.Store.CheckSchema).
func (s *Store) CheckSchema(ctx context.Context) (ferrystore.Schema, error) {
	fsys, err := s.Migrations()
	if err != nil {
		return ferrystore.Schema{Table: s.Table()}, err
	}
	return s.Schema(ctx, "outbox:"+s.Table(), fsys)
}

// Migrate applies pending migrations in one immediate transaction.
func (s *Store) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return Apply(ctx, s.DB(), "outbox:"+s.Table(), fsys)
}
