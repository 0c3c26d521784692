// Package ferrypg is ferry's store for PostgreSQL (12 or newer), through pgx
// (New, for pgx.Tx) or database/sql with pgx's stdlib driver (NewStdlib, for
// *sql.Tx). Both run the same SQL.
//
// With Config.Notify, Enqueue runs pg_notify inside the caller's
// transaction, so a relay that listens (LISTEN, see Listen) wakes the moment
// the transaction commits and never before; PostgreSQL delivers no
// notification for a transaction that rolls back.
package ferrypg

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
	"github.com/ferrydev/ferry/internal/sqlstore"
	"github.com/ferrydev/ferry/internal/token"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// DefaultTable is the outbox table's default name, the seed schema's.
const DefaultTable = sqlstore.DefaultTable

// Config configures a store. The zero value (or nil) uses the defaults.
type Config struct {
	// Table is the outbox table. Default "outbox_event". The store also
	// uses Table+"_seq", Table+"_relay" (the relays' heartbeats) and
	// indexes named after the table. Validated (letters, digits and
	// underscores, not starting with a digit, at most 49 bytes, so that the
	// names derived from it fit PostgreSQL's 63) and quoted.
	Table string
	// Notify makes EnqueueTx call pg_notify in the caller's transaction,
	// so that listening relays wake the moment it commits. Default false:
	// relays poll (and wake on in-process signals). PostgreSQL serialises
	// the commits of all notifying transactions on one lock; with 16
	// concurrent writers here it halved the enqueuing throughput. Turn it
	// on where latency matters more than peak write rate.
	Notify bool
}

// core is the store's implementation, shared by Store and StdlibStore.
type core struct {
	sqlstore.Outbox
	c       sqlstore.Pool
	channel string
	notify  bool
	close   func()
	listen  func(ctx context.Context, fn func(*pgx.Conn) error) error
	q       queries
	// payloadType is what the claims learnt of the payload column's
	// type: payloadUnknown, payloadJSON or payloadText.
	payloadType *atomic.Int32
}

const (
	payloadUnknown = iota
	payloadJSON    // json or jsonb: PostgreSQL checks every value written
	payloadText    // anything else: each claimed payload is checked
)

type queries struct {
	claim, claimOrdered, claimIDs, claimIDsOrdered, markFailed, seqInsert string
}

// Store is a PostgreSQL outbox used through pgx. It implements
// ferrystore.Driver[pgx.Tx].
type Store struct {
	core
	pool *pgxpool.Pool
}

// StdlibStore is a PostgreSQL outbox used through database/sql with pgx's
// stdlib driver. It implements ferrystore.Driver[*sql.Tx].
type StdlibStore struct{ core }

var (
	_ ferrystore.Driver[pgx.Tx]  = (*Store)(nil)
	_ ferrystore.Driver[*sql.Tx] = (*StdlibStore)(nil)
	_ ferrystore.Listener        = (*Store)(nil)
	_ ferrystore.Listener        = (*StdlibStore)(nil)
	_ ferrystore.Admin           = (*Store)(nil)
	_ ferrystore.Admin           = (*StdlibStore)(nil)
)

// New returns a store on pool. The store never closes pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: ferrypg.New: pool is nil", ferrytype.ErrInvalidConfig)
	}
	c, err := newCore(pgxPool{Pgx(pool), pool}, cfg)
	if err != nil {
		return nil, err
	}
	c.listen = func(ctx context.Context, fn func(*pgx.Conn) error) error {
		return listenOn(ctx, pool.Config().ConnConfig, fn)
	}
	return &Store{core: c, pool: pool}, nil
}

// NewStdlib returns a store on db, a database/sql pool opened with pgx's
// stdlib driver ("pgx"). The store never closes db.
func NewStdlib(db *sql.DB, cfg *Config) (*StdlibStore, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrypg.NewStdlib: db is nil", ferrytype.ErrInvalidConfig)
	}
	c, err := newCore(sqlstore.SQLPool(db), cfg)
	if err != nil {
		return nil, err
	}
	c.listen = stdlibListen(db)
	return &StdlibStore{c}, nil
}

