package ferrymem

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing/fstest"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
	"github.com/ferrydev/ferry/internal/sqlstore"
	"github.com/ferrydev/ferry/internal/token"
)

// DefaultTable is the outbox table's default name, the seed schema's.
const DefaultTable = sqlstore.DefaultTable

// maxTable is the longest table name, as on SQLite and PostgreSQL.
const maxTable = 49

// dialect is what the stores' Dialect methods return.
const dialect = "memory"

// Config configures a Store. The zero value (or nil) uses the defaults.
type Config struct {
	// Table is the outbox table. Default "outbox_event". It is validated
	// as the SQL stores validate it (letters, digits and underscores, not
	// starting with a digit, at most 49 bytes), so that a name they refuse
	// is refused here with the same error. Stores of one DB on one table
	// share its rows, heartbeats and leases, as stores on one SQL table do;
	// stores on other tables share nothing with it.
	Table string
}

// Store is an outbox table in a DB. It implements ferrystore.Driver[*Tx],
// ferrystore.Admin and ferrystore.Listener.
type Store struct {
	db *DB
	t  *outboxTable
}

var (
	_ ferrystore.Driver[*Tx] = (*Store)(nil)
	_ ferrystore.Admin       = (*Store)(nil)
	_ ferrystore.Listener    = (*Store)(nil)
)

// New returns a store on cfg.Table of db: a table that exists from then
// on, empty until events are written to it.
func New(db *DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrymem.New: db is nil", ferrytype.ErrInvalidConfig)
	}
	var configured string
	if cfg != nil {
		configured = cfg.Table
	}
	table, err := sqlstore.TableName(configured, maxTable)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	t := db.outboxes[table]
	if t == nil {
		t = &outboxTable{name: table, rows: map[string]*row{}, pending: map[string]*row{}, bySeq: map[seqKey]*row{},
			counts: map[ferrytype.Status]int64{}, seqs: map[aggregate]int64{}, relays: map[string]*relayRow{},
			leases: map[string]*leaseRow{}, listeners: map[uint64]func(){}}
		db.outboxes[table] = t
	}
	return &Store{db: db, t: t}, nil
}

// DB returns the store's database.
func (s *Store) DB() *DB { return s.db }

// Dialect returns "memory".
func (s *Store) Dialect() string { return dialect }

// Table returns the outbox table's name.
func (s *Store) Table() string { return s.t.name }

// UnwrapTx returns the Executor of tx, which Enqueue recognises. It runs no
// SQL: its Exec and Query fail.
func (s *Store) UnwrapTx(tx *Tx) ferrystore.Executor { return unwrap(tx) }

// Classify puts the database's errors in ferry's classes: a duplicate key
// in ferrytype.ErrDuplicate, a deadlock in ErrLockConflict and
// ErrRetryable, a table that does not exist in ErrUndefinedTable.
func (s *Store) Classify(err error) error { return classify(err) }

// Migrate does nothing and succeeds: the tables exist from New on.
func (s *Store) Migrate(ctx context.Context) error { return ctx.Err() }

// Migrations returns an empty set of migrations: the in-memory database
// has no schema to create.
func (s *Store) Migrations() (fs.FS, error) { return fstest.MapFS{}, nil }

// CheckSchema reports the table current: it exists, and no migration is
// missing (none exists).
func (s *Store) CheckSchema(ctx context.Context) (ferrystore.Schema, error) {
	if err := ctx.Err(); err != nil {
		return ferrystore.Schema{Table: s.t.name}, err
	}
	return ferrystore.Schema{Table: s.t.name, TableExists: true}, nil
}

// Close does nothing: the store opened nothing. The DB and its data stay.
func (s *Store) Close() error { return nil }

