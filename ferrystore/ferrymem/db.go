package ferrymem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// DBConfig configures a DB. The zero value (or nil) uses the defaults.
type DBConfig struct {
	// Clock is the database clock: every time the stores of the DB
	// stamp (created_at, available_at, locked_until, sent_at, a lease's
	// end, a relay's last beat, a marker's creation) is taken from it, and
	// so is every "now" they compare with. A test moves time by moving its
	// clock. It must be safe to call from several goroutines. Default
	// time.Now.
	Clock func() time.Time
}

// DB is one in-memory database: the tables of the Stores and Inboxes built
// on it (New, NewInbox), and the transactions that write them (Begin). A
// Store and an Inbox on one DB share its transactions, as tables of one SQL
// database do. Its zero value is not usable; NewDB makes one. It is safe
// for concurrent use.
type DB struct {
	clock func() time.Time

	mu sync.Mutex // guards everything below, and every table
	// locks are the locks transactions hold until they end, by name.
	locks map[string]*lock
	// The tables, by kind and name.
	outboxes  map[string]*outboxTable
	markers   map[string]*markerTable
	conflicts map[string]*conflictTable
	versions  map[string]*versionTable
	keys      map[string]*keyTable
	// nextListener numbers the functions of Store.Listen.
	nextListener uint64
}

// NewDB returns an empty database.
func NewDB(cfg *DBConfig) *DB {
	db := &DB{clock: time.Now, locks: map[string]*lock{}, outboxes: map[string]*outboxTable{},
		markers: map[string]*markerTable{}, conflicts: map[string]*conflictTable{},
		versions: map[string]*versionTable{}, keys: map[string]*keyTable{}}
	if cfg != nil && cfg.Clock != nil {
		db.clock = cfg.Clock
	}
	return db
}

// now reads the database clock, without the monotonic reading, so that
// the times the stores return compare and print as plain times.
func (db *DB) now() time.Time { return db.clock().Round(0) }

// statement runs fn with the database locked, after checking ctx: one
// statement, atomic with respect to every other.
func (db *DB) statement(ctx context.Context, fn func(now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return fn(db.now())
}

// ErrTxDone is returned by the operations of a transaction that was
// committed or rolled back (by a call, or because the context given to
// Begin ended).
var ErrTxDone = errors.New("ferrymem: transaction has already been committed or rolled back")

// The errors of the in-memory database, what a driver's errors are to a
// SQL store: classify puts them in ferry's classes.
var (
	errDuplicate = errors.New("duplicate key")
	errDeadlock  = errors.New("deadlock: the transaction waits for a lock held by a transaction that waits for one of its own; " +
		"roll back and try again")
	errNoTable = errors.New("no such table")
	errNoSQL   = errors.New("ferrymem runs no SQL: act on the ferrymem.Tx (OnCommit) instead")
)

// classify puts the database's errors in ferry's classes (see
// ferrystore.Classifier); other errors are returned unchanged.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errDuplicate):
		return ferrytype.Classed(err, ferrytype.ErrDuplicate)
	case errors.Is(err, errDeadlock):
		return ferrytype.Classed(err, ferrytype.ErrLockConflict, ferrytype.ErrRetryable)
	case errors.Is(err, errNoTable):
		return ferrytype.Classed(err, ferrytype.ErrUndefinedTable)
	}
	return err
}

// Tx is a transaction of a DB. Its writes — outbox rows, aggregate
// sequence numbers, inbox markers, versions, idempotency key completions —
// are seen by nobody else until Commit, and vanish at Rollback. Each write
// locks what it writes (an aggregate's sequence, an event id, a marker's
// key, a version, a key) until the transaction ends, as a SQL database
// locks the rows: another transaction writing the same waits for it, and
// two transactions that would wait for each other fail, one of them, with
// an error in the classes ferrytype.ErrLockConflict and ErrRetryable.
//
// A Tx is ended by Commit or Rollback, and rolled back when the context
// given to Begin ends, as a database/sql transaction is.
type Tx struct {
	db   *DB
	stop func() bool // stops the rollback on the end of Begin's context

	// Guarded by db.mu.
	done bool
	// held are the names of the locks the transaction holds.
	held []string
	// waits is the name of the lock it waits for; empty when it waits for
	// none.
	waits string

	// The staged writes, applied by Commit.
	rows     []stagedRow
	ids      map[*outboxTable]map[string]bool // the ids of rows
	seqs     map[seqLock]int64
	markers  []stagedMarker
	versions map[versionLock]int64
	keys     map[keyLock]*keyRow
	onCommit []func()
}

