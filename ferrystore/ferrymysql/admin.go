package ferrymysql

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

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// CountByStatus counts rows per status; it reads idx_pending only.
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
	rows, err := s.db.QueryContext(ctx, "SELECT status, COUNT(*) FROM "+s.q.t+
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

// PendingByDestination groups NEW and SENDING rows by destination. It
// reads every pending row (idx_pending, then the row for its destination
// and created_at): its cost grows with the backlog, like Stats'.
func (s *Store) PendingByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationStats, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: pending by destination: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT CASE WHEN destination = '' THEN event_type ELSE destination END AS route,"+
		" COALESCE(SUM(status = 'NEW'), 0), COALESCE(SUM(status = 'SENDING'), 0),"+
		" TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) FROM "+s.q.t+
		" WHERE status IN ('NEW', 'SENDING') GROUP BY route ORDER BY MIN(created_at), route LIMIT ?", limit)
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
	rows, err := s.db.QueryContext(ctx, "SELECT status, attempts, COUNT(*) FROM "+s.q.t+
		" WHERE status IN ('NEW', 'SENDING', 'DEAD') GROUP BY status, attempts ORDER BY status, attempts LIMIT ?",
		ferrystore.MaxListLimit)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return sqlutil.ScanAttempts(rows)
}

// List returns rows matching f, oldest first.
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
		where = append(where, "created_at <= NOW(6) - INTERVAL ? MICROSECOND")
		args = append(args, sqlutil.Micros(f.MinAge))
	}
	if f.MaxAge > 0 {
		where = append(where, "created_at >= NOW(6) - INTERVAL ? MICROSECOND")
		args = append(args, sqlutil.Micros(f.MaxAge))
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
	return s.updateDead(ctx, "retry dead events", "status = 'NEW', attempts = 0, available_at = NOW(6),"+
		" lease_token = NULL, locked_until = NULL", nil, ids)
}

// Discard moves the DEAD rows among ids to DISCARDED.
func (s *Store) Discard(ctx context.Context, ids []string, reason string) (int64, error) {
	return s.updateDead(ctx, "discard dead events", "status = 'DISCARDED', discarded_at = NOW(6), discard_reason = ?",
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
	n, err := ferrystore.SQL(s.db).Exec(ctx, "DELETE FROM "+s.q.t+" WHERE status = 'DISCARDED'"+
		" AND discarded_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY available_at, event_id LIMIT ?",
		sqlutil.Micros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge discarded: %w", err)
	}
	return n, nil
}

// MissingEvents finds business rows without their event. The NOT EXISTS
// probe uses idx_aggregate (aggregate_type, aggregate_id); the key is
// converted to utf8mb4 text so that the comparison with aggregate_id can
// use that index.
func (s *Store) MissingEvents(ctx context.Context, q ferrystore.MissingEventsQuery) ([]ferrystore.MissingEvent, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	key := "CONVERT(b." + quote(q.KeyColumn) + " USING utf8mb4) COLLATE utf8mb4_bin"
	tm := "b." + quote(q.TimeColumn)
	rows, err := s.db.QueryContext(ctx, "SELECT "+key+", "+tm+" FROM "+quote(q.Table)+" b"+
		" WHERE "+tm+" >= NOW(6) - INTERVAL ? MICROSECOND AND "+tm+" < NOW(6) - INTERVAL ? MICROSECOND"+
		" AND NOT EXISTS (SELECT 1 FROM "+s.q.t+" o WHERE o.aggregate_type = ? AND o.aggregate_id = "+key+
		" AND o.event_type = ?) ORDER BY "+tm+" LIMIT ?",
		sqlutil.Micros(q.Window), sqlutil.Micros(q.Grace), q.AggregateType, q.EventType, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("missing events in %s: %w", q.Table, err)
	}
	return sqlutil.ScanMissing(rows)
}

// SentEvents returns a page of SENT events for reconciliation. It walks
// idx_pending (status, available_at, event_id) from the cursor; event type
// and sent_at are checked on each row it reaches.
func (s *Store) SentEvents(ctx context.Context, q ferrystore.SentEventsQuery) ([]ferrystore.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	older := sqlutil.Micros(q.OlderThan)
	where := "status = 'SENT' AND available_at >= NOW(6) - INTERVAL ? MICROSECOND AND available_at < NOW(6) - INTERVAL ? MICROSECOND" +
		" AND sent_at < NOW(6) - INTERVAL ? MICROSECOND AND event_type = ?"
	args := []any{sqlutil.Micros(q.Window), older, older, q.EventType}
	if q.AggregateType != "" {
		where += " AND aggregate_type = ?"
		args = append(args, q.AggregateType)
	}
	if q.After.ID != "" {
		where += " AND (available_at > ? OR (available_at = ? AND event_id > ?))"
		args = append(args, q.After.AvailableAt, q.After.AvailableAt, q.After.ID)
	}
	args = append(args, q.Limit)
	rows, err := ferrystore.SQL(s.db).Query(ctx, "SELECT "+sqlutil.RowColumns+" FROM "+s.q.t+" WHERE "+
		where+" ORDER BY available_at, event_id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("sent events: %w", err)
	}
	return sqlutil.ScanRows(rows)
}
