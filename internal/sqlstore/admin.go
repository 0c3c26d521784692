package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
	"github.com/ferrydev/ferry/internal/token"
)

// Ping checks that the database answers, with one round trip.
func (o *Outbox) Ping(ctx context.Context) error {
	rows, err := o.pool.Query(ctx, o.d.Ping())
	if err == nil {
		for rows.Next() {
		}
		err = rows.Close()
	}
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// Now reads the database clock, as the rows' times are written.
func (o *Outbox) Now(ctx context.Context) (time.Time, error) {
	var at nullTime
	if err := o.queryOne(ctx, "read the database clock", "SELECT "+o.d.Now(), nil, &at); err != nil {
		return time.Time{}, err
	}
	if !at.Valid {
		return time.Time{}, fmt.Errorf("read the database clock: NULL")
	}
	return at.Time, nil
}

// AfterBulk runs the dialect's Tidy statement on the outbox table when a
// bulk change changed at least ferrystore.BulkTidyRows rows.
func (o *Outbox) AfterBulk(ctx context.Context, changed int64) error {
	q := o.d.Tidy(o.t)
	if q == "" || changed < ferrystore.BulkTidyRows {
		return nil
	}
	if _, err := o.pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("tidy after a bulk change of %d rows: %w", changed, err)
	}
	return nil
}

// CountByStatus counts rows per status, exactly: it reads the entries of
// those statuses in the pending index (status, available_at, event_id)
// and no row, so a count costs its number of entries.
func (o *Outbox) CountByStatus(ctx context.Context, statuses ...ferrytype.Status) (map[ferrytype.Status]int64, error) {
	out := map[ferrytype.Status]int64{}
	if len(statuses) == 0 {
		return out, nil
	}
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
		out[st] = 0
	}
	cond, args := o.d.In("status", names)
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT status, COUNT(*) FROM "+o.t+" WHERE "+cond+" GROUP BY status"), args...)
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	counts, err := scanCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	for st, n := range counts {
		out[ferrytype.Status(st)] = n
	}
	return out, nil
}

// pendingSince is when a row became pending: its creation, or a person's
// retry out of DEAD.
const pendingSince = "COALESCE(revived_at, created_at)"

// nextInLine is a derived table of the pending rows next in line, each
// with cols: the first ferrystore.PendingWindow NEW rows and the first
// ferrystore.PendingWindow SENDING rows in the order of the pending index
// (status, available_at, event_id), in which relays claim them. Each half
// walks its status's entries of the index from the start, in the index's
// order (no sort), reads the row of each, and stops at the window: at most
// 2 × PendingWindow rows are read, whatever the backlog. The window is a
// literal, so that every planner plans for it.
func nextInLine(table, cols string) string {
	half := func(st ferrytype.Status, alias string) string {
		return "SELECT * FROM (SELECT " + cols + " FROM " + table + " WHERE status = " + lit(st) +
			" ORDER BY available_at, event_id LIMIT " + strconv.Itoa(ferrystore.PendingWindow) + ") " + alias
	}
	return "(" + half(ferrytype.StatusNew, "next_new") + " UNION ALL " + half(ferrytype.StatusSending, "next_sending") + ")"
}

