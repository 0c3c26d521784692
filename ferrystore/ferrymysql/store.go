// Package ferrymysql is ferry's store for MySQL 8 and MariaDB 10.6 or newer
// (both needed for FOR UPDATE SKIP LOCKED), through database/sql and
// github.com/go-sql-driver/mysql.
//
// Times are DATETIME(6) values from NOW(6), as in the seed schema: every
// session that writes the outbox (the application's and the relay's) must
// use the same time_zone, which holds when none of them changes the
// server's default.
//
// Enqueue assigns per-aggregate sequence numbers with
// INSERT ... ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(...), so after
// EnqueueTx the session's LAST_INSERT_ID() is the sequence number, not the
// caller's own auto-increment id: read that from your INSERT's sql.Result.
package ferrymysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

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
	// uses Table+"_seq" for aggregate sequence numbers and Table+"_relay"
	// for the relays' heartbeats. Validated (letters, digits and
	// underscores, not starting with a digit, at most 57 bytes, so that
	// Table+"_relay" fits MySQL's 64) and quoted.
	Table string
}

// Store is an outbox table in MySQL or MariaDB. It implements
// ferrystore.Driver[*sql.Tx].
type Store struct {
	sqlstore.Outbox
	sqlstore.SQLDB
	q queries
	// sessionReadCommitted: every session of the pool runs READ
	// COMMITTED already (Open sets it), so claims need not set it.
	sessionReadCommitted bool
}

var (
	_ ferrystore.Driver[*sql.Tx] = (*Store)(nil)
	_ ferrystore.Admin           = (*Store)(nil)
)

type queries struct {
	seq string // quoted

	claimSelect, claimSelectOrdered, claimUpdate, orderCheck string
	claimSelectIDs, claimSelectIDsTail                       string
	seqUpsert                                                string
}

// New returns a store on db, a pool the caller opened with
// github.com/go-sql-driver/mysql. For the throughput the benchmarks show,
// open it with interpolateParams=true. The store never closes db.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrymysql.New: db is nil", ferrytype.ErrInvalidConfig)
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

// MaxTableLen is the longest outbox table name, in bytes: with "_relay"
// after it, a name still fits the 63 bytes every identifier of ferry
// keeps to (MySQL's indexes are named within their table).
const MaxTableLen = 57

// MaxInboxTableLen is the longest inbox table name, in bytes: ferry names
// no table after an inbox table on MySQL.
const MaxInboxTableLen = 63

func quote(name string) string { return "`" + name + "`" }

const claimCols = "event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers, destination, exchange, attempts, created_at"