// outboxTable is an outbox table with its sequence, heartbeat and lease
// tables, and what indexes them.
type outboxTable struct {
	name string
	rows map[string]*row
	// pending holds the NEW and SENDING rows: the pending index.
	pending map[string]*row
	// bySeq finds a row by aggregate and sequence number (above 0): the
	// aggregate index, which ordered claims look up predecessors in.
	bySeq map[seqKey]*row
	// counts counts the rows by status.
	counts map[ferrytype.Status]int64
	// seqs is the last sequence number given to each aggregate.
	seqs   map[aggregate]int64
	relays map[string]*relayRow
	leases map[string]*leaseRow
	// listeners are the functions of Listen, called after each commit
	// that inserted rows.
	listeners map[uint64]func()
}

type aggregate struct{ typ, id string }

type seqKey struct {
	aggregate
	seq int64
}

// seqLock names a transaction's lock (and staged value) of an aggregate's
// sequence.
type seqLock struct {
	table     *outboxTable
	aggregate aggregate
}

// stagedRow is a row a transaction inserted.
type stagedRow struct {
	table *outboxTable
	row   *row
}

// row is an outbox row: the seed schema's columns and ferry's.
type row struct {
	id, aggType, aggID string
	seq                int64
	typ                string
	payload            []byte
	headers            []byte // JSON text; nil for NULL
	dest, exch         string
	status             ferrytype.Status
	attempts           int
	availableAt        time.Time
	createdAt          time.Time
	token              string
	lockedUntil        time.Time
	sentAt             time.Time
	lastError          string
	discardedAt        time.Time
	discardReason      string
	errorClass         string
	revivedAt          time.Time
}

// route is where the row's event is published: its destination, or its
// type when it has none.
func (r *row) route() string {
	if r.dest != "" {
		return r.dest
	}
	return r.typ
}

// pendingSince is when the row became pending: its creation, or a person's
// retry out of DEAD.
func (r *row) pendingSince() time.Time {
	if !r.revivedAt.IsZero() {
		return r.revivedAt
	}
	return r.createdAt
}

// decode turns the row into a message as the SQL stores do
// (sqlstore.DecodeMessage): a row EnqueueTx would have refused is
// malformed, and the error wraps ferrytype.ErrMalformedRow. noPayload
// leaves the payload ({}) and the headers out.
func (r *row) decode(noPayload bool) (ferrytype.Message, error) {
	var payload, headers any = string(r.payload), nil
	if r.headers != nil {
		headers = string(r.headers)
	}
	if noPayload {
		payload, headers = "{}", nil
	}
	return sqlstore.DecodeMessage([]any{r.id, r.aggType, r.aggID, r.seq, r.typ, payload, headers, r.dest, r.exch,
		int64(r.attempts), r.createdAt})
}

// view is the row as the stores return it to an operator: a malformed row
// is read as far as it can be, with the reason in Malformed.
func (r *row) view(noPayload bool) ferrystore.Row {
	m, err := r.decode(noPayload)
	out := ferrystore.Row{Message: m, Status: r.status, LeaseToken: r.token, AvailableAt: r.availableAt,
		LockedUntil: r.lockedUntil, SentAt: r.sentAt, LastError: r.lastError, DiscardedAt: r.discardedAt,
		DiscardReason: r.discardReason, ErrorClass: r.errorClass, RevivedAt: r.revivedAt}
	if err != nil {
		out.Malformed = err.Error()
		if _, herr := sqlstore.DecodeHeaders(r.headers); herr != nil && !noPayload {
			out.RawHeaders = string(r.headers)
		}
	}
	return out
}

// claimed is the row as ExpiredClaims and ClaimsOf return it.
func (r *row) claimed() ferrystore.Claimed {
	return ferrystore.Claimed{ID: r.id, Token: r.token, Attempts: r.attempts, Destination: r.route()}
}