// PendingByDestination groups the NEW and SENDING rows next in line
// (nextInLine) by destination, each with how long its row pending for the
// longest has been: at most 2 × ferrystore.PendingWindow rows read, then
// grouped and sorted.
func (o *Outbox) PendingByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationStats, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: pending by destination: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT pending_route, "+
		o.d.CountIf("status = 'NEW'")+", "+o.d.CountIf("status = 'SENDING'")+", "+o.d.AgeMicros("MIN("+pendingSince+")")+
		" FROM "+nextInLine(o.t, "status, CASE WHEN destination = '' THEN event_type ELSE destination END AS pending_route,"+
		" created_at, revived_at")+" next_in_line GROUP BY pending_route ORDER BY MIN("+pendingSince+"), pending_route LIMIT ?"), limit)
	if err != nil {
		return nil, fmt.Errorf("pending by destination: %w", err)
	}
	defer rows.Close()
	var out []ferrystore.DestinationStats
	for rows.Next() {
		var (
			d      ferrystore.DestinationStats
			oldest int64
		)
		if err := rows.Scan(&d.Destination, &d.New, &d.Sending, &oldest); err != nil {
			return nil, fmt.Errorf("pending by destination: %w", err)
		}
		d.OldestPending = time.Duration(max(oldest, 0)) * time.Microsecond
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeadByDestination counts the DEAD rows by destination: one statement
// over the DEAD index, which holds the destination, exact at any number of
// events.
func (o *Outbox) DeadByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationCount, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: DEAD by destination: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+o.d.Route()+" AS dead_route, COUNT(*) FROM "+o.t+
		" WHERE "+o.d.Settled()+" = "+lit(ferrytype.StatusDead)+settledTerm(o.d)+" GROUP BY dead_route ORDER BY COUNT(*) DESC, dead_route LIMIT ?"), limit)
	if err != nil {
		return nil, fmt.Errorf("DEAD by destination: %w", err)
	}
	defer rows.Close()
	var out []ferrystore.DestinationCount
	for rows.Next() {
		var d ferrystore.DestinationCount
		if err := rows.Scan(&d.Destination, &d.Count); err != nil {
			return nil, fmt.Errorf("DEAD by destination: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// GroupErrors counts the rows of f by destination, type and recorded
// error class: for settled rows, over the DEAD index alone.
func (o *Outbox) GroupErrors(ctx context.Context, f ferrystore.Filter) ([]ferrystore.ErrorGroup, error) {
	if err := f.ValidateSelection(); err != nil {
		return nil, err
	}
	where, args := o.where(f)
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+o.d.Route()+" AS dead_route, event_type, COALESCE(error_class, ''), COUNT(*),"+
		" MIN(created_at), MAX(created_at) FROM "+o.t+" WHERE "+where+
		" GROUP BY dead_route, error_class, event_type ORDER BY COUNT(*) DESC, dead_route, error_class, event_type LIMIT ?"),
		append(args, ferrystore.MaxErrorGroups)...)
	if err != nil {
		return nil, fmt.Errorf("group errors: %w", err)
	}
	defer rows.Close()
	var out []ferrystore.ErrorGroup
	for rows.Next() {
		var (
			g              ferrystore.ErrorGroup
			oldest, newest nullTime
		)
		if err := rows.Scan(&g.Destination, &g.Type, &g.ErrorClass, &g.Count, &oldest, &newest); err != nil {
			return nil, fmt.Errorf("group errors: %w", err)
		}
		g.Oldest, g.Newest = oldest.Time, newest.Time
		out = append(out, g)
	}
	return out, rows.Err()
}

// Attempts counts the NEW and SENDING rows next in line (nextInLine) by
// status and attempts: at most 2 × ferrystore.PendingWindow rows read.
func (o *Outbox) Attempts(ctx context.Context) ([]ferrystore.AttemptCount, error) {
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT status, attempts, COUNT(*) FROM "+nextInLine(o.t, "status, attempts")+
		" next_in_line GROUP BY status, attempts ORDER BY status, attempts LIMIT ?"),
		ferrystore.MaxListLimit)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return scanAttempts(rows)
}

// PendingFailures returns up to limit (1 to ferrystore.MaxListLimit) of
// the NEW and SENDING rows next in line (nextInLine) that recorded an
// error, the oldest first (created_at, then event id), without their
// payload and headers (as List with Filter.NoPayload): at most
// 2 × ferrystore.PendingWindow rows read.
func (o *Outbox) PendingFailures(ctx context.Context, limit int) ([]ferrystore.Row, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: pending failures: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	cols := strings.NewReplacer("payload,", "'{}' AS payload,", "headers,", "NULL AS headers,").Replace(rowColumns)
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+rowColumns+" FROM "+nextInLine(o.t, cols)+
		" next_in_line WHERE last_error IS NOT NULL AND last_error <> '' ORDER BY "+o.d.Moment("created_at")+", event_id LIMIT ?"),
		limit)
	if err != nil {
		return nil, fmt.Errorf("pending failures: %w", err)
	}
	out, err := ScanRows(rows)
	if err != nil {
		return nil, fmt.Errorf("pending failures: %w", err)
	}
	return out, nil
}