func buildQueries(table string) queries {
	t, seq := quote(table), quote(table+"_seq")
	q := queries{seq: seq}
	// TransitionClaim: idx_pending, status NEW, oldest available first.
	// The index is forced: right after a bulk load, before InnoDB has
	// counted the table again, the optimizer may take it for empty and
	// scan and sort the whole table on every claim.
	q.claimSelectIDs = "SELECT " + claimCols + " FROM " + t + " FORCE INDEX (PRIMARY)" +
		" WHERE status = 'NEW' AND available_at <= NOW(6) AND "
	// Without SKIP LOCKED: MariaDB sends a transaction to binlog readers
	// before InnoDB commits it, so the log relay's claim may come while
	// the inserting transaction still holds its rows; the locking read
	// waits those few moments and then reads the committed row (READ
	// COMMITTED), where SKIP LOCKED would miss it. The rows of other
	// relays' claims are held as briefly.
	q.claimSelectIDsTail = " ORDER BY available_at, event_id LIMIT ? FOR UPDATE"
	q.claimSelect = "SELECT " + claimCols + " FROM " + t + " FORCE INDEX (idx_pending)" +
		" WHERE status = 'NEW' AND available_at <= NOW(6)" +
		" ORDER BY available_at, event_id LIMIT ? FOR UPDATE SKIP LOCKED"
	// The NOT EXISTS filter narrows the candidates; whether InnoDB locks
	// (and so skips) the subquery's rows is an optimizer detail, so the
	// ordered claim re-checks its candidates with orderCheck, a plain
	// consistent read, before it updates them.
	//
	// Each candidate's check must be one lookup of idx_aggregate. Left to
	// itself, MariaDB materialises the subquery instead: every row of the
	// table not SENT, read on every claim (37 ms a claim on a 20,000-row
	// drain, against 1.6 ms). So materialization is off for the statement
	// on MariaDB (/*M! ... */), and MySQL 8 is told not to turn the NOT
	// EXISTS into an antijoin (/*+ NO_SEMIJOIN() */, a comment to MariaDB).
	q.claimSelectOrdered = "/*M! SET STATEMENT optimizer_switch='materialization=off' FOR */ SELECT " + claimCols + " FROM " + t + " e FORCE INDEX (idx_pending)" +
		" WHERE e.status = 'NEW' AND e.available_at <= NOW(6)" +
		" AND NOT EXISTS (SELECT /*+ NO_SEMIJOIN() */ 1 FROM " + t + " p FORCE INDEX (idx_aggregate) WHERE " + sqlstore.HeldBack + ")" +
		" ORDER BY e.available_at, e.event_id LIMIT ? FOR UPDATE SKIP LOCKED"
	// The candidates by the primary key first, then each one's
	// predecessor in idx_aggregate: a fixed plan, whatever the table's
	// statistics say after a bulk load (seen at 300 ms a check otherwise).
	q.orderCheck = "SELECT STRAIGHT_JOIN DISTINCT e.event_id FROM " + t + " e FORCE INDEX (PRIMARY)" +
		" JOIN " + t + " p FORCE INDEX (idx_aggregate) ON " + sqlstore.HeldBack + " WHERE "
	q.claimUpdate = dialect{}.Update() + t + " SET status = 'SENDING', lease_token = ?," +
		" locked_until = NOW(6) + INTERVAL ? MICROSECOND, attempts = attempts + 1" +
		" WHERE status = 'NEW' AND "
	q.seqUpsert = "INSERT INTO " + seq + " (aggregate_type, aggregate_id, last_seq) VALUES (?, ?, LAST_INSERT_ID(?))" +
		" ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + ?)"
	return q
}

// Enqueue inserts rows in ex. Events of one aggregate get consecutive
// sequence numbers from Table_seq, whose row lock serialises enqueues of
// that aggregate until the transaction ends.
func (s *Store) Enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	return classify(s.enqueue(ctx, ex, rows, opts))
}

func (s *Store) enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	if len(rows) == 0 {
		return nil
	}
	seqExpr := make([]string, len(rows))
	for i := range seqExpr {
		seqExpr[i] = "0"
	}
	var groups []sqlstore.AggregateGroup
	if !opts.SkipSequence {
		groups = sqlstore.GroupByAggregate(rows)
	}
	if len(groups) == 0 {
		return sqlstore.Insert(ctx, &s.Outbox, ex, rows, seqExpr)
	}
	// One group (the common case): a single upsert, then every row's
	// sequence is computed from LAST_INSERT_ID() in the INSERT itself.
	if len(groups) == 1 {
		g := groups[0]
		if err := s.bumpSeq(ctx, ex, g); err != nil {
			return err
		}
		for j, i := range g.Rows {
			seqExpr[i] = fmt.Sprintf("LAST_INSERT_ID() - %d", len(g.Rows)-1-j)
		}
		return sqlstore.Insert(ctx, &s.Outbox, ex, rows, seqExpr)
	}
	// Several aggregates: read each group's last value back.
	for _, g := range groups {
		if err := s.bumpSeq(ctx, ex, g); err != nil {
			return err
		}
		r, err := ex.Query(ctx, "SELECT LAST_INSERT_ID()")
		if err != nil {
			return fmt.Errorf("enqueue: read sequence: %w", err)
		}
		var last int64
		if r.Next() {
			err = r.Scan(&last)
		}
		r.Close()
		if err != nil {
			return fmt.Errorf("enqueue: read sequence: %w", err)
		}
		for j, i := range g.Rows {
			seqExpr[i] = fmt.Sprint(last - int64(len(g.Rows)-1-j))
		}
	}
	return sqlstore.Insert(ctx, &s.Outbox, ex, rows, seqExpr)
}

