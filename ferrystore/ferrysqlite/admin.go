package ferrysqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlutil"
)

var _ ferrystore.Admin = (*Store)(nil)

// ageMicros is the age of a stored time on the database clock, in
// microseconds.
func ageMicros(col string) string {
	return "CAST((julianday('now') - julianday(" + col + ")) * 86400000000 AS INTEGER)"
}

// Ping checks that the database file can be read.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// CountByStatus counts rows per status; it reads the pending index only.
func (s *Store) CountByStatus(ctx context.Context, statuses ...ferrytype.Status) (map[ferrytype.Status]int64, error) {
	out := map[ferrytype.Status]int64{}
	if len(statuses) == 0 {
		return out, nil
	}
	args := make([]any, len(statuses))
	for i, st := range statuses {
		args[i] = string(st)
		out[st] = 0
	}
	rows, err := s.db.QueryContext(ctx, "SELECT status, count(*) FROM "+s.q.t+
		" WHERE status IN ("+sqlutil.Placeholders(len(args), false, 0)+") GROUP BY status", args...)
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			st string
			n  int64
		)
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count by status: %w", err)
		}
		out[ferrytype.Status(st)] = n
	}
	return out, rows.Err()
}

// PendingByDestination groups NEW and SENDING rows by destination.
func (s *Store) PendingByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationStats, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: pending by destination: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT CASE WHEN destination = '' THEN event_type ELSE destination END AS route,"+
		" COALESCE(SUM(status = 'NEW'), 0), COALESCE(SUM(status = 'SENDING'), 0), "+ageMicros("MIN(created_at)")+
		" FROM "+s.q.t+" WHERE status IN ('NEW', 'SENDING') GROUP BY route ORDER BY MIN(created_at), route LIMIT ?", limit)
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

// Attempts counts NEW, SENDING and DEAD rows by status and attempts.
func (s *Store) Attempts(ctx context.Context) ([]ferrystore.AttemptCount, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, attempts, count(*) FROM "+s.q.t+
		" WHERE status IN ('NEW', 'SENDING', 'DEAD') GROUP BY status, attempts ORDER BY status, attempts LIMIT ?",
		ferrystore.MaxListLimit)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return sqlutil.ScanAttempts(rows)
}