// deadHint is the dialect's DeadIndex when f is a range of the DEAD index
// by its equality prefix (settled statuses, destination, a recorded class
// or none, and, for a listing in its order, the type), found by no key:
// MariaDB's optimizer otherwise walks the settled index by created_at and
// reads every DEAD row from the cursor on to filter them, which at a
// million DEAD events read each page of the table many times over a bulk
// run.
func (o *Outbox) deadHint(f ferrystore.Filter, ordered bool) string {
	for _, st := range f.Statuses {
		if st != ferrytype.StatusDead && st != ferrytype.StatusDiscarded {
			return ""
		}
	}
	if f.Destination == "" || f.ErrorClass == "" && !f.Unclassified || ordered && f.Type == "" ||
		len(f.IDs) > 0 || f.AggregateID != "" {
		return ""
	}
	return o.d.DeadIndex()
}

// settledTerm is " AND " and the dialect's SettledTerm, or "".
func settledTerm(d Dialect) string {
	if t := d.SettledTerm(); t != "" {
		return " AND " + t
	}
	return ""
}

// where builds the WHERE clause of f (validated) and its arguments. The
// statuses come first, as literals (a partial index is chosen only for a
// status known when the statement is planned): DEAD and DISCARDED ones
// through the dialect's Settled column, so that the statement reads the
// indexes of those rows (the settled index by created_at, the DEAD index by
// destination and class); others through the pending index. Every other
// condition, the cursor included, narrows what that index gives.
func (o *Outbox) where(f ferrystore.Filter) (string, []any) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	settled, statuses := true, make([]string, len(f.Statuses))
	for i, st := range f.Statuses {
		statuses[i] = lit(st)
		settled = settled && (st == ferrytype.StatusDead || st == ferrytype.StatusDiscarded)
	}
	col := "status"
	if settled {
		col = o.d.Settled()
	}
	add(col + " IN (" + strings.Join(statuses, ", ") + ")")
	if settled && o.d.SettledTerm() != "" {
		add(o.d.SettledTerm())
	}
	if len(f.IDs) > 0 {
		cond, a := o.d.In("event_id", f.IDs)
		add(cond, a...)
	}
	if f.Destination != "" {
		add(o.d.Route()+" = ?", f.Destination)
	}
	switch {
	case f.ErrorClass != "":
		add("error_class = ?", f.ErrorClass)
	case f.Unclassified:
		// With a destination and a type, a range of the DEAD index: the
		// entries without a class (error_class IS NULL) of that destination
		// and type, whose rows are then read for their error.
		add("error_class IS NULL AND last_error IS NOT NULL AND last_error <> ''")
	}
	for _, c := range []struct{ col, v string }{
		{"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID}, {"event_type", f.Type},
	} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if f.Failed {
		add("last_error IS NOT NULL AND last_error <> ''")
	}
	for _, s := range f.ErrorContains {
		if s != "" {
			add(o.d.ContainsFold("last_error"), "%"+likeEscape(s)+"%")
		}
	}
	if f.MinAge > 0 {
		add("created_at <= "+o.d.Shift(), ago(o.d, f.MinAge))
	}
	if f.MaxAge > 0 {
		add("created_at >= "+o.d.Shift(), ago(o.d, f.MaxAge))
	}
	if !f.DiedBy.IsZero() {
		cond, a := o.d.NotAfter("available_at", f.DiedBy)
		add(cond, a...)
	}
	if f.After != (ferrystore.ListCursor{}) {
		cond, a := o.d.After("created_at", f.After.CreatedAt, f.After.ID)
		add(cond, a...)
	}
	return strings.Join(where, " AND "), args
}

// likeEscape makes s match itself in a LIKE pattern whose escape
// character is '!'.
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// List returns rows matching f, oldest first: (created_at, event_id),
// through Moment so that SQLite orders times whatever their text format.
// For DEAD or DISCARDED rows an index holds that order (the settled index,
// or the DEAD index for a destination and an error class): a page reads
// its rows from the cursor on, and the rows the other conditions skip.
// Pending rows are read and sorted.
func (o *Outbox) List(ctx context.Context, f ferrystore.Filter) ([]ferrystore.Row, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	where, args := o.where(f)
	cols := o.cols
	switch {
	case f.KeysOnly:
		cols = "event_id, created_at"
	case f.NoPayload:
		cols = o.stateCols
	}
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+cols+" FROM "+o.t+o.deadHint(f, true)+" WHERE "+where+
		" ORDER BY "+o.d.Moment("created_at")+", event_id LIMIT ?"), append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if f.KeysOnly {
		return scanKeys(rows)
	}
	return ScanRows(rows)
}

