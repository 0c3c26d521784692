package ferrymem

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
	"github.com/ferrydev/ferry/internal/token"
)

// Now reads the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return s.db.now(), nil
}

// Ping answers at once: the database is in this process.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }

// CountByStatus counts the rows in each of statuses.
func (s *Store) CountByStatus(ctx context.Context, statuses ...ferrytype.Status) (map[ferrytype.Status]int64, error) {
	out := map[ferrytype.Status]int64{}
	err := s.db.statement(ctx, func(time.Time) error {
		for _, st := range statuses {
			out[st] = s.t.counts[st]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	return out, nil
}

// listLimit checks the limit of a listing.
func listLimit(what string, limit int) error {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return fmt.Errorf("%w: %s: limit %d must be within 1..%d", ferrytype.ErrInvalidConfig, what, limit, ferrystore.MaxListLimit)
	}
	return nil
}

// nextInLine returns the pending rows next in line, as the SQL stores
// read them: the first ferrystore.PendingWindow NEW rows and the first
// ferrystore.PendingWindow SENDING rows in the pending index's order
// (available_at, event_id).
func (t *outboxTable) nextInLine() []*row {
	var out []*row
	for _, st := range []ferrytype.Status{ferrytype.StatusNew, ferrytype.StatusSending} {
		rows := sorted(t.pending, func(r *row) bool { return r.status == st }, before)
		out = append(out, rows[:min(len(rows), ferrystore.PendingWindow)]...)
	}
	return out
}

// PendingByDestination groups the NEW and SENDING rows next in line
// (nextInLine) by destination (the type when none), the group with the
// oldest pending row first.
func (s *Store) PendingByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationStats, error) {
	if err := listLimit("pending by destination", limit); err != nil {
		return nil, err
	}
	var out []ferrystore.DestinationStats
	err := s.db.statement(ctx, func(now time.Time) error {
		groups := map[string]*ferrystore.DestinationStats{}
		oldest := map[string]time.Time{}
		for _, r := range s.t.nextInLine() {
			g := groups[r.route()]
			if g == nil {
				g = &ferrystore.DestinationStats{Destination: r.route()}
				groups[r.route()] = g
				oldest[r.route()] = r.pendingSince()
			}
			if r.status == ferrytype.StatusNew {
				g.New++
			} else {
				g.Sending++
			}
			if r.pendingSince().Before(oldest[r.route()]) {
				oldest[r.route()] = r.pendingSince()
			}
		}
		for route, g := range groups {
			g.OldestPending = max(now.Sub(oldest[route]), 0)
			out = append(out, *g)
		}
		slices.SortFunc(out, func(a, b ferrystore.DestinationStats) int {
			return cmp.Or(oldest[a.Destination].Compare(oldest[b.Destination]), strings.Compare(a.Destination, b.Destination))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending by destination: %w", err)
	}
	return out[:min(len(out), limit)], nil
}

// DeadByDestination counts the DEAD rows by destination (the type when
// none), the largest counts first.
func (s *Store) DeadByDestination(ctx context.Context, limit int) ([]ferrystore.DestinationCount, error) {
	if err := listLimit("DEAD by destination", limit); err != nil {
		return nil, err
	}
	var out []ferrystore.DestinationCount
	err := s.db.statement(ctx, func(time.Time) error {
		counts := map[string]int64{}
		for _, r := range s.t.rows {
			if r.status == ferrytype.StatusDead {
				counts[r.route()]++
			}
		}
		for d, n := range counts {
			out = append(out, ferrystore.DestinationCount{Destination: d, Count: n})
		}
		slices.SortFunc(out, func(a, b ferrystore.DestinationCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Destination, b.Destination))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("DEAD by destination: %w", err)
	}
	return out[:min(len(out), limit)], nil
}

// Attempts counts the NEW and SENDING rows next in line (nextInLine) by
// status and attempts.
func (s *Store) Attempts(ctx context.Context) ([]ferrystore.AttemptCount, error) {
	var out []ferrystore.AttemptCount
	err := s.db.statement(ctx, func(time.Time) error {
		type group struct {
			status   ferrytype.Status
			attempts int
		}
		counts := map[group]int64{}
		for _, r := range s.t.nextInLine() {
			counts[group{r.status, r.attempts}]++
		}
		for g, n := range counts {
			out = append(out, ferrystore.AttemptCount{Status: g.status, Attempts: g.attempts, Events: n})
		}
		slices.SortFunc(out, func(a, b ferrystore.AttemptCount) int {
			return cmp.Or(strings.Compare(string(a.Status), string(b.Status)), cmp.Compare(a.Attempts, b.Attempts))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return out[:min(len(out), ferrystore.MaxListLimit)], nil
}

// PendingFailures returns up to limit of the NEW and SENDING rows next in
// line (nextInLine) that recorded an error, the oldest first (created_at,
// then event id), without payload and headers, as the SQL stores do.
func (s *Store) PendingFailures(ctx context.Context, limit int) ([]ferrystore.Row, error) {
	if err := listLimit("pending failures", limit); err != nil {
		return nil, err
	}
	var out []ferrystore.Row
	err := s.db.statement(ctx, func(time.Time) error {
		var failed []*row
		for _, r := range s.t.nextInLine() {
			if r.lastError != "" {
				failed = append(failed, r)
			}
		}
		slices.SortFunc(failed, func(a, b *row) int {
			return cmp.Or(a.createdAt.Compare(b.createdAt), strings.Compare(a.id, b.id))
		})
		for _, r := range failed[:min(len(failed), limit)] {
			out = append(out, r.view(true))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending failures: %w", err)
	}
	return out, nil
}

// matcher returns the condition of f (validated) on a row, as the SQL
// stores' WHERE clause of it reads: every field that is set must hold.
func matcher(f ferrystore.Filter, now time.Time) func(*row) bool {
	statuses := map[ferrytype.Status]bool{}
	for _, st := range f.Statuses {
		statuses[st] = true
	}
	var ids map[string]bool
	if len(f.IDs) > 0 {
		ids = map[string]bool{}
		for _, id := range f.IDs {
			ids[id] = true
		}
	}
	var contains []string
	for _, c := range f.ErrorContains {
		if c != "" {
			contains = append(contains, foldASCII(c))
		}
	}
	return func(r *row) bool {
		switch {
		case !statuses[r.status],
			ids != nil && !ids[r.id],
			f.Destination != "" && r.route() != f.Destination,
			f.ErrorClass != "" && r.errorClass != f.ErrorClass,
			f.Unclassified && (r.errorClass != "" || r.lastError == ""),
			f.AggregateType != "" && r.aggType != f.AggregateType,
			f.AggregateID != "" && r.aggID != f.AggregateID,
			f.Type != "" && r.typ != f.Type,
			f.Failed && r.lastError == "",
			f.MinAge > 0 && r.createdAt.After(now.Add(-f.MinAge)),
			f.MaxAge > 0 && r.createdAt.Before(now.Add(-f.MaxAge)),
			!f.DiedBy.IsZero() && r.availableAt.After(f.DiedBy),
			f.After != (ferrystore.ListCursor{}) && listOrder(r, f.After.CreatedAt, f.After.ID) <= 0:
			return false
		}
		if len(contains) > 0 {
			text := foldASCII(r.lastError)
			for _, c := range contains {
				if !strings.Contains(text, c) {
					return false
				}
			}
		}
		return true
	}
}

// foldASCII lowers the ASCII letters of s, and no other: the match of
// Filter.ErrorContains ignores the case of ASCII letters only, as
// SQLite's does.
func foldASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// listOrder compares r with the position (at, id) in List's order:
// (created_at, event_id).
func listOrder(r *row, at time.Time, id string) int {
	return cmp.Or(r.createdAt.Compare(at), strings.Compare(r.id, id))
}

// selection returns the rows of f, in List's order.
func (s *Store) selection(f ferrystore.Filter, now time.Time) []*row {
	return sorted(s.t.rows, matcher(f, now), func(a, b *row) int { return listOrder(a, b.createdAt, b.id) })
}

// GroupErrors counts the rows of f (f.Limit aside) by destination, type
// and recorded error class, the largest groups first.
func (s *Store) GroupErrors(ctx context.Context, f ferrystore.Filter) ([]ferrystore.ErrorGroup, error) {
	if err := f.ValidateSelection(); err != nil {
		return nil, err
	}
	var out []ferrystore.ErrorGroup
	err := s.db.statement(ctx, func(now time.Time) error {
		type key struct{ dest, typ, class string }
		groups := map[key]*ferrystore.ErrorGroup{}
		for _, r := range s.selection(f, now) {
			k := key{r.route(), r.typ, r.errorClass}
			g := groups[k]
			if g == nil {
				g = &ferrystore.ErrorGroup{Destination: k.dest, Type: k.typ, ErrorClass: k.class, Oldest: r.createdAt}
				groups[k] = g
			}
			g.Count++
			g.Newest = r.createdAt // the selection is oldest first
		}
		for _, g := range groups {
			out = append(out, *g)
		}
		slices.SortFunc(out, func(a, b ferrystore.ErrorGroup) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Destination, b.Destination),
				strings.Compare(a.ErrorClass, b.ErrorClass), strings.Compare(a.Type, b.Type))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("group errors: %w", err)
	}
	return out[:min(len(out), ferrystore.MaxErrorGroups)], nil
}

// List returns the rows matching f, oldest first (created_at, then event
// id), at most f.Limit of them, after f.After.
func (s *Store) List(ctx context.Context, f ferrystore.Filter) ([]ferrystore.Row, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []ferrystore.Row
	err := s.db.statement(ctx, func(now time.Time) error {
		rows := s.selection(f, now)
		for _, r := range rows[:min(len(rows), f.Limit)] {
			if f.KeysOnly {
				out = append(out, ferrystore.Row{Message: ferrytype.Message{ID: r.id, CreatedAt: r.createdAt}})
				continue
			}
			out = append(out, r.view(f.NoPayload))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// Count counts the rows matching f, f.Limit aside.
func (s *Store) Count(ctx context.Context, f ferrystore.Filter) (int64, error) {
	if err := f.ValidateSelection(); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		match := matcher(f, now)
		for _, r := range s.t.rows {
			if match(r) {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return n, nil
}

// byID runs change on the rows among ids that are in status from, and
// counts them.
func (s *Store) byID(ctx context.Context, what string, ids []string, from ferrytype.Status, change func(r *row, now time.Time)) (int64, error) {
	if err := ferrystore.ValidateIDs(ids); err != nil || len(ids) == 0 {
		return 0, err
	}
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, id := range ids {
			if r := s.t.rows[id]; r != nil && r.status == from {
				change(r, now)
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// Retry makes the DEAD rows among ids NEW again, available now, with
// attempts 0, pending from now on (ferrytype.TransitionRevive).
func (s *Store) Retry(ctx context.Context, ids []string) (int64, error) {
	tr := ferrytype.TransitionRevive
	return s.byID(ctx, "retry dead events", ids, tr.From, func(r *row, now time.Time) {
		s.t.move(r, tr)
		r.attempts, r.availableAt, r.revivedAt, r.token, r.lockedUntil = 0, now, now, "", time.Time{}
	})
}

// appendNote appends note to a discard reason, after "; ".
func appendNote(reason, note string) string {
	if reason == "" {
		return note
	}
	return reason + "; " + note
}

// Discard moves the DEAD rows among ids to DISCARDED
// (ferrytype.TransitionDiscard), appending reason to their record.
func (s *Store) Discard(ctx context.Context, ids []string, reason string) (int64, error) {
	tr := ferrytype.TransitionDiscard
	reason = token.Truncate(reason, 2000)
	return s.byID(ctx, "discard dead events", ids, tr.From, func(r *row, now time.Time) {
		s.t.move(r, tr)
		r.discardedAt, r.discardReason = now, appendNote(r.discardReason, reason)
	})
}

// Restore moves the DISCARDED rows among ids back to DEAD
// (ferrytype.TransitionRestore), appending note to their record.
func (s *Store) Restore(ctx context.Context, ids []string, note string) (int64, error) {
	tr := ferrytype.TransitionRestore
	note = token.Truncate(note, 2000)
	return s.byID(ctx, "restore discarded events", ids, tr.From, func(r *row, now time.Time) {
		s.t.move(r, tr)
		r.discardedAt, r.discardReason, r.availableAt = time.Time{}, appendNote(r.discardReason, note), now
	})
}

// AfterBulk has nothing to do: the rows are in memory.
func (s *Store) AfterBulk(ctx context.Context, changed int64) error { return ctx.Err() }

// SetErrorClass records class on the rows among ids that recorded none.
func (s *Store) SetErrorClass(ctx context.Context, class string, ids []string) (int64, error) {
	if class == "" || len(class) > errclass.MaxLen {
		return 0, fmt.Errorf("%w: error class of %d bytes, 1 to %d are allowed", ferrytype.ErrInvalidConfig, len(class), errclass.MaxLen)
	}
	if err := ferrystore.ValidateIDs(ids); err != nil || len(ids) == 0 {
		return 0, err
	}
	var n int64
	err := s.db.statement(ctx, func(time.Time) error {
		for _, id := range ids {
			if r := s.t.rows[id]; r != nil && r.errorClass == "" {
				r.errorClass = class
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set error class: %w", err)
	}
	return n, nil
}

// purgeableDiscarded returns the DISCARDED rows discarded before at, in
// the order PurgeDiscarded deletes them.
func (s *Store) purgeableDiscarded(at time.Time) []*row {
	return sorted(s.t.rows, func(r *row) bool {
		return r.status == ferrytype.TransitionPurgeDiscarded.From && r.discardedAt.Before(at)
	}, before)
}

// PurgeDiscarded deletes up to limit DISCARDED rows discarded more than
// olderThan ago (ferrytype.TransitionPurgeDiscarded).
func (s *Store) PurgeDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if err := positive("purge discarded", limit); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for _, r := range s.purgeableDiscarded(now.Add(-olderThan)) {
			if n == int64(limit) {
				break
			}
			s.t.remove(r)
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge discarded: %w", err)
	}
	return n, nil
}

// Purgeable counts what PurgeSent and PurgeDiscarded would delete with
// olderThan, deleting nothing.
func (s *Store) Purgeable(ctx context.Context, olderThan time.Duration) (sent, discarded int64, err error) {
	err = s.db.statement(ctx, func(now time.Time) error {
		at := now.Add(-olderThan)
		sent, discarded = int64(len(s.purgeableSent(at))), int64(len(s.purgeableDiscarded(at)))
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("count purgeable events: %w", err)
	}
	return sent, discarded, nil
}

// MissingEvents fails with an error wrapping ferrytype.ErrUndefinedTable
// for a valid query: the database holds the outbox's tables only, never a
// business table to reconcile.
func (s *Store) MissingEvents(ctx context.Context, q ferrystore.MissingEventsQuery) ([]ferrystore.MissingEvent, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("missing events in %s: %w", q.Table, err)
	}
	return nil, fmt.Errorf("missing events in %s: %w", q.Table,
		classify(fmt.Errorf("ferrymem: %w: %s (the in-memory database holds no business tables)", errNoTable, q.Table)))
}

// SentEvents returns a page of SENT events of q.EventType, sent at least
// q.OlderThan ago and made available within q.Window, in the order
// (available_at, event_id), after q.After.
func (s *Store) SentEvents(ctx context.Context, q ferrystore.SentEventsQuery) ([]ferrystore.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out []ferrystore.Row
	err := s.db.statement(ctx, func(now time.Time) error {
		from, older := now.Add(-q.Window), now.Add(-q.OlderThan)
		rows := sorted(s.t.rows, func(r *row) bool {
			return r.status == ferrytype.StatusSent && !r.availableAt.Before(from) && r.availableAt.Before(older) &&
				r.sentAt.Before(older) && r.typ == q.EventType && (q.AggregateType == "" || r.aggType == q.AggregateType) &&
				(q.After.ID == "" || cmp.Or(r.availableAt.Compare(q.After.AvailableAt), strings.Compare(r.id, q.After.ID)) > 0)
		}, before)
		for _, r := range rows[:min(len(rows), q.Limit)] {
			out = append(out, r.view(false))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sent events: %w", err)
	}
	return out, nil
}