// Begin starts a transaction. It is rolled back when ctx ends before it
// does.
func (db *DB) Begin(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ferrymem: begin: %w", err)
	}
	tx := &Tx{db: db}
	tx.stop = context.AfterFunc(ctx, tx.abort)
	return tx, nil
}

// OnCommit registers fn to run when the transaction commits, and never if
// it rolls back: how a unit test keeps its own in-memory business state —
// the effect an inbox operation applies, the change an event announces —
// in the transaction that writes the outbox row or the inbox marker. The
// functions run in the order they were registered, inside the commit:
// after the transaction's writes are in place and before anyone sees them
// or takes the locks it held, so that a commit's writes and its functions'
// effects are seen together, in commit order. fn must not use the DB
// (which it would wait for forever) and should not fail: the commit has
// happened. OnCommit returns ErrTxDone on a transaction that ended.
func (tx *Tx) OnCommit(fn func()) error {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.onCommit = append(tx.onCommit, fn)
	return nil
}

// Commit makes the transaction's writes visible to all, runs its OnCommit
// functions, and releases its locks. It returns ErrTxDone when the
// transaction had ended.
func (tx *Tx) Commit() error {
	db := tx.db
	var notify []func()
	err := func() error {
		db.mu.Lock()
		defer db.mu.Unlock()
		if tx.done {
			return ErrTxDone
		}
		notify = tx.apply()
		fns := tx.onCommit
		tx.end()
		defer db.release(tx)
		for _, fn := range fns {
			fn()
		}
		return nil
	}()
	if err != nil {
		return err
	}
	tx.stop()
	for _, fn := range notify {
		fn()
	}
	return nil
}

// Rollback discards the transaction's writes and releases its locks. It
// returns ErrTxDone when the transaction had ended.
func (tx *Tx) Rollback() error {
	if !tx.abandon() {
		return ErrTxDone
	}
	tx.stop()
	return nil
}

// abort rolls tx back when the context given to Begin ends.
func (tx *Tx) abort() { tx.abandon() }

// abandon ends tx without applying its writes; it reports whether tx was
// still open.
func (tx *Tx) abandon() bool {
	db := tx.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if tx.done {
		return false
	}
	tx.end()
	db.release(tx)
	return true
}

// end marks tx ended and drops its staged writes.
func (tx *Tx) end() {
	tx.done = true
	tx.rows, tx.ids, tx.seqs, tx.markers, tx.versions, tx.keys, tx.onCommit = nil, nil, nil, nil, nil, nil, nil
}

// apply writes the staged writes of tx into the tables, and returns the
// functions listening to the outbox tables it inserted rows into.
func (tx *Tx) apply() []func() {
	var notify []func()
	inserted := map[*outboxTable]bool{}
	for _, s := range tx.rows {
		s.table.insert(s.row)
		if !inserted[s.table] {
			inserted[s.table] = true
			for _, fn := range s.table.listeners {
				notify = append(notify, fn)
			}
		}
	}
	for k, last := range tx.seqs {
		k.table.seqs[k.aggregate] = last
	}
	for _, m := range tx.markers {
		m.table.rows[markerKey{m.marker.Consumer, m.marker.Key}] = m.marker
	}
	for k, v := range tx.versions {
		k.table.rows[k.key] = v
	}
	for k, r := range tx.keys {
		k.table.rows[k.hash] = r
	}
	return notify
}

// lock is a lock a transaction holds until it ends.
type lock struct {
	holder *Tx
	// free is closed when the holder ends.
	free chan struct{}
}