// scanKeys reads rows of event_id and created_at.
func scanKeys(rows ferrystore.Rows) ([]ferrystore.Row, error) {
	defer rows.Close()
	var out []ferrystore.Row
	for rows.Next() {
		var (
			r  ferrystore.Row
			at nullTime
		)
		if err := rows.Scan(&r.ID, &at); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		r.CreatedAt = at.Time
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// Count counts the rows matching f through the pending index.
func (o *Outbox) Count(ctx context.Context, f ferrystore.Filter) (int64, error) {
	if err := f.ValidateSelection(); err != nil {
		return 0, err
	}
	where, args := o.where(f)
	var n int64
	if err := o.queryOne(ctx, "count events", o.d.Rebind("SELECT COUNT(*) FROM "+o.t+o.deadHint(f, false)+" WHERE "+where), args, &n); err != nil {
		return 0, err
	}
	return n, nil
}

// queryOne reads the one row of q into dest.
func (o *Outbox) queryOne(ctx context.Context, what, q string, args []any, dest ...any) error {
	rows, err := o.pool.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: no row", what)
	}
	if err := rows.Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return rows.Close()
}

// Retry makes the DEAD rows among ids NEW again with attempts 0
// (ferrytype.TransitionRevive), pending from now on (revived_at).
func (o *Outbox) Retry(ctx context.Context, ids []string) (int64, error) {
	t, now := ferrytype.TransitionRevive, o.d.Now()
	return o.byID(ctx, "retry dead events", o.d.Update()+o.t+" SET status = "+lit(t.To)+", attempts = 0, available_at = "+
		now+", revived_at = "+now+", lease_token = NULL, locked_until = NULL WHERE status = "+lit(t.From)+" AND ", ids)
}

// Discard moves the DEAD rows among ids to DISCARDED
// (ferrytype.TransitionDiscard). A row restored before keeps its earlier
// record: the reason is appended to it.
func (o *Outbox) Discard(ctx context.Context, ids []string, reason string) (int64, error) {
	t := ferrytype.TransitionDiscard
	reason = token.Truncate(reason, 2000)
	return o.byID(ctx, "discard dead events", o.d.Update()+o.t+" SET status = "+lit(t.To)+", discarded_at = "+o.d.Now()+
		", discard_reason = CASE WHEN discard_reason IS NULL OR discard_reason = '' THEN ? ELSE "+
		o.d.Concat("discard_reason", "'; '", "?")+" END WHERE status = "+lit(t.From)+" AND ", ids, reason, reason)
}

// Restore moves the DISCARDED rows among ids back to DEAD
// (ferrytype.TransitionRestore), appending note to their discard reason.
// A restored row is DEAD from now (available_at: Filter.DiedBy).
func (o *Outbox) Restore(ctx context.Context, ids []string, note string) (int64, error) {
	t := ferrytype.TransitionRestore
	return o.byID(ctx, "restore discarded events", o.d.Update()+o.t+" SET status = "+lit(t.To)+", discarded_at = NULL"+
		", available_at = "+o.d.Now()+
		", discard_reason = CASE WHEN discard_reason IS NULL OR discard_reason = '' THEN ? ELSE "+
		o.d.Concat("discard_reason", "'; '", "?")+" END WHERE status = "+lit(t.From)+" AND ", ids,
		token.Truncate(note, 2000), token.Truncate(note, 2000))
}

// SetErrorClass records class on the rows among ids without one.
func (o *Outbox) SetErrorClass(ctx context.Context, class string, ids []string) (int64, error) {
	if class == "" || len(class) > errclass.MaxLen {
		return 0, fmt.Errorf("%w: error class of %d bytes, 1 to %d are allowed", ferrytype.ErrInvalidConfig, len(class), errclass.MaxLen)
	}
	return o.byID(ctx, "set error class", o.d.Update()+o.t+" SET error_class = ? WHERE error_class IS NULL AND ", ids, class)
}

// byID runs update (ending in "AND ") on the rows among ids, by the
// primary key.
func (o *Outbox) byID(ctx context.Context, what, update string, ids []string, lead ...any) (int64, error) {
	if err := ferrystore.ValidateIDs(ids); err != nil || len(ids) == 0 {
		return 0, err
	}
	q, args := o.in(update, "event_id", ids, lead...)
	n, err := o.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// PurgeDiscarded deletes up to limit DISCARDED rows discarded more than
// olderThan ago (ferrytype.TransitionPurgeDiscarded), through the pending
// index.
func (o *Outbox) PurgeDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := o.pool.Exec(ctx, o.d.Rebind(o.d.DeleteLimited(o.t, o.purgeDiscardedWhere, "available_at, event_id")),
		ago(o.d, olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge discarded: %w", err)
	}
	return n, nil
}

// Purgeable counts what PurgeSent and PurgeDiscarded would delete, with
// their conditions, through the pending index.
func (o *Outbox) Purgeable(ctx context.Context, olderThan time.Duration) (sent, discarded int64, err error) {
	at := ago(o.d, olderThan)
	err = o.queryOne(ctx, "count purgeable events", o.d.Rebind("SELECT (SELECT COUNT(*) FROM "+o.t+" WHERE "+o.purgeSentWhere+
		"), (SELECT COUNT(*) FROM "+o.t+" WHERE "+o.purgeDiscardedWhere+")"), []any{at, at, at}, &sent, &discarded)
	return sent, discarded, err
}

// MissingEvents finds business rows without their event. The NOT EXISTS
// probe uses the aggregate index (aggregate_type, aggregate_id); the key
// is converted to text (KeyText) so that the comparison can use it.
func (o *Outbox) MissingEvents(ctx context.Context, q ferrystore.MissingEventsQuery) ([]ferrystore.MissingEvent, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	key := o.d.KeyText("b." + o.d.Quote(q.KeyColumn))
	tm := "b." + o.d.Quote(q.TimeColumn)
	at, bound := o.d.Moment(tm), o.d.Moment(o.d.Shift())
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+key+", "+tm+" FROM "+o.d.Quote(q.Table)+" b"+
		" WHERE "+at+" >= "+bound+" AND "+at+" < "+bound+
		" AND NOT EXISTS (SELECT 1 FROM "+o.t+" o WHERE o.aggregate_type = ? AND o.aggregate_id = "+key+
		" AND o.event_type = ?) ORDER BY "+at+" LIMIT ?"),
		ago(o.d, q.Window), ago(o.d, q.Grace), q.AggregateType, q.EventType, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("missing events in %s: %w", q.Table, err)
	}
	return scanMissing(rows)
}

