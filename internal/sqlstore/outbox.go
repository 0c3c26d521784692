package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
	"github.com/ferrydev/ferry/internal/token"
)

// Outbox implements the ferrystore.Store and ferrystore.Admin operations
// that every dialect runs the same way, on the store's own pool. A dialect's
// store embeds it and adds Claim, Enqueue, migrations and opening.
//
// Statements that find rows by status walk the pending index (status,
// available_at, event_id): idx_pending in MySQL, <table>_pending_idx
// elsewhere. Statements given event ids find them by the primary key.
type Outbox struct {
	d    Dialect
	pool Pool
	// name is the table's name; t is it quoted.
	name, t string
	// cols lists rowColumns as the dialect selects them;
	// stateCols the same with a constant payload and no headers.
	cols, stateCols string
	// The conditions of PurgeSent and PurgeDiscarded; each ? takes the
	// same age.
	purgeSentWhere, purgeDiscardedWhere string

	markSent, markFailed, release, expired, claimsOf, purge, stats, ready, pending, get string
	// relays are the statements of the heartbeat table, table_relay.
	relays relayStatements
	// leases are the statements of the lease table, table_lease.
	leases leaseStatements
}

// NewOutbox returns the shared store of the validated table on pool. Every
// error of the pool's statements is classified by d.
func NewOutbox(d Dialect, pool Pool, table string) Outbox {
	t := d.Quote(table)
	if pool != nil {
		pool = Classifying(pool, d.Classify)
	}
	o := Outbox{d: d, pool: pool, name: table, t: t}
	o.cols = strings.NewReplacer("payload,", d.Text("payload")+",", "headers,", d.Text("headers")+",").
		Replace(rowColumns)
	o.stateCols = strings.NewReplacer("payload,", "'{}',", "headers,", "NULL,").Replace(rowColumns)
	now, shift := d.Now(), d.Shift()
	// TransitionConfirm, by the primary key; the id list is spliced in.
	o.markSent = "UPDATE " + t + " SET status = " + lit(ferrytype.TransitionConfirm.To) +
		", lease_token = NULL, locked_until = NULL, sent_at = " + now +
		" WHERE status = " + lit(ferrytype.TransitionConfirm.From) + " AND lease_token = ? AND "
	// TransitionFailRetry or TransitionFailDead, by the primary key.
	o.markFailed = d.Rebind(d.Update() + t + " SET status = ?, available_at = " + shift +
		", lease_token = NULL, locked_until = NULL, last_error = ?, error_class = ?" +
		" WHERE status = " + lit(ferrytype.TransitionFailRetry.From) + " AND lease_token = ? AND event_id = ?")
	// TransitionRelease, by the primary key; the id list is spliced in.
	o.release = "UPDATE " + t + " SET status = " + lit(ferrytype.TransitionRelease.To) +
		", attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END" +
		", available_at = " + now + ", lease_token = NULL, locked_until = NULL" +
		" WHERE status = " + lit(ferrytype.TransitionRelease.From) + " AND lease_token = ? AND "
	// The pending index, status SENDING.
	claimed := "SELECT event_id, lease_token, attempts, CASE WHEN destination = '' THEN event_type ELSE destination END" +
		" FROM " + t + " WHERE status = " + lit(ferrytype.StatusSending)
	o.expired = d.Rebind(claimed + " AND locked_until < " + now + " ORDER BY locked_until LIMIT ?")
	// The pending index (status, available_at, event_id), status
	// SENDING, in its order: no sort, and no lock. Each SENDING row is
	// read for its token, whose prefix is compared exactly (LIKE would
	// ignore case on SQLite); the prefix's length is spliced in.
	o.claimsOf = claimed + " AND SUBSTR(lease_token, 1, %d) = ? ORDER BY available_at, event_id LIMIT ?"
	// TransitionPurgeSent: the pending index, status SENT, oldest first.
	o.purgeSentWhere = "status = " + lit(ferrytype.TransitionPurgeSent.From) + " AND available_at < " + shift +
		" AND sent_at < " + shift
	o.purgeDiscardedWhere = "status = " + lit(ferrytype.TransitionPurgeDiscarded.From) + " AND discarded_at < " + shift
	o.purge = d.Rebind(d.DeleteLimited(t, o.purgeSentWhere, "available_at, event_id"))
	// Each count reads its status's entries of the pending index alone
	// (status, available_at), never a row: exact at any number. The NEW
	// rows not available yet are counted from now on in the index (delayed
	// events, retries waiting), the ready ones being the others, so that the
	// NEW entries are read once. The oldest pending row is looked for among
	// the rows next in line only (nextInLine): at most 2 ×
	// ferrystore.PendingWindow rows read.
	count := func(cond string) string { return "(SELECT COUNT(*) FROM " + t + " WHERE " + cond + ")" }
	o.stats = d.Rebind("SELECT c.n_new, c.n_sending, c.n_dead, c.n_later, COALESCE(p.event_id, ''), COALESCE(p.age, 0) FROM" +
		" (SELECT " + count("status = 'NEW'") + " AS n_new, " + count("status = 'SENDING'") + " AS n_sending, " +
		count("status = 'DEAD'") + " AS n_dead, " + count("status = 'NEW' AND available_at > "+now) + " AS n_later) c LEFT JOIN" +
		" (SELECT event_id, " + d.AgeMicros(pendingSince) + " AS age FROM " +
		nextInLine(t, "event_id, created_at, revived_at") + " next_in_line" +
		" ORDER BY " + d.Moment(pendingSince) + ", event_id LIMIT 1) p ON 1 = 1")
	// The pending index, status NEW, up to now: one index entry is read at
	// most, never a row, so the statement costs the same on a table of any
	// size and locks nothing.
	o.ready = "SELECT 1 FROM " + t + " WHERE status = " + lit(ferrytype.StatusNew) +
		" AND available_at <= " + now + " LIMIT 1"
	// The pending index, statuses NEW and SENDING: one entry at most.
	o.pending = "SELECT 1 FROM " + t + " WHERE status IN (" + lit(ferrytype.StatusNew) + ", " +
		lit(ferrytype.StatusSending) + ") LIMIT 1"
	o.get = d.Rebind("SELECT " + o.cols + " FROM " + t + " WHERE event_id = ?")
	o.relays = newRelayStatements(d, table)
	o.leases = newLeaseStatements(d, table)
	return o
}