// UnwrapTx returns an executor for the caller's pgx transaction.
func (s *Store) UnwrapTx(tx pgx.Tx) ferrystore.Executor { return Pgx(tx) }

// UnwrapTx returns an executor for the caller's database/sql transaction.
func (s *StdlibStore) UnwrapTx(tx *sql.Tx) ferrystore.Executor { return ferrystore.SQL(tx) }

// MaxTableLen is the longest outbox or inbox table name, in bytes: the
// names derived from it (<table>_aggregate_idx, 14 bytes longer, the
// longest) must fit PostgreSQL's 63-byte identifiers.
const MaxTableLen = 49

func newCore(c sqlstore.Pool, cfg *Config) (core, error) {
	var (
		configured string
		notify     bool
	)
	if cfg != nil {
		configured, notify = cfg.Table, cfg.Notify
	}
	table, err := sqlstore.TableName(configured, MaxTableLen)
	if err != nil {
		return core{}, err
	}
	return core{Outbox: sqlstore.NewOutbox(dialect{}, c, table), c: c, channel: "ferry_" + table, notify: notify,
		payloadType: new(atomic.Int32),
		q:           buildQueries(table)}, nil
}

func quote(name string) string { return `"` + name + `"` }

const claimCols = "t.event_id, t.aggregate_type, t.aggregate_id, t.aggregate_seq, t.event_type, t.payload::text," +
	" t.headers::text, t.destination, t.exchange, t.attempts, t.created_at"

func buildQueries(table string) queries {
	t, seq := quote(table), quote(table+"_seq")
	var q queries
	update := " UPDATE " + t + " t SET status = 'SENDING', lease_token = $2," +
		" locked_until = now() + $3::bigint * interval '1 microsecond', attempts = t.attempts + 1" +
		" FROM c WHERE t.event_id = c.event_id RETURNING " + claimCols
	// TransitionClaim in one statement: the locking SELECT (the pending
	// index, status NEW, oldest available first) and the UPDATE of
	// exactly its ids.
	//
	// The limit is a sub-select so that the planner does not see its
	// value: it then plans for the first tenth of the rows it expects,
	// which makes walking the pending index in order the cheapest plan
	// whatever the statistics say. With the value in view, statistics
	// taken while few rows were NEW (any steady state) made a fresh
	// connection's first claims of a backlog read every NEW row through a
	// bitmap scan and sort them all, 50-75 ms a claim of 100 at 20,000
	// pending: that is what a pooled connection's generic plan avoids, and
	// what a relay process's new connections paid, five claims each.
	q.claim = "WITH c AS (SELECT event_id FROM " + t + " WHERE status = 'NEW' AND available_at <= now()" +
		" ORDER BY available_at, event_id LIMIT (SELECT $1::int) FOR UPDATE SKIP LOCKED)" + update
	// FOR UPDATE locks only the rows of e; the NOT EXISTS sub-select is a
	// plain read of the statement's snapshot, in which an earlier event
	// whose claim is not yet committed still shows as NEW: conservative.
	q.claimOrdered = "WITH c AS (SELECT e.event_id FROM " + t + " e WHERE e.status = 'NEW' AND e.available_at <= now()" +
		" AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE " + sqlstore.HeldBack + ")" +
		" ORDER BY e.available_at, e.event_id LIMIT (SELECT $1::int) FOR UPDATE OF e SKIP LOCKED)" + update
	// The log relay's claims: the rows of the ids in $4, by primary key.
	q.claimIDs = "WITH c AS (SELECT event_id FROM " + t + " WHERE event_id = ANY($4::text[]) AND status = 'NEW'" +
		" AND available_at <= now() ORDER BY available_at, event_id LIMIT $1::int FOR UPDATE SKIP LOCKED)" + update
	q.claimIDsOrdered = "WITH c AS (SELECT e.event_id FROM " + t + " e WHERE e.event_id = ANY($4::text[]) AND e.status = 'NEW'" +
		" AND e.available_at <= now() AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE " + sqlstore.HeldBack + ")" +
		" ORDER BY e.available_at, e.event_id LIMIT $1::int FOR UPDATE OF e SKIP LOCKED)" + update
	// TransitionFailRetry or TransitionFailDead, all rows in one
	// statement, by the primary key; RETURNING says which rows changed.
	q.markFailed = "UPDATE " + t + " t SET status = f.status, available_at = now() + f.delay_us * interval '1 microsecond'," +
		" lease_token = NULL, locked_until = NULL, last_error = f.err, error_class = f.class" +
		" FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[]) AS f(id, token, status, delay_us, err, class)" +
		" WHERE t.event_id = f.id AND t.lease_token = f.token AND t.status = 'SENDING' RETURNING t.event_id"
	q.seqInsert = "INSERT INTO " + seq + " AS s (aggregate_type, aggregate_id, last_seq)"
	return q
}