// SentEvents returns a page of SENT events for reconciliation. It walks
// the pending index (status, available_at, event_id) from the cursor;
// event type and sent_at are checked on each row it reaches.
func (o *Outbox) SentEvents(ctx context.Context, q ferrystore.SentEventsQuery) ([]ferrystore.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	shift, older := o.d.Shift(), ago(o.d, q.OlderThan)
	where := "status = 'SENT' AND available_at >= " + shift + " AND available_at < " + shift +
		" AND sent_at < " + shift + " AND event_type = ?"
	args := []any{ago(o.d, q.Window), older, older, q.EventType}
	if q.AggregateType != "" {
		where += " AND aggregate_type = ?"
		args = append(args, q.AggregateType)
	}
	if q.After.ID != "" {
		cond, a := o.d.After("available_at", q.After.AvailableAt, q.After.ID)
		where += " AND " + cond
		args = append(args, a...)
	}
	rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT "+o.cols+" FROM "+o.t+" WHERE "+where+
		" ORDER BY available_at, event_id LIMIT ?"), append(args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("sent events: %w", err)
	}
	return ScanRows(rows)
}

// scanAttempts reads (status, attempts, count) rows and closes them.
func scanAttempts(rows ferrystore.Rows) ([]ferrystore.AttemptCount, error) {
	defer rows.Close()
	var out []ferrystore.AttemptCount
	for rows.Next() {
		var (
			a  ferrystore.AttemptCount
			st string
		)
		if err := rows.Scan(&st, &a.Attempts, &a.Events); err != nil {
			return nil, fmt.Errorf("attempts: %w", err)
		}
		a.Status = ferrytype.Status(st)
		out = append(out, a)
	}
	return out, rows.Err()
}

// scanMissing reads (key, time) rows and closes them.
func scanMissing(rows ferrystore.Rows) ([]ferrystore.MissingEvent, error) {
	defer rows.Close()
	var out []ferrystore.MissingEvent
	for rows.Next() {
		var (
			m  ferrystore.MissingEvent
			tm nullTime
		)
		if err := rows.Scan(&m.Key, &tm); err != nil {
			return nil, fmt.Errorf("missing events: %w", err)
		}
		m.Time = tm.Time
		out = append(out, m)
	}
	return out, rows.Err()
}
