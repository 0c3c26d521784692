package ferrypg

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlutil"
)

var (
	_ ferrystore.Admin = (*Store)(nil)
	_ ferrystore.Admin = (*StdlibStore)(nil)
)

// Ping checks that the database answers, with one round trip.
func (s *core) Ping(ctx context.Context) error {
	rows, err := s.c.Query(ctx, "SELECT 1")
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

// CountByStatus counts rows per status; it reads the pending index only.
func (s *core) CountByStatus(ctx context.Context, statuses ...ferrytype.Status) (map[ferrytype.Status]int64, error) {
	out := map[ferrytype.Status]int64{}
	if len(statuses) == 0 {
		return out, nil
	}
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
		out[st] = 0
	}
	rows, err := s.c.Query(ctx, "SELECT status, count(*) FROM "+s.q.t+" WHERE status = ANY($1::text[]) GROUP BY status", names)
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
// reads every pending row: its cost grows with the backlog, like Stats'.
func (s *core) PendingByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationStats, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: pending by destination: limit %d must be within 1..%d",
			ferrytype.ErrInvalidConfig, limit, ferrystore.MaxListLimit)
	}
	rows, err := s.c.Query(ctx, "SELECT CASE WHEN destination = '' THEN event_type ELSE destination END AS route,"+
		" count(*) FILTER (WHERE status = 'NEW'), count(*) FILTER (WHERE status = 'SENDING'),"+
		" (EXTRACT(EPOCH FROM now() - min(created_at)) * 1000000)::bigint FROM "+s.q.t+
		" WHERE status IN ('NEW', 'SENDING') GROUP BY route ORDER BY min(created_at), route LIMIT $1", limit)
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
func (s *core) Attempts(ctx context.Context) ([]ferrystore.AttemptCount, error) {
	rows, err := s.c.Query(ctx, "SELECT status, attempts, count(*) FROM "+s.q.t+
		" WHERE status IN ('NEW', 'SENDING', 'DEAD') GROUP BY status, attempts ORDER BY status, attempts LIMIT $1",
		ferrystore.MaxListLimit)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return sqlutil.ScanAttempts(rows)
}