// Channel returns the LISTEN/NOTIFY channel of the table: "ferry_" + table.
func (s *core) Channel() string { return s.channel }

// Close closes what the store opened itself (Open); a store built on the
// caller's pool leaves it open.
func (s *core) Close() error {
	if s.close != nil {
		s.close()
	}
	return nil
}

// Enqueue inserts rows in ex in one statement: a data-modifying CTE per
// aggregate increments its row in Table_seq (whose lock serialises
// enqueues of one aggregate until the transaction ends), and the INSERT
// computes each row's sequence from it. With notifications on, the same
// statement calls pg_notify.
func (s *core) Enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	return classify(s.enqueue(ctx, ex, rows, opts))
}

func (s *core) enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	if len(rows) == 0 {
		return nil
	}
	var (
		b    strings.Builder
		args []any
		seq  = make([]string, len(rows))
		ctes int
	)
	with := func() {
		if ctes == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		ctes++
	}
	for i := range seq {
		seq[i] = "0"
	}
	if !opts.SkipSequence {
		for g, grp := range sqlstore.GroupByAggregate(rows) {
			with()
			fmt.Fprintf(&b, "s%d AS (%s VALUES (?, ?, ?::bigint) ON CONFLICT (aggregate_type, aggregate_id)"+
				" DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq RETURNING last_seq)", g, s.q.seqInsert)
			args = append(args, grp.Type, grp.ID, len(grp.Rows))
			for j, i := range grp.Rows {
				seq[i] = fmt.Sprintf("(SELECT last_seq FROM s%d) - %d", g, len(grp.Rows)-1-j)
			}
		}
	}
	if s.notify {
		with()
		b.WriteString("ins AS (")
	}
	ins, insArgs, err := sqlstore.InsertRows(&s.Outbox, rows, seq)
	if err != nil {
		return err
	}
	b.WriteString(ins)
	args = append(args, insArgs...)
	if !s.notify {
		if _, err := ex.Exec(ctx, sqlstore.Rebind("postgres", b.String()), args...); err != nil {
			return fmt.Errorf("enqueue: insert into %s: %w", s.Table(), err)
		}
		return nil
	}
	b.WriteString(" RETURNING 1) SELECT pg_notify(?, '') FROM (SELECT 1 FROM ins LIMIT 1) x")
	r, err := ex.Query(ctx, sqlstore.Rebind("postgres", b.String()), append(args, s.channel)...)
	if err != nil {
		return fmt.Errorf("enqueue: insert into %s: %w", s.Table(), err)
	}
	for r.Next() {
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("enqueue: insert into %s: %w", s.Table(), err)
	}
	return nil
}

// payloadCheck says whether claimed payloads need a JSON check of their
// own: not when the payload column is json or jsonb (as the migrations
// create it), whose values PostgreSQL checked when they were written, and
// no session can turn that off. The first claim asks the catalog; until an
// answer came, payloads are checked.
func (s *core) payloadCheck(ctx context.Context) sqlstore.PayloadCheck {
	switch s.payloadType.Load() {
	case payloadJSON:
		return sqlstore.PayloadsTypedJSON
	case payloadText:
		return sqlstore.CheckPayloads
	}
	rows, err := s.c.Query(ctx, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"+
		" WHERE attrelid = to_regclass($1) AND attname = 'payload' AND NOT attisdropped", quote(s.Table()))
	if err != nil {
		return sqlstore.CheckPayloads
	}
	defer rows.Close()
	var typ string
	for rows.Next() {
		if err := rows.Scan(&typ); err != nil {
			return sqlstore.CheckPayloads
		}
	}
	if rows.Err() != nil {
		return sqlstore.CheckPayloads
	}
	switch typ {
	case "":
		return sqlstore.CheckPayloads // no table yet: ask again
	case "json", "jsonb":
		s.payloadType.Store(payloadJSON)
		return sqlstore.PayloadsTypedJSON
	}
	s.payloadType.Store(payloadText)
	return sqlstore.CheckPayloads
}