// before orders rows by (available_at, event_id): the pending index's
// order, in which claims take rows.
func before(a, b *row) int {
	if c := a.availableAt.Compare(b.availableAt); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// insert adds a committed row.
func (t *outboxTable) insert(r *row) {
	t.rows[r.id] = r
	t.counts[r.status]++
	if r.status == ferrytype.StatusNew || r.status == ferrytype.StatusSending {
		t.pending[r.id] = r
	}
	if r.seq > 0 {
		t.bySeq[seqKey{aggregate{r.aggType, r.aggID}, r.seq}] = r
	}
}

// remove deletes a row.
func (t *outboxTable) remove(r *row) {
	delete(t.rows, r.id)
	delete(t.pending, r.id)
	t.counts[r.status]--
	k := seqKey{aggregate{r.aggType, r.aggID}, r.seq}
	if t.bySeq[k] == r {
		delete(t.bySeq, k)
	}
}

// move changes the row's status along the edge tr, which the caller
// checked: the row is in tr.From.
func (t *outboxTable) move(r *row, tr ferrytype.Transition) {
	t.counts[r.status]--
	t.counts[tr.To]++
	r.status = tr.To
	if tr.To == ferrytype.StatusNew || tr.To == ferrytype.StatusSending {
		t.pending[r.id] = r
	} else {
		delete(t.pending, r.id)
	}
}

// heldBack reports whether the ordered claim of r waits: the event just
// before it in its aggregate exists and is neither SENT nor DISCARDED (see
// sqlstore.HeldBack). A missing predecessor holds nothing back.
func (t *outboxTable) heldBack(r *row) bool {
	if r.seq <= 1 {
		return false
	}
	p := t.bySeq[seqKey{aggregate{r.aggType, r.aggID}, r.seq - 1}]
	return p != nil && p.status != ferrytype.StatusSent && p.status != ferrytype.StatusDiscarded
}

// sorted returns the rows of m that keep holds, in order cmp.
func sorted(m map[string]*row, keep func(*row) bool, order func(a, b *row) int) []*row {
	var out []*row
	for _, r := range m {
		if keep(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, order)
	return out
}

// seqLockName, eventLockName name the locks of an enqueue.
func (t *outboxTable) seqLockName(a aggregate) string {
	return "outbox\x00" + t.name + "\x00seq\x00" + a.typ + "\x00" + a.id
}

func (t *outboxTable) eventLockName(id string) string {
	return "outbox\x00" + t.name + "\x00event\x00" + id
}

// Enqueue stages rows in the transaction of ex (UnwrapTx), assigning
// aggregate sequence numbers unless opts.SkipSequence. The rows become
// visible when the transaction commits. As in the SQL stores, each
// aggregate's sequence stays locked until the transaction ends, so that
// enqueuers of one aggregate are serialised and sequence order is commit
// order; an event id another open transaction inserted waits for it, and
// one that exists is a duplicate (ferrytype.ErrDuplicate). On an error
// nothing is staged; the caller rolls the transaction back. The rows are
// stored as given: one EnqueueTx would have refused is claimed as
// malformed.
func (s *Store) Enqueue(ctx context.Context, ex ferrystore.Executor, rows []ferrytype.Event, opts ferrystore.EnqueueOptions) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := txOf(s.db, "Enqueue", ex)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	db, t := s.db, s.t
	db.mu.Lock()
	defer db.mu.Unlock()
	var groups []sqlstore.AggregateGroup
	if !opts.SkipSequence {
		groups = sqlstore.GroupByAggregate(rows)
	}
	for _, g := range groups {
		if err := db.acquire(ctx, tx, t.seqLockName(aggregate{g.Type, g.ID})); err != nil {
			return fmt.Errorf("enqueue: assign aggregate sequence: %w", classify(err))
		}
	}
	seen := make(map[string]bool, len(rows))
	for i := range rows {
		id := rows[i].ID
		if err := db.acquire(ctx, tx, t.eventLockName(id)); err != nil {
			return fmt.Errorf("enqueue: insert into %s: %w", t.name, classify(err))
		}
		// Holding the id's lock, only tx could have staged it.
		if seen[id] || t.rows[id] != nil || tx.ids[t][id] {
			return fmt.Errorf("enqueue: insert into %s: %w", t.name,
				classify(fmt.Errorf("ferrymem: %w: event_id %q exists", errDuplicate, id)))
		}
		seen[id] = true
	}
	staged := make([]*row, len(rows))
	now := db.now()
	for i := range rows {
		ev := &rows[i]
		h, err := sqlstore.EncodeHeaders(ev.Headers)
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		staged[i] = &row{id: ev.ID, aggType: ev.AggregateType, aggID: ev.AggregateID, typ: ev.Type,
			payload: slices.Clone([]byte(ev.Payload)), headers: h, dest: ev.Destination, exch: ev.Exchange,
			status: ferrytype.StatusNew, availableAt: now.Add(ev.Delay), createdAt: now}
	}
	if tx.seqs == nil {
		tx.seqs = map[seqLock]int64{}
	}
	for _, g := range groups {
		k := seqLock{t, aggregate{g.Type, g.ID}}
		last, ok := tx.seqs[k]
		if !ok {
			last = t.seqs[k.aggregate]
		}
		for _, i := range g.Rows {
			last++
			staged[i].seq = last
		}
		tx.seqs[k] = last
	}
	if tx.ids == nil {
		tx.ids = map[*outboxTable]map[string]bool{}
	}
	if tx.ids[t] == nil {
		tx.ids[t] = map[string]bool{}
	}
	for _, r := range staged {
		tx.rows = append(tx.rows, stagedRow{t, r})
		tx.ids[t][r.id] = true
	}
	return nil
}

// Claim leases up to p.Limit available NEW rows to p.Token, oldest
// available first, in one step no other claim interleaves with: two claims
// never take the same row. With p.Ordered it takes only rows whose
// predecessor in their aggregate is SENT or DISCARDED (or gone); with
// p.IDs only those rows. A claimed row that cannot be turned into a
// message goes on to DEAD under p.Token with its reason
// (ferrytype.TransitionMalformed) and is reported to p.Malformed, never
// returned.
func (s *Store) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	if err := positive("claim", p.Limit); err != nil {
		return nil, err
	}
	var (
		msgs []ferrytype.Message
		bad  []sqlstore.Malformed
	)
	err := s.db.statement(ctx, func(now time.Time) error {
		t := s.t
		available := func(r *row) bool { return r.status == ferrytype.StatusNew && !r.availableAt.After(now) }
		var cands []*row
		if len(p.IDs) > 0 {
			seen := map[string]bool{}
			for _, id := range p.IDs {
				if r := t.rows[id]; r != nil && !seen[id] && available(r) {
					seen[id] = true
					cands = append(cands, r)
				}
			}
			slices.SortFunc(cands, before)
		} else {
			cands = sorted(t.pending, available, before)
		}
		// The predecessors are judged as they were before the claim, as
		// the SQL claim's snapshot judges them.
		held := make([]bool, len(cands))
		if p.Ordered {
			for i, r := range cands {
				held[i] = t.heldBack(r)
			}
		}
		taken := 0
		for i, r := range cands {
			if taken == p.Limit {
				break
			}
			if held[i] {
				continue
			}
			taken++
			t.move(r, ferrytype.TransitionClaim)
			r.token, r.lockedUntil, r.attempts = p.Token, now.Add(p.Lease), r.attempts+1
			m, err := r.decode(false)
			if err != nil {
				s.bury(r, now, err)
				bad = append(bad, sqlstore.Malformed{ID: r.id, Reason: err})
				continue
			}
			msgs = append(msgs, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	sqlstore.Report(p, bad)
	return msgs, nil
}

// bury records a claimed malformed row DEAD (ferrytype.TransitionMalformed)
// with its reason.
func (s *Store) bury(r *row, now time.Time, reason error) {
	s.t.move(r, ferrytype.TransitionMalformed)
	s.fail(r, now, 0, reason.Error())
}

// fail records a failed attempt's error on r, now in its new status.
func (s *Store) fail(r *row, now time.Time, delay time.Duration, msg string) {
	msg = token.Truncate(msg, 2000)
	r.availableAt, r.token, r.lockedUntil = now.Add(delay), "", time.Time{}
	r.lastError, r.errorClass = msg, errclass.Of(msg)
}

// sending returns the row id if it is SENDING under tok.
func (s *Store) sending(id, tok string) *row {
	r := s.t.rows[id]
	if r == nil || r.status != ferrytype.StatusSending || r.token != tok {
		return nil
	}
	return r
}

// MarkSent marks SENT the rows among ids still SENDING under tok
// (ferrytype.TransitionConfirm).
func (s *Store) MarkSent(ctx context.Context, tok string, ids []string) (int64, error) {
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, id := range ids {
			if r := s.sending(id, tok); r != nil {
				s.t.move(r, ferrytype.TransitionConfirm)
				r.token, r.lockedUntil, r.sentAt = "", time.Time{}, now
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return n, nil
}

// MarkFailed records failed attempts, each row still SENDING under its
// token going back to NEW after its delay or to DEAD, in one step.
func (s *Store) MarkFailed(ctx context.Context, fails []ferrystore.Failure) (ferrystore.MarkFailedResult, error) {
	changed := make([]bool, len(fails))
	err := s.db.statement(ctx, func(now time.Time) error {
		for i, f := range fails {
			r := s.sending(f.ID, f.Token)
			if r == nil {
				continue
			}
			tr := ferrytype.TransitionFailRetry
			if f.Dead {
				tr = ferrytype.TransitionFailDead
			}
			s.t.move(r, tr)
			s.fail(r, now, f.Wait(), f.Error)
			changed[i] = true
		}
		return nil
	})
	if err != nil {
		return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed: %w", err)
	}
	return ferrystore.MarkFailedResultOf(fails, func(i int) bool { return changed[i] }), nil
}

// Release gives back the rows among ids still SENDING under tok: NEW,
// available now, the claim's attempt taken back
// (ferrytype.TransitionRelease).
func (s *Store) Release(ctx context.Context, tok string, ids []string) (int64, error) {
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, id := range ids {
			if r := s.sending(id, tok); r != nil {
				s.t.move(r, ferrytype.TransitionRelease)
				r.attempts = max(r.attempts-1, 0)
				r.availableAt, r.token, r.lockedUntil = now, "", time.Time{}
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
}

// ExpiredClaims returns up to limit SENDING rows whose lease ended, the
// longest ended first.
func (s *Store) ExpiredClaims(ctx context.Context, limit int) ([]ferrystore.Claimed, error) {
	if err := positive("expired claims", limit); err != nil {
		return nil, err
	}
	var out []ferrystore.Claimed
	err := s.db.statement(ctx, func(now time.Time) error {
		rows := sorted(s.t.pending, func(r *row) bool {
			return r.status == ferrytype.StatusSending && r.lockedUntil.Before(now)
		}, func(a, b *row) int {
			return cmp.Or(a.lockedUntil.Compare(b.lockedUntil), strings.Compare(a.id, b.id))
		})
		for _, r := range rows[:min(limit, len(rows))] {
			out = append(out, r.claimed())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expired claims: %w", err)
	}
	return out, nil
}

// ClaimsOf returns up to limit SENDING rows claimed under prefix + ".",
// whatever their lease.
func (s *Store) ClaimsOf(ctx context.Context, prefix string, limit int) ([]ferrystore.Claimed, error) {
	if err := ferrystore.ValidateClaimsPrefix(prefix); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: claims of %s: limit %d must be positive", ferrytype.ErrInvalidConfig, prefix, limit)
	}
	var out []ferrystore.Claimed
	err := s.db.statement(ctx, func(time.Time) error {
		rows := sorted(s.t.pending, func(r *row) bool {
			return r.status == ferrytype.StatusSending && strings.HasPrefix(r.token, prefix+".")
		}, before)
		for _, r := range rows[:min(limit, len(rows))] {
			out = append(out, r.claimed())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claims of %s: %w", prefix, err)
	}
	return out, nil
}

// PurgeSent deletes up to limit SENT rows sent (and made available) more
// than olderThan ago, oldest available first
// (ferrytype.TransitionPurgeSent).
func (s *Store) PurgeSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if err := positive("purge sent", limit); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, r := range s.purgeableSent(now.Add(-olderThan)) {
			if n == int64(limit) {
				break
			}
			s.t.remove(r)
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge sent: %w", err)
	}
	return n, nil
}

// purgeableSent returns the SENT rows PurgeSent deletes with the bound
// at, in the order it deletes them.
func (s *Store) purgeableSent(at time.Time) []*row {
	return sorted(s.t.rows, func(r *row) bool {
		return r.status == ferrytype.TransitionPurgeSent.From && r.availableAt.Before(at) && r.sentAt.Before(at)
	}, before)
}

// Ready reports whether a NEW row is available now.
func (s *Store) Ready(ctx context.Context) (bool, error) {
	var found bool
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, r := range s.t.pending {
			if r.status == ferrytype.StatusNew && !r.availableAt.After(now) {
				found = true
				break
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ready: %w", err)
	}
	return found, nil
}

// Pending reports whether any row is NEW or SENDING.
func (s *Store) Pending(ctx context.Context) (bool, error) {
	var found bool
	err := s.db.statement(ctx, func(time.Time) error {
		found = len(s.t.pending) > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("pending: %w", err)
	}
	return found, nil
}

// Stats counts the rows by status, exactly, and measures the oldest
// pending row among the rows next in line (nextInLine), as the SQL stores
// do.
func (s *Store) Stats(ctx context.Context) (ferrystore.Stats, error) {
	var st ferrystore.Stats
	err := s.db.statement(ctx, func(now time.Time) error {
		t := s.t
		st.New, st.Sending = t.counts[ferrytype.StatusNew], t.counts[ferrytype.StatusSending]
		st.Sent, st.Dead = t.counts[ferrytype.StatusSent], t.counts[ferrytype.StatusDead]
		st.Windowed = st.New > ferrystore.PendingWindow || st.Sending > ferrystore.PendingWindow
		for _, r := range t.pending {
			if r.status == ferrytype.StatusNew && !r.availableAt.After(now) {
				st.Ready++
			}
		}
		var oldest *row
		for _, r := range t.nextInLine() {
			if oldest == nil || cmp.Or(r.pendingSince().Compare(oldest.pendingSince()), strings.Compare(r.id, oldest.id)) < 0 {
				oldest = r
			}
		}
		if oldest != nil {
			st.OldestPendingID = oldest.id
			st.OldestPending = max(now.Sub(oldest.pendingSince()), 0)
		}
		return nil
	})
	if err != nil {
		return ferrystore.Stats{}, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// Get returns one row by event id, or an error wrapping
// ferrytype.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (ferrystore.Row, error) {
	var out ferrystore.Row
	err := s.db.statement(ctx, func(time.Time) error {
		r := s.t.rows[id]
		if r == nil {
			return fmt.Errorf("event %s: %w", id, ferrytype.ErrNotFound)
		}
		out = r.view(false)
		return nil
	})
	if err != nil {
		return ferrystore.Row{}, fmt.Errorf("get event %s: %w", id, err)
	}
	return out, nil
}

// Listen calls notify after each commit that inserted rows into the
// table, until ctx ends; it returns ctx's error. A relay on the store
// listens (unless RelayConfig.DisableListen), and so claims an event as
// soon as its transaction commits.
func (s *Store) Listen(ctx context.Context, notify func()) error {
	db := s.db
	db.mu.Lock()
	id := db.nextListener
	db.nextListener++
	s.t.listeners[id] = notify
	db.mu.Unlock()
	<-ctx.Done()
	db.mu.Lock()
	delete(s.t.listeners, id)
	db.mu.Unlock()
	return ctx.Err()
}