// acquire takes the lock name for tx, waiting while another transaction
// holds it. db.mu must be held; acquire gives it up while it waits and
// holds it again when it returns. It fails when tx ended, when ctx ends,
// or when waiting would close a cycle of transactions waiting for each
// other (errDeadlock: tx is the victim).
func (db *DB) acquire(ctx context.Context, tx *Tx, name string) error {
	for {
		if tx.done {
			return ErrTxDone
		}
		l := db.locks[name]
		switch {
		case l == nil:
			db.locks[name] = &lock{holder: tx, free: make(chan struct{})}
			tx.held = append(tx.held, name)
			return nil
		case l.holder == tx:
			return nil
		case db.waitsFor(l.holder, tx):
			return errDeadlock
		}
		tx.waits = name
		err := db.wait(ctx, l.free)
		tx.waits = ""
		if err != nil {
			return err
		}
	}
}

// waitFree waits until no transaction holds the lock name: what a write of
// the stores' own, outside any transaction, does before it changes what a
// transaction locked. db.mu must be held, as for acquire.
func (db *DB) waitFree(ctx context.Context, name string) error {
	for {
		l := db.locks[name]
		if l == nil {
			return nil
		}
		if err := db.wait(ctx, l.free); err != nil {
			return err
		}
	}
}

// held reports whether a transaction holds the lock name.
func (db *DB) held(name string) bool { return db.locks[name] != nil }

// wait gives up db.mu until free is closed or ctx ends.
func (db *DB) wait(ctx context.Context, free chan struct{}) error {
	db.mu.Unlock()
	defer db.mu.Lock()
	select {
	case <-free:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitsFor reports whether from waits, directly or through other waiting
// transactions, for a lock that to holds.
func (db *DB) waitsFor(from, to *Tx) bool {
	seen := map[*Tx]bool{}
	for x := from; x != nil && !seen[x]; {
		if x == to {
			return true
		}
		seen[x] = true
		l := db.locks[x.waits]
		if x.waits == "" || l == nil {
			return false
		}
		x = l.holder
	}
	return false
}

// release frees the locks tx holds, waking their waiters.
func (db *DB) release(tx *Tx) {
	for _, name := range tx.held {
		if l := db.locks[name]; l != nil && l.holder == tx {
			delete(db.locks, name)
			close(l.free)
		}
	}
	tx.held = nil
}

// executor is the Executor of a transaction (UnwrapTx). The stores
// recognise it and act on its transaction; it runs no SQL.
type executor struct{ tx *Tx }

// Exec fails: the in-memory database runs no SQL.
func (e executor) Exec(_ context.Context, query string, _ ...any) (int64, error) {
	return 0, fmt.Errorf("ferrymem: Exec %q: %w", short(query), errNoSQL)
}

// Query fails: the in-memory database runs no SQL.
func (e executor) Query(_ context.Context, query string, _ ...any) (ferrystore.Rows, error) {
	return nil, fmt.Errorf("ferrymem: Query %q: %w", short(query), errNoSQL)
}

// short cuts a statement for an error message.
func short(q string) string {
	if len(q) > 60 {
		return q[:57] + "..."
	}
	return q
}

// unwrap returns the Executor of tx.
func unwrap(tx *Tx) ferrystore.Executor { return executor{tx} }

// txOf returns the transaction of ex, which must be the Executor of a
// transaction of db.
func txOf(db *DB, what string, ex ferrystore.Executor) (*Tx, error) {
	e, ok := ex.(executor)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: ferrymem: %s needs the Executor of a ferrymem transaction (UnwrapTx), got %T",
			ferrytype.ErrInvalidConfig, what, ex)
	case e.tx == nil:
		return nil, fmt.Errorf("%w: ferrymem: %s: the transaction is nil", ferrytype.ErrInvalidConfig, what)
	case e.tx.db != db:
		return nil, fmt.Errorf("%w: ferrymem: %s: the transaction is of another ferrymem.DB", ferrytype.ErrInvalidConfig, what)
	}
	return e.tx, nil
}

// positive checks a limit.
func positive(what string, limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: %s: limit %d must be positive", ferrytype.ErrInvalidConfig, what, limit)
	}
	return nil
}