// lit is a status as an SQL literal.
func lit(s ferrytype.Status) string { return "'" + string(s) + "'" }

// Dialect returns the dialect's name.
func (o *Outbox) Dialect() string { return o.d.Name() }

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.name }

// Classify wraps a driver error in ferry's classes.
func (o *Outbox) Classify(err error) error { return o.d.Classify(err) }

// in splices the id list into q (ending in "AND ") and binds it after the
// leading arguments.
func (o *Outbox) in(q, col string, vals []string, lead ...any) (string, []any) {
	cond, args := o.d.In(col, vals)
	return o.d.Rebind(q + cond), append(lead, args...)
}

// MarkSent marks SENT the ids still SENDING under token, in one statement.
func (o *Outbox) MarkSent(ctx context.Context, token string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	q, args := o.in(o.markSent, "event_id", ids, token)
	n, err := o.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	return n, nil
}

// Release gives back the ids still SENDING under token, in one
// statement, taking back the claim's attempt.
func (o *Outbox) Release(ctx context.Context, token string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	q, args := o.in(o.release, "event_id", ids, token)
	n, err := o.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
}

// MarkFailed records failed attempts in one transaction, one statement a
// row; a row the statement did not change was fenced.
func (o *Outbox) MarkFailed(ctx context.Context, fails []ferrystore.Failure) (_ ferrystore.MarkFailedResult, err error) {
	if len(fails) == 0 {
		return ferrystore.MarkFailedResult{}, nil
	}
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	changed := make([]bool, len(fails))
	for i, f := range fails {
		to := ferrytype.TransitionFailRetry.To
		if f.Dead {
			to = ferrytype.TransitionFailDead.To
		}
		msg := token.Truncate(f.Error, 2000)
		n, err := tx.Exec(ctx, o.markFailed, string(to), later(o.d, f.Wait()), msg, errclass.Of(msg), f.Token, f.ID)
		if err != nil {
			return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed %s: %w", f.ID, err)
		}
		changed[i] = n > 0
	}
	if err := tx.Commit(ctx); err != nil {
		return ferrystore.MarkFailedResult{}, fmt.Errorf("mark failed: commit: %w", err)
	}
	return ferrystore.MarkFailedResultOf(fails, func(i int) bool { return changed[i] }), nil
}

// ExpiredClaims returns up to limit SENDING rows whose lease ended.
func (o *Outbox) ExpiredClaims(ctx context.Context, limit int) ([]ferrystore.Claimed, error) {
	rows, err := o.pool.Query(ctx, o.expired, limit)
	if err != nil {
		return nil, fmt.Errorf("expired claims: %w", err)
	}
	return scanClaimed(rows, "expired claims")
}