func (s *Store) bumpSeq(ctx context.Context, ex ferrystore.Executor, g sqlstore.AggregateGroup) error {
	n := len(g.Rows)
	if _, err := ex.Exec(ctx, s.q.seqUpsert, g.Type, g.ID, n, n); err != nil {
		return fmt.Errorf("enqueue: assign aggregate sequence: %w", err)
	}
	return nil
}

// Claim leases up to p.Limit rows in one short transaction: a locking
// SELECT ... FOR UPDATE SKIP LOCKED, then an UPDATE of exactly the ids it
// returned.
func (s *Store) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	return againOnDeadlock(func() ([]ferrytype.Message, error) { return s.claim(ctx, p) })
}

// MarkSent marks SENT the ids still SENDING under token, in one
// statement, run again when InnoDB picks it as a deadlock victim.
func (s *Store) MarkSent(ctx context.Context, token string, ids []string) (int64, error) {
	return againOnDeadlock(func() (int64, error) { return s.Outbox.MarkSent(ctx, token, ids) })
}

// Release gives back the ids still SENDING under token, run again when
// InnoDB picks it as a deadlock victim.
func (s *Store) Release(ctx context.Context, token string, ids []string) (int64, error) {
	return againOnDeadlock(func() (int64, error) { return s.Outbox.Release(ctx, token, ids) })
}

// MarkFailed records failed attempts in one transaction, run again when
// InnoDB picks it as a deadlock victim.
func (s *Store) MarkFailed(ctx context.Context, fails []ferrystore.Failure) (ferrystore.MarkFailedResult, error) {
	return againOnDeadlock(func() (ferrystore.MarkFailedResult, error) { return s.Outbox.MarkFailed(ctx, fails) })
}

// AcquireLease takes or renews a lease in one upsert, run again when
// InnoDB picks it as a deadlock victim: relays inserting an absent lease
// row at once each take a lock on the new key, and InnoDB may roll one
// back; the statement that lost changed nothing.
func (s *Store) AcquireLease(ctx context.Context, name, owner, source string, ttl time.Duration) (ferrystore.LeaseState, bool, error) {
	type acquired struct {
		st   ferrystore.LeaseState
		held bool
	}
	a, err := againOnDeadlock(func() (acquired, error) {
		st, held, err := s.Outbox.AcquireLease(ctx, name, owner, source, ttl)
		return acquired{st, held}, err
	})
	return a.st, a.held, err
}

// againOnDeadlock runs fn, and again at once, up to deadlockAttempts
// times in all, while InnoDB picks it as a deadlock victim. Concurrent
// claims and marks move index entries of idx_pending (and of the DEAD
// indexes' virtual columns) between statuses, and InnoDB now and then
// rolls one of them back; a statement or transaction that lost changed
// nothing, and each is fenced by its lease token, so running it again is
// safe. Failing it instead would back a claim off, or leave a batch that
// was published unmarked until its lease expires and it is published
// again. A lock wait timeout, which took innodb_lock_wait_timeout
// already, is not retried here. The error is classified.
func againOnDeadlock[T any](fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || attempt == deadlockAttempts || !isDeadlock(err) {
			return v, classify(err)
		}
	}
}

// deadlockAttempts bounds the runs of a statement that keeps losing
// deadlocks.
const deadlockAttempts = 5