// List returns rows matching f, oldest first. Times are stored as UTC text
// that sorts as it compares, so the age bounds are plain comparisons.
func (s *Store) List(ctx context.Context, f ferrystore.Filter) ([]ferrystore.Row, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	in := func(col string, vals []string) {
		where = append(where, col+" IN ("+sqlutil.Placeholders(len(vals), false, 0)+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	eq := func(col, v string) {
		if v != "" {
			where = append(where, col+" = ?")
			args = append(args, v)
		}
	}
	statuses := make([]string, len(f.Statuses))
	for i, st := range f.Statuses {
		statuses[i] = string(st)
	}
	in("status", statuses)
	if len(f.IDs) > 0 {
		in("event_id", f.IDs)
	}
	eq("aggregate_type", f.AggregateType)
	eq("aggregate_id", f.AggregateID)
	eq("event_type", f.Type)
	if f.Destination != "" {
		where = append(where, "(destination = ? OR (destination = '' AND event_type = ?))")
		args = append(args, f.Destination, f.Destination)
	}
	if f.Failed {
		where = append(where, "last_error IS NOT NULL AND last_error <> ''")
	}
	if f.MinAge > 0 {
		where = append(where, "created_at <= "+nowPlus)
		args = append(args, modifier(-f.MinAge))
	}
	if f.MaxAge > 0 {
		where = append(where, "created_at >= "+nowPlus)
		args = append(args, modifier(-f.MaxAge))
	}
	args = append(args, f.Limit)
	rows, err := ferrystore.SQL(s.db).Query(ctx, "SELECT "+sqlutil.RowColumns+" FROM "+s.q.t+
		" WHERE "+strings.Join(where, " AND ")+" ORDER BY created_at, event_id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return sqlutil.ScanRows(rows)
}

// Retry moves the DEAD rows among ids back to NEW with attempts 0.
func (s *Store) Retry(ctx context.Context, ids []string) (int64, error) {
	return s.updateDead(ctx, "retry dead events", "status = 'NEW', attempts = 0, available_at = "+now+
		", lease_token = NULL, locked_until = NULL", nil, ids)
}

// Discard moves the DEAD rows among ids to DISCARDED.
func (s *Store) Discard(ctx context.Context, ids []string, reason string) (int64, error) {
	return s.updateDead(ctx, "discard dead events", "status = 'DISCARDED', discarded_at = "+now+", discard_reason = ?",
		[]any{sqlutil.Truncate(reason, 2000)}, ids)
}

func (s *Store) updateDead(ctx context.Context, what, set string, setArgs []any, ids []string) (int64, error) {
	if err := ferrystore.ValidateIDs(ids); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	args := append([]any{}, setArgs...)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := ferrystore.SQL(s.db).Exec(ctx, "UPDATE "+s.q.t+" SET "+set+
		" WHERE status = 'DEAD' AND event_id IN ("+sqlutil.Placeholders(len(ids), false, 0)+")", args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// PurgeDiscarded deletes up to limit DISCARDED rows older than olderThan.
func (s *Store) PurgeDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := ferrystore.SQL(s.db).Exec(ctx, "DELETE FROM "+s.q.t+" WHERE event_id IN (SELECT event_id FROM "+s.q.t+
		" WHERE status = 'DISCARDED' AND discarded_at < "+nowPlus+" ORDER BY available_at, event_id LIMIT ?)",
		modifier(-olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge discarded: %w", err)
	}
	return n, nil
}

// MissingEvents finds business rows without their event. The time column
// must hold times SQLite's date functions read (ISO-8601 text, in UTC);
// julianday() compares them whatever their exact text format, at the price
// of not using an index on that column. The NOT EXISTS probe uses the
// aggregate index (aggregate_type, aggregate_id).
func (s *Store) MissingEvents(ctx context.Context, q ferrystore.MissingEventsQuery) ([]ferrystore.MissingEvent, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	key := "CAST(b." + quote(q.KeyColumn) + " AS TEXT)"
	tm := "b." + quote(q.TimeColumn)
	rows, err := s.db.QueryContext(ctx, "SELECT "+key+", "+tm+" FROM "+quote(q.Table)+" b"+
		" WHERE julianday("+tm+") >= julianday('now', ?) AND julianday("+tm+") < julianday('now', ?)"+
		" AND NOT EXISTS (SELECT 1 FROM "+s.q.t+" o WHERE o.aggregate_type = ? AND o.aggregate_id = "+key+
		" AND o.event_type = ?) ORDER BY julianday("+tm+") LIMIT ?",
		modifier(-q.Window), modifier(-q.Grace), q.AggregateType, q.EventType, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("missing events in %s: %w", q.Table, err)
	}
	return sqlutil.ScanMissing(rows)
}

// SentEvents returns a page of SENT events for reconciliation. It walks
// the pending index (status, available_at, event_id) from the cursor;
// event type and sent_at are checked on each row it reaches.
func (s *Store) SentEvents(ctx context.Context, q ferrystore.SentEventsQuery) ([]ferrystore.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	older := modifier(-q.OlderThan)
	where := "status = 'SENT' AND available_at >= " + nowPlus + " AND available_at < " + nowPlus +
		" AND sent_at < " + nowPlus + " AND event_type = ?"
	args := []any{modifier(-q.Window), older, older, q.EventType}
	if q.AggregateType != "" {
		where += " AND aggregate_type = ?"
		args = append(args, q.AggregateType)
	}
	if q.After.ID != "" {
		// Times are stored as UTC text with milliseconds: compare as such.
		at := q.After.AvailableAt.UTC().Format("2006-01-02 15:04:05.000")
		where += " AND (available_at > ? OR (available_at = ? AND event_id > ?))"
		args = append(args, at, at, q.After.ID)
	}
	args = append(args, q.Limit)
	rows, err := ferrystore.SQL(s.db).Query(ctx, "SELECT "+sqlutil.RowColumns+" FROM "+s.q.t+" WHERE "+where+
		" ORDER BY available_at, event_id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("sent events: %w", err)
	}
	return sqlutil.ScanRows(rows)
}