// Claim leases up to p.Limit rows in one statement.
func (s *core) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	msgs, err := s.claim(ctx, p)
	return msgs, classify(err)
}

func (s *core) claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	query, args := s.q.claim, []any{p.Limit, p.Token, sqlstore.Micros(p.Lease)}
	switch {
	case len(p.IDs) > 0 && p.Ordered:
		query, args = s.q.claimIDsOrdered, append(args, p.IDs)
	case len(p.IDs) > 0:
		query, args = s.q.claimIDs, append(args, p.IDs)
	case p.Ordered:
		query = s.q.claimOrdered
	}
	check := s.payloadCheck(ctx)
	rows, err := s.c.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	out, bad, err := sqlstore.ScanClaimed(rows, check)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	// The claim statement committed: malformed rows are SENDING under
	// p.Token and go on to DEAD with a statement of their own.
	if err := s.Bury(ctx, s.c, p.Token, bad); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	sqlstore.Report(p, bad)
	// RETURNING does not keep the SELECT's order.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// MarkFailed records failed attempts in one statement, whose RETURNING
// names the rows it changed; the others were fenced.
func (s *core) MarkFailed(ctx context.Context, fails []ferrystore.Failure) (ferrystore.MarkFailedResult, error) {
	if len(fails) == 0 {
		return ferrystore.MarkFailedResult{}, nil
	}
	ids := make([]string, len(fails))
	tokens := make([]string, len(fails))
	statuses := make([]string, len(fails))
	delays := make([]int64, len(fails))
	errs := make([]string, len(fails))
	classes := make([]string, len(fails))
	for i, f := range fails {
		ids[i], tokens[i], delays[i], errs[i] = f.ID, f.Token, sqlstore.Micros(f.Wait()), token.Truncate(f.Error, 2000)
		classes[i] = errclass.Of(errs[i])
		statuses[i] = string(ferrytype.TransitionFailRetry.To)
		if f.Dead {
			statuses[i] = string(ferrytype.TransitionFailDead.To)
		}
	}
	rows, err := s.c.Query(ctx, s.q.markFailed, ids, tokens, statuses, delays, errs, classes)
	if err != nil {
		return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed: %w", classify(err))
	}
	changed, err := sqlstore.ScanSet(rows)
	if err != nil {
		return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed: %w", classify(err))
	}
	return ferrystore.MarkFailedResultOf(fails, func(i int) bool { return changed[fails[i].ID] }), nil
}

// Migrations returns the migrations rendered for this store's table.
func (s *core) Migrations() (fs.FS, error) { return MigrationFS(s.Table()) }

// MigrationFS returns the migrations for table (DefaultTable when empty),
// for use with another migration tool.
func MigrationFS(table string) (fs.FS, error) {
	return sqlstore.MigrationFS(dialect{}, migrationsFS, table, MaxTableLen)
}

// CheckSchema compares the table with the embedded migrations
// (ferrystore.Store.CheckSchema).
func (s *core) CheckSchema(ctx context.Context) (ferrystore.Schema, error) {
	fsys, err := s.Migrations()
	if err != nil {
		return ferrystore.Schema{Table: s.Table()}, err
	}
	return s.Schema(ctx, "outbox:"+s.Table(), fsys)
}

// Migrate applies pending migrations in one transaction under an advisory
// lock, so concurrent migrators wait for each other.
func (s *core) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return apply(ctx, s.c, "outbox:"+s.Table(), fsys)
}