func (s *Store) claim(ctx context.Context, p ferrystore.ClaimParams) (_ []ferrytype.Message, err error) {
	// READ COMMITTED: under InnoDB's default REPEATABLE READ the claim's
	// locking scan of idx_pending also locks the gap after the last NEW
	// entry, exactly where producers insert their new events; producers
	// would wait for relays and, now and then, deadlock with them. Under
	// READ COMMITTED the claim locks only the rows it takes.
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	if s.sessionReadCommitted {
		opts = nil // one round trip less: the session's level is the one
	}
	tx, err := s.DB().BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("claim: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	query, args := s.q.claimSelect, []any{p.Limit}
	switch {
	case len(p.IDs) > 0:
		// By primary key; an ordered claim's candidates are checked by
		// blocked below, as every ordered claim's are.
		cond, ids := sqlstore.InList("event_id", p.IDs)
		query, args = s.q.claimSelectIDs+cond+s.q.claimSelectIDsTail, append(ids, p.Limit)
	case p.Ordered:
		query = s.q.claimSelectOrdered
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: select: %w", explainSkipLocked(err))
	}
	msgs, bad, err := sqlstore.ScanClaimed(rows, sqlstore.CheckPayloads)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if p.Ordered && len(msgs)+len(bad) > 0 {
		blocked, err := s.blocked(ctx, tx, append(msgIDs(msgs), badIDs(bad)...))
		if err != nil {
			return nil, err
		}
		msgs = slices.DeleteFunc(msgs, func(m ferrytype.Message) bool { return blocked[m.ID] })
		bad = slices.DeleteFunc(bad, func(b sqlstore.Malformed) bool { return blocked[b.ID] })
	}
	if len(msgs)+len(bad) == 0 {
		return nil, tx.Commit()
	}
	claimed := append(msgIDs(msgs), badIDs(bad)...)
	cond, ids := sqlstore.InList("event_id", claimed)
	n, err := ferrystore.SQL(tx).Exec(ctx, s.q.claimUpdate+cond, append([]any{p.Token, sqlstore.Micros(p.Lease)}, ids...)...)
	if err != nil {
		return nil, fmt.Errorf("claim: update: %w", err)
	}
	if n != int64(len(claimed)) {
		return nil, fmt.Errorf("claim: updated %d of %d locked rows", n, len(claimed))
	}
	// Malformed rows go on to DEAD in the claim's own transaction.
	if err := s.Bury(ctx, ferrystore.SQL(tx), p.Token, bad); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim: commit: %w", err)
	}
	sqlstore.Report(p, bad)
	for i := range msgs {
		msgs[i].Attempt++
	}
	return msgs, nil
}

// blocked returns the candidates that have an earlier event of their
// aggregate not yet SENT, judged by a consistent (non-locking) read.
func (s *Store) blocked(ctx context.Context, tx *sql.Tx, candidates []string) (map[string]bool, error) {
	cond, args := sqlstore.InList("e.event_id", candidates)
	rows, err := tx.QueryContext(ctx, s.q.orderCheck+cond, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: order check: %w", err)
	}
	defer rows.Close()
	blocked := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("claim: order check: %w", err)
		}
		blocked[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: order check: %w", err)
	}
	return blocked, nil
}

func explainSkipLocked(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1064 && strings.Contains(me.Message, "SKIP") {
		return fmt.Errorf("%w (FOR UPDATE SKIP LOCKED needs MySQL 8.0.1+ or MariaDB 10.6+)", err)
	}
	return err
}

func badIDs(bad []sqlstore.Malformed) []string {
	ids := make([]string, len(bad))
	for i := range bad {
		ids[i] = bad[i].ID
	}
	return ids
}

func msgIDs(msgs []ferrytype.Message) []string {
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	return ids
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

// Migrate applies pending migrations under a named lock (GET_LOCK), so
// concurrent migrators wait for each other.
func (s *Store) Migrate(ctx context.Context) error {
	fsys, err := s.Migrations()
	if err != nil {
		return err
	}
	return Apply(ctx, s.DB(), "outbox:"+s.Table(), fsys)
}