// List returns rows matching f, oldest first.
func (s *core) List(ctx context.Context, f ferrystore.Filter) ([]ferrystore.Row, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	statuses := make([]string, len(f.Statuses))
	for i, st := range f.Statuses {
		statuses[i] = string(st)
	}
	where = append(where, "status = ANY("+arg(statuses)+"::text[])")
	if len(f.IDs) > 0 {
		where = append(where, "event_id = ANY("+arg(f.IDs)+"::text[])")
	}
	for _, c := range []struct{ col, v string }{
		{"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID}, {"event_type", f.Type},
	} {
		if c.v != "" {
			where = append(where, c.col+" = "+arg(c.v))
		}
	}
	if f.Destination != "" {
		p := arg(f.Destination)
		where = append(where, "(destination = "+p+" OR (destination = '' AND event_type = "+p+"))")
	}
	if f.Failed {
		where = append(where, "last_error IS NOT NULL AND last_error <> ''")
	}
	if f.MinAge > 0 {
		where = append(where, "created_at <= now() - "+arg(sqlutil.Micros(f.MinAge))+"::bigint * interval '1 microsecond'")
	}
	if f.MaxAge > 0 {
		where = append(where, "created_at >= now() - "+arg(sqlutil.Micros(f.MaxAge))+"::bigint * interval '1 microsecond'")
	}
	rows, err := s.c.Query(ctx, "SELECT "+pgRowColumns+" FROM "+s.q.t+" WHERE "+strings.Join(where, " AND ")+
		" ORDER BY created_at, event_id LIMIT "+arg(f.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return sqlutil.ScanRows(rows)
}

// Retry moves the DEAD rows among ids back to NEW with attempts 0.
func (s *core) Retry(ctx context.Context, ids []string) (int64, error) {
	if err := ferrystore.ValidateIDs(ids); err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := s.c.Exec(ctx, "UPDATE "+s.q.t+" SET status = 'NEW', attempts = 0, available_at = now(),"+
		" lease_token = NULL, locked_until = NULL WHERE status = 'DEAD' AND event_id = ANY($1::text[])", ids)
	if err != nil {
		return 0, fmt.Errorf("retry dead events: %w", err)
	}
	return n, nil
}

// Discard moves the DEAD rows among ids to DISCARDED.
func (s *core) Discard(ctx context.Context, ids []string, reason string) (int64, error) {
	if err := ferrystore.ValidateIDs(ids); err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := s.c.Exec(ctx, "UPDATE "+s.q.t+" SET status = 'DISCARDED', discarded_at = now(), discard_reason = $2"+
		" WHERE status = 'DEAD' AND event_id = ANY($1::text[])", ids, sqlutil.Truncate(reason, 2000))
	if err != nil {
		return 0, fmt.Errorf("discard dead events: %w", err)
	}
	return n, nil
}

// PurgeDiscarded deletes up to limit DISCARDED rows older than olderThan.
func (s *core) PurgeDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := s.c.Exec(ctx, "DELETE FROM "+s.q.t+" WHERE event_id IN (SELECT event_id FROM "+s.q.t+
		" WHERE status = 'DISCARDED' AND discarded_at < now() - $1::bigint * interval '1 microsecond'"+
		" ORDER BY available_at, event_id LIMIT $2 FOR UPDATE SKIP LOCKED)", sqlutil.Micros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("purge discarded: %w", err)
	}
	return n, nil
}

// MissingEvents finds business rows without their event. The NOT EXISTS
// probe uses the aggregate index (aggregate_type, aggregate_id).
func (s *core) MissingEvents(ctx context.Context, q ferrystore.MissingEventsQuery) ([]ferrystore.MissingEvent, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	key := "b." + quote(q.KeyColumn) + "::text"
	tm := "b." + quote(q.TimeColumn)
	rows, err := s.c.Query(ctx, "SELECT "+key+", "+tm+" FROM "+quote(q.Table)+" b"+
		" WHERE "+tm+" >= now() - $1::bigint * interval '1 microsecond'"+
		" AND "+tm+" < now() - $2::bigint * interval '1 microsecond'"+
		" AND NOT EXISTS (SELECT 1 FROM "+s.q.t+" o WHERE o.aggregate_type = $3 AND o.aggregate_id = "+key+
		" AND o.event_type = $4) ORDER BY "+tm+" LIMIT $5",
		sqlutil.Micros(q.Window), sqlutil.Micros(q.Grace), q.AggregateType, q.EventType, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("missing events in %s: %w", q.Table, err)
	}
	return sqlutil.ScanMissing(rows)
}

// SentEvents returns a page of SENT events for reconciliation. It walks
// the pending index (status, available_at, event_id) from the cursor;
// event type and sent_at are checked on each row it reaches.
func (s *core) SentEvents(ctx context.Context, q ferrystore.SentEventsQuery) ([]ferrystore.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	args := []any{sqlutil.Micros(q.Window), sqlutil.Micros(q.OlderThan), q.EventType}
	where := "status = 'SENT' AND available_at >= now() - $1::bigint * interval '1 microsecond'" +
		" AND available_at < now() - $2::bigint * interval '1 microsecond'" +
		" AND sent_at < now() - $2::bigint * interval '1 microsecond' AND event_type = $3"
	if q.AggregateType != "" {
		args = append(args, q.AggregateType)
		where += fmt.Sprintf(" AND aggregate_type = $%d", len(args))
	}
	if q.After.ID != "" {
		args = append(args, q.After.AvailableAt, q.After.ID)
		where += fmt.Sprintf(" AND (available_at, event_id) > ($%d::timestamptz, $%d::text)", len(args)-1, len(args))
	}
	args = append(args, q.Limit)
	rows, err := s.c.Query(ctx, "SELECT "+pgRowColumns+" FROM "+s.q.t+" WHERE "+where+
		fmt.Sprintf(" ORDER BY available_at, event_id LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("sent events: %w", err)
	}
	return sqlutil.ScanRows(rows)
}