// ClaimsOf returns up to limit SENDING rows claimed under prefix + ".".
func (o *Outbox) ClaimsOf(ctx context.Context, prefix string, limit int) ([]ferrystore.Claimed, error) {
	if err := ferrystore.ValidateClaimsPrefix(prefix); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: claims of %s: limit %d must be positive", ferrytype.ErrInvalidConfig, prefix, limit)
	}
	rows, err := o.pool.Query(ctx, o.d.Rebind(fmt.Sprintf(o.claimsOf, len(prefix)+1)), prefix+".", limit)
	if err != nil {
		return nil, fmt.Errorf("claims of %s: %w", prefix, err)
	}
	return scanClaimed(rows, "claims of "+prefix)
}

// scanClaimed reads (event_id, lease_token, attempts, route) rows and
// closes them.
func scanClaimed(rows ferrystore.Rows, what string) ([]ferrystore.Claimed, error) {
	defer rows.Close()
	var out []ferrystore.Claimed
	for rows.Next() {
		var c ferrystore.Claimed
		if err := rows.Scan(&c.ID, &c.Token, &c.Attempts, &c.Destination); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// PurgeSent deletes up to limit SENT rows older than olderThan.
func (o *Outbox) PurgeSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	a := ago(o.d, olderThan)
	n, err := o.pool.Exec(ctx, o.purge, a, a, limit)
	if err != nil {
		return 0, fmt.Errorf("purge sent: %w", err)
	}
	return n, nil
}

// Stats counts pending, sending and dead rows, exactly, from the pending
// index alone, and measures the oldest pending row among the rows next in
// line (ferrystore.PendingWindow), in one statement.
func (o *Outbox) Stats(ctx context.Context) (ferrystore.Stats, error) {
	var st ferrystore.Stats
	rows, err := o.pool.Query(ctx, o.stats)
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	defer rows.Close()
	var oldest, later int64
	if rows.Next() {
		if err := rows.Scan(&st.New, &st.Sending, &st.Dead, &later, &st.OldestPendingID, &oldest); err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
	}
	st.Ready = max(st.New-later, 0)
	st.OldestPending = time.Duration(max(oldest, 0)) * time.Microsecond
	st.Windowed = st.New > ferrystore.PendingWindow || st.Sending > ferrystore.PendingWindow
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// Ready reports whether a NEW row is available now, reading at most one
// entry of the pending index.
func (o *Outbox) Ready(ctx context.Context) (bool, error) {
	found, err := o.any(ctx, o.ready)
	if err != nil {
		return false, fmt.Errorf("ready: %w", err)
	}
	return found, nil
}

// Pending reports whether any row is NEW or SENDING, reading at most one
// entry of the pending index.
func (o *Outbox) Pending(ctx context.Context) (bool, error) {
	found, err := o.any(ctx, o.pending)
	if err != nil {
		return false, fmt.Errorf("pending: %w", err)
	}
	return found, nil
}

// any reports whether query returns a row.
func (o *Outbox) any(ctx context.Context, query string) (bool, error) {
	rows, err := o.pool.Query(ctx, query)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Err()
}

// Get returns one row by event id.
func (o *Outbox) Get(ctx context.Context, id string) (ferrystore.Row, error) {
	rows, err := o.pool.Query(ctx, o.get, id)
	if err != nil {
		return ferrystore.Row{}, fmt.Errorf("get event %s: %w", id, err)
	}
	return ScanRow(rows, id)
}

// InsertRows is o's INSERT of rows, with ? placeholders (not yet
// rebound), and its arguments; seq[i] is the SQL expression of row i's
// aggregate sequence number.
func InsertRows(o *Outbox, rows []ferrytype.Event, seq []string) (string, []any, error) {
	var b strings.Builder
	b.WriteString("INSERT INTO " + o.t + " (event_id, aggregate_type, aggregate_id, aggregate_seq, event_type," +
		" payload, headers, destination, exchange, available_at) VALUES ")
	args := make([]any, 0, len(rows)*9)
	js := o.d.JSON()
	for i := range rows {
		ev := &rows[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?, ?, ?, " + seq[i] + ", ?, " + js + ", " + js + ", ?, ?, " + o.d.Shift() + ")")
		h, err := EncodeHeaders(ev.Headers)
		if err != nil {
			return "", nil, fmt.Errorf("enqueue: %w", err)
		}
		var headers any
		if h != nil {
			headers = string(h)
		}
		args = append(args, ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, string(ev.Payload), headers,
			ev.Destination, ev.Exchange, later(o.d, ev.Delay))
	}
	return b.String(), args, nil
}

// AggregateGroup is the rows of one aggregate within an enqueue, in order.
type AggregateGroup struct {
	Type, ID string
	Rows     []int // indexes into the enqueued slice
}

// GroupByAggregate groups the events that carry an AggregateID, keeping
// first-seen order of aggregates and enqueue order within each.
func GroupByAggregate(events []ferrytype.Event) []AggregateGroup {
	var groups []AggregateGroup
	idx := map[[2]string]int{}
	for i := range events {
		ev := &events[i]
		if ev.AggregateID == "" {
			continue
		}
		k := [2]string{ev.AggregateType, ev.AggregateID}
		g, ok := idx[k]
		if !ok {
			g = len(groups)
			idx[k] = g
			groups = append(groups, AggregateGroup{Type: ev.AggregateType, ID: ev.AggregateID})
		}
		groups[g].Rows = append(groups[g].Rows, i)
	}
	return groups
}

// Insert runs InsertRows in ex.
func Insert(ctx context.Context, o *Outbox, ex ferrystore.Executor, rows []ferrytype.Event, seq []string) error {
	q, args, err := InsertRows(o, rows, seq)
	if err != nil {
		return err
	}
	if _, err := ex.Exec(ctx, o.d.Rebind(q), args...); err != nil {
		return fmt.Errorf("enqueue: insert into %s: %w", o.name, o.d.Classify(err))
	}
	return nil
}

// Malformed is a claimed row that cannot be turned into a message.
type Malformed struct {
	ID string
	// Reason wraps ferrytype.ErrMalformedRow and names the column.
	Reason error
}

// PayloadCheck says whether ScanClaimed checks each payload's JSON.
type PayloadCheck bool

const (
	// CheckPayloads checks every payload with json.Valid, as EnqueueTx
	// does.
	CheckPayloads PayloadCheck = true
	// PayloadsTypedJSON trusts the column's type.
	PayloadsTypedJSON PayloadCheck = false
)

// ScanClaimed reads claimed rows (messageColumns) and closes them.
// A row that DecodeMessage finds malformed is returned among bad,
// never among msgs: one bad row never fails the claim.
//
// payloads says whether each payload's JSON is checked: CheckPayloads
// unless the column's type makes the database check every value written
// (PostgreSQL's json and jsonb: no statement stores a value their input
// function refuses). A CHECK constraint is not enough: MariaDB and SQLite
// let a session turn constraints off.
func ScanClaimed(rows ferrystore.Rows, payloads PayloadCheck) (msgs []ferrytype.Message, bad []Malformed, err error) {
	defer rows.Close()
	vals := make([]any, numMessageColumns)
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rows.Next() {
		clear(vals)
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("scan: %w", err)
		}
		m, err := decodeMessage(vals, payloads == CheckPayloads)
		if err != nil {
			bad = append(bad, Malformed{ID: m.ID, Reason: err})
			continue
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return msgs, bad, nil
}

// Bury records malformed rows claimed under the token claim as DEAD
// (ferrytype.TransitionMalformed), each with its reason as last_error, in
// ex: the claim's transaction, or the pool right after a claim statement.
func (o *Outbox) Bury(ctx context.Context, ex ferrystore.Executor, claim string, bad []Malformed) error {
	for _, b := range bad {
		msg := token.Truncate(b.Reason.Error(), 2000)
		if _, err := ex.Exec(ctx, o.markFailed, string(ferrytype.TransitionMalformed.To), later(o.d, 0),
			msg, errclass.Of(msg), claim, b.ID); err != nil {
			return fmt.Errorf("record malformed row %s dead: %w", b.ID, err)
		}
	}
	return nil
}

// Report tells p.Malformed about the rows Claim recorded DEAD.
func Report(p ferrystore.ClaimParams, bad []Malformed) {
	if p.Malformed == nil {
		return
	}
	for _, b := range bad {
		p.Malformed(b.ID, b.Reason)
	}
}

// HeldBack is the condition, on an outbox row p, that holds back the
// ordered claim of the row e: p is the event just before e in e's
// aggregate and is neither SENT nor DISCARDED. Ordered relays send an
// aggregate's events one at a time in sequence order, so the event just
// before e is SENT only once every earlier one is, and checking it alone
// costs one index entry per candidate however long the aggregate's
// history of retained SENT rows. A missing predecessor (purged, or never
// numbered: sequence 0) holds nothing back.
const HeldBack = "p.aggregate_type = e.aggregate_type AND p.aggregate_id = e.aggregate_id" +
	" AND p.aggregate_seq = e.aggregate_seq - 1 AND p.aggregate_seq > 0 AND p.status NOT IN ('SENT', 'DISCARDED')"
