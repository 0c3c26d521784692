package ferrystore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrytype"
)

// Admin is a Store with the operator's surface: what ferry status, dead,
// reconcile and purge and the console do. Its operations run on the
// store's own connections, outside any caller transaction; every listing
// is bounded by a limit, and every change is conditional on the row's
// status, so that an operator's command never races a relay into a state
// the relay did not expect.
//
// Every store of this repository implements it, and the conformance suite
// (ferrystoretest) checks it; it is apart from Store so that a relay,
// which needs none of it, asks for no more than it uses.
type Admin interface {
	Store

	// Ping checks that the database answers, with one round trip.
	Ping(ctx context.Context) error

	// Now reads the database clock, the one the rows' times are written
	// with: what Filter.DiedBy is compared with.
	Now(ctx context.Context) (time.Time, error)

	// CountByStatus counts the rows in each of statuses, exactly. It reads
	// those rows' index entries and no row: a count costs its number of
	// entries, and a count of SENT rows reads every retained SENT row's, so
	// its cost grows with retention.
	CountByStatus(ctx context.Context, statuses ...ferrytype.Status) (map[ferrytype.Status]int64, error)

	// PendingByDestination groups the NEW and SENDING rows next in line
	// (the PendingWindow of each status first in the pending index's order,
	// in which relays claim them) by the destination they are published to
	// (the event type when the destination is empty) and returns at most
	// limit groups, the one with the oldest pending event first. Each
	// group's counts and oldest age are those of the rows in the window:
	// exact when no more than PendingWindow rows of each status are
	// pending (Stats.Windowed false), and in a bounded time behind any
	// backlog.
	PendingByDestination(ctx context.Context, limit int) ([]DestinationStats, error)

	// DeadByDestination counts the DEAD rows of each destination (their
	// type when they have none) in the database (GROUP BY), exactly
	// whatever their number, the largest counts first, at most limit
	// (1..MaxListLimit) destinations.
	DeadByDestination(ctx context.Context, limit int) ([]DestinationCount, error)

	// Attempts counts the NEW and SENDING rows next in line (the
	// PendingWindow of each status first in the pending index's order) by
	// status and attempts (at most MaxListLimit groups): how far the
	// events about to be sent are into their retries. Exact when no more
	// than PendingWindow rows of each status are pending (Stats.Windowed
	// false); it reads at most 2 × PendingWindow rows behind any backlog.
	Attempts(ctx context.Context) ([]AttemptCount, error)

	// PendingFailures returns up to limit (1..MaxListLimit) of the NEW
	// and SENDING rows next in line (PendingWindow of each status, in the
	// pending index's order) that recorded an error, the oldest first
	// (created_at, then event id), without payload and headers (as List
	// with Filter.NoPayload): what a status report shows of the pending
	// events that failed, at a cost that does not grow with the backlog.
	PendingFailures(ctx context.Context, limit int) ([]Row, error)

	// GroupErrors counts the rows matching f (f.Limit aside) by
	// destination (Row.Route), event type and recorded error class, at
	// most MaxErrorGroups groups, the largest first. For DEAD or
	// DISCARDED rows and a filter of Statuses, Destination, Type and
	// ErrorClass only, it reads the DEAD index alone, never a row: one
	// statement whatever the number of events. Its groups with ErrorClass
	// "" name the destinations and types that hold rows without a class
	// (Filter.Unclassified says how to read them).
	GroupErrors(ctx context.Context, f Filter) ([]ErrorGroup, error)

	// List returns the rows matching f, oldest first (created_at, then
	// event id), at most f.Limit of them, starting after f.After. A caller
	// pages through a selection of any size with ListCursorOf the last row
	// of each page; a row that changes status during the walk keeps its
	// place in that order, so no row is listed twice.
	List(ctx context.Context, f Filter) ([]Row, error)

	// Count counts the rows matching f, f.Limit aside, with one statement.
	// It reads the index entries of f.Statuses and each of their rows, as
	// List does, but sends back only the count.
	Count(ctx context.Context, f Filter) (int64, error)

	// Retry moves the DEAD rows among ids back to NEW, available at once,
	// with attempts reset to 0 and the same event id; their last error
	// stays until the next attempt replaces it. Rows among ids that are
	// not DEAD are left alone. It returns how many rows it changed.
	Retry(ctx context.Context, ids []string) (int64, error)

	// Discard moves the DEAD rows among ids to DISCARDED, recording the
	// time and reason. A DISCARDED row is never published, is kept as the
	// audit trail, and no longer holds back its aggregate in ordered mode.
	// Rows that are not DEAD are left alone. It returns how many rows it
	// changed.
	Discard(ctx context.Context, ids []string, reason string) (int64, error)

	// Restore moves the DISCARDED rows among ids back to DEAD
	// (ferrytype.TransitionRestore), for a person to retry or discard them
	// again. Their discard time is cleared; their discard reason is kept,
	// with "; " and note appended, so that the record of who discarded and
	// who restored stays with the row (a later Discard appends its reason
	// the same way). Rows that are not DISCARDED are left alone. It
	// returns how many rows it changed.
	Restore(ctx context.Context, ids []string, note string) (int64, error)

	// AfterBulk is told, once at the end of an operator's bulk change
	// (ferryadmin's RetryDead, DiscardDead and RestoreDiscarded), how many
	// rows it changed, so that the store brings what its counts rely on up
	// to date then rather than when the database's background maintenance
	// comes to it. It changes no row; a store with nothing to do returns
	// nil. PostgreSQL's counts are index-only scans that read the row of
	// every entry on a page the visibility map does not mark all-visible,
	// which is every page a large change touched until a vacuum passes: the
	// SQL stores vacuum and analyze the outbox table there from
	// BulkTidyRows changed rows.
	AfterBulk(ctx context.Context, changed int64) error

	// SetErrorClass records class as the error class of the rows among ids
	// that recorded none (rows that failed before migration 0004), and
	// returns how many it changed: what a person's upgrade does once, so
	// that those rows are grouped in the database too.
	SetErrorClass(ctx context.Context, class string, ids []string) (int64, error)

	// PurgeDiscarded deletes up to limit DISCARDED rows discarded more than
	// olderThan ago and returns how many it deleted.
	PurgeDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error)

	// Purgeable counts what PurgeSent and PurgeDiscarded would delete with
	// olderThan, deleting nothing: SENT rows sent more than olderThan ago,
	// DISCARDED rows discarded more than olderThan ago. Counting the SENT
	// rows reads their index entries up to that age, as a purge does.
	Purgeable(ctx context.Context, olderThan time.Duration) (sent, discarded int64, err error)

	// MissingEvents returns up to q.Limit rows of a business table, in the
	// outbox's database, that have no outbox event of q.EventType whose
	// aggregate id is the row's key: business changes that committed
	// without their event.
	MissingEvents(ctx context.Context, q MissingEventsQuery) ([]MissingEvent, error)

	// SentEvents returns up to q.Limit SENT rows of q.EventType, sent at
	// least q.OlderThan ago and made available within q.Window, in the
	// order (available_at, event_id), starting after q.After: a page of
	// the events whose downstream effect reconciliation checks. Each call
	// walks the index on (status, available_at, event_id) from the cursor;
	// its cost is the page plus the SENT rows of other types in between,
	// never the whole retention.
	SentEvents(ctx context.Context, q SentEventsQuery) ([]Row, error)
}

// BulkTidyRows is the number of rows a bulk change must have changed for
// a SQL store's Admin.AfterBulk to act on PostgreSQL: below it, the pages
// it left to the vacuum are few, and autovacuum's pass costs the counts
// little.
const BulkTidyRows = 10_000

// MaxListLimit bounds every listing of Admin.
const MaxListLimit = 1000

// MaxStateListLimit bounds a listing of Admin.List with Filter.NoPayload
// or Filter.KeysOnly,
// whose rows are small: a walk over a large selection reads it in fewer
// pages.
const MaxStateListLimit = 10000

// DestinationStats describes the pending events of one destination. Its
// JSON form is stable: destination, new, sending and
// oldest_pending_seconds.
type DestinationStats struct {
	// Destination is the events' destination, or their type when they
	// have none: where the relay publishes them.
	Destination string `json:"destination"`
	// Counts of NEW and SENDING rows.
	New     int64 `json:"new"`
	Sending int64 `json:"sending"`
	// OldestPending is how long the one pending for the longest has
	// waited: since its created_at, or since a person retried it out of
	// DEAD (Row.RevivedAt). In JSON, oldest_pending_seconds.
	OldestPending time.Duration `json:"-"`
}

// MarshalJSON writes OldestPending in seconds.
func (d DestinationStats) MarshalJSON() ([]byte, error) {
	type plain DestinationStats // without these methods
	return json.Marshal(struct {
		plain
		OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	}{plain(d), d.OldestPending.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *DestinationStats) UnmarshalJSON(b []byte) error {
	type plain DestinationStats
	var v struct {
		plain
		OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*d = DestinationStats(v.plain)
	d.OldestPending = time.Duration(v.OldestPendingSeconds * float64(time.Second))
	return nil
}

// MaxErrorGroups bounds Admin.GroupErrors.
const MaxErrorGroups = 10000

// ErrorGroup counts the rows of one destination, event type and recorded
// error class.
type ErrorGroup struct {
	// Destination is where the rows are published: their destination, or
	// their type when they have none.
	Destination string
	Type        string
	// ErrorClass is their recorded error class; empty for rows without
	// one (Filter.Unclassified selects them).
	ErrorClass string
	Count      int64
	// Oldest and Newest are the earliest and latest created_at.
	Oldest, Newest time.Time
}

// DestinationCount is the number of rows of one destination.
type DestinationCount struct {
	Destination string `json:"destination"`
	Count       int64  `json:"count"`
}

// AttemptCount is the number of rows of one status with one attempt
// count. Its JSON form is stable.
type AttemptCount struct {
	Status   ferrytype.Status `json:"status"`
	Attempts int              `json:"attempts"`
	Events   int64            `json:"events"`
}

// MaxErrorContains bounds the length of each Filter.ErrorContains string.
const MaxErrorContains = 1000

// Filter selects outbox rows for Admin.List and Admin.Count. Empty fields
// do not filter.
type Filter struct {
	// Statuses the rows must have. Required.
	Statuses []ferrytype.Status
	// IDs restricts the rows to these event ids (at most MaxListLimit).
	IDs []string
	// AggregateType and AggregateID match exactly.
	AggregateType string
	AggregateID   string
	// Type matches the event type exactly.
	Type string
	// Destination matches where the event is published: its destination,
	// or its type when it has none.
	Destination string
	// Failed keeps rows that recorded an error (last_error set): failed
	// attempts, whatever their status now.
	Failed bool
	// ErrorContains keeps rows whose last_error contains each of these
	// strings (at most MaxErrorContains bytes each), as text: the stores
	// escape LIKE's wildcards, so "100%_done" matches only itself. The
	// match ignores the case of ASCII letters on every store (PostgreSQL
	// ILIKE and MySQL LOWER() fold other letters too; SQLite does not).
	// Empty strings are ignored.
	ErrorContains []string
	// ErrorClass keeps rows whose recorded error class (Row.ErrorClass) is
	// this, exactly. With Statuses DEAD (or DISCARDED) and Destination set,
	// List walks the DEAD index in its order, a page costing its rows
	// only.
	ErrorClass string
	// Unclassified keeps rows that recorded an error but no class: rows
	// that failed before the table had migration 0004, or that a relay of
	// an older version marked since. The caller classifies them
	// (ferryadmin.ErrorClass of LastError). With Statuses DEAD (or
	// DISCARDED), Destination and Type, List and Count read a range of the
	// DEAD index that holds the rows of that destination and type without
	// a class, and those rows (for their error), whatever the number of
	// classified rows beside them; GroupErrors finds the pairs that have
	// some (ErrorGroup.ErrorClass ""). Without both, they may read every
	// row of the statuses.
	Unclassified bool
	// MinAge keeps rows created at least this long ago, MaxAge rows created
	// at most this long ago, both by the database clock. Zero: no bound.
	MinAge, MaxAge time.Duration
	// DiedBy keeps the DEAD rows that died at or before this instant of
	// the database clock (Admin.Now): a DEAD row's available_at is when it
	// died, or when a person restored it to DEAD. Rows that die later are
	// left out, so that an action confirmed on what a page showed at that
	// instant acts on those rows only. Only with Statuses DEAD; the zero
	// value does not filter. The condition is on the row, not on an index:
	// List and Count read each row of the selection to check it.
	DiedBy time.Time
	// After keeps the rows after this position in List's order (created_at,
	// event_id); the zero value starts at the oldest row.
	After ListCursor
	// NoPayload makes List leave the payload and headers out: Payload is
	// {} and Headers nil, and Malformed judges the other columns only. A
	// walk that needs the rows' state, not their content, reads less.
	NoPayload bool
	// KeysOnly makes List return each row's ID and CreatedAt (its place
	// in List's order, for the cursor) and nothing else, read from the
	// index the statement walks where it holds them: a walk that needs the
	// ids only reads no row. It implies NoPayload's bound.
	KeysOnly bool
	// Limit is the most rows returned by List, 1 to MaxListLimit (to
	// MaxStateListLimit with NoPayload). Required by List; Count ignores
	// it.
	Limit int
}

// ListCursor is a position in the order of Admin.List: (created_at,
// event_id).
type ListCursor struct {
	CreatedAt time.Time
	ID        string
}

// ListCursorOf returns the position just after r.
func ListCursorOf(r Row) ListCursor { return ListCursor{CreatedAt: r.CreatedAt, ID: r.ID} }

// Validate checks f for List, naming the offending field.
func (f Filter) Validate() error {
	most := MaxListLimit
	if f.NoPayload || f.KeysOnly {
		most = MaxStateListLimit
	}
	if f.Limit < 1 || f.Limit > most {
		return fmt.Errorf("%w: Filter.Limit %d must be within 1..%d", ferrytype.ErrInvalidConfig, f.Limit, most)
	}
	return f.ValidateSelection()
}

// ValidateSelection checks f for Count: every field but Limit.
func (f Filter) ValidateSelection() error {
	switch {
	case len(f.Statuses) == 0:
		return fmt.Errorf("%w: Filter.Statuses is empty", ferrytype.ErrInvalidConfig)
	case len(f.IDs) > MaxListLimit:
		return fmt.Errorf("%w: Filter.IDs has %d ids, at most %d are allowed", ferrytype.ErrInvalidConfig, len(f.IDs), MaxListLimit)
	case f.MinAge < 0 || f.MaxAge < 0:
		return fmt.Errorf("%w: Filter.MinAge and MaxAge must not be negative", ferrytype.ErrInvalidConfig)
	case f.ErrorClass != "" && f.Unclassified:
		return fmt.Errorf("%w: Filter.ErrorClass and Filter.Unclassified exclude each other", ferrytype.ErrInvalidConfig)
	case len(f.ErrorClass) > MaxErrorContains:
		return fmt.Errorf("%w: Filter.ErrorClass has %d bytes, at most %d are allowed", ferrytype.ErrInvalidConfig, len(f.ErrorClass), MaxErrorContains)
	case f.MaxAge > 0 && f.MaxAge < f.MinAge:
		return fmt.Errorf("%w: Filter.MaxAge %s is below MinAge %s", ferrytype.ErrInvalidConfig, f.MaxAge, f.MinAge)
	case !f.DiedBy.IsZero() && (len(f.Statuses) != 1 || f.Statuses[0] != ferrytype.StatusDead):
		return fmt.Errorf("%w: Filter.DiedBy needs Statuses DEAD alone, not %v", ferrytype.ErrInvalidConfig, f.Statuses)
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			return fmt.Errorf("%w: Filter.Statuses: unknown status %q", ferrytype.ErrInvalidConfig, s)
		}
	}
	if len(f.ErrorContains) > 16 {
		return fmt.Errorf("%w: Filter.ErrorContains has %d strings, at most 16 are allowed", ferrytype.ErrInvalidConfig, len(f.ErrorContains))
	}
	for _, s := range f.ErrorContains {
		switch {
		case len(s) > MaxErrorContains:
			return fmt.Errorf("%w: Filter.ErrorContains: a string of %d bytes, at most %d are allowed",
				ferrytype.ErrInvalidConfig, len(s), MaxErrorContains)
		case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
			return fmt.Errorf("%w: Filter.ErrorContains: %q is not valid UTF-8 text", ferrytype.ErrInvalidConfig, s)
		}
	}
	return nil
}

// ValidateIDs checks an id list given to Retry or Discard.
func ValidateIDs(ids []string) error {
	if len(ids) > MaxListLimit {
		return fmt.Errorf("%w: %d ids, at most %d per call", ferrytype.ErrInvalidConfig, len(ids), MaxListLimit)
	}
	return nil
}

// MissingEventsQuery describes one reconciliation check: rows of Table
// whose TimeColumn lies between Window and Grace ago should each have an
// outbox event of EventType and AggregateType whose aggregate id is the
// row's KeyColumn, as text.
type MissingEventsQuery struct {
	// Table, KeyColumn and TimeColumn name the business table and its
	// columns; each must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$ and is quoted.
	Table, KeyColumn, TimeColumn string
	// AggregateType is the events' aggregate type ("" for events written
	// without one). It is part of the outbox's aggregate index, so the
	// check is one index lookup per business row.
	AggregateType string
	// EventType is the type of event every row must have. Required.
	EventType string
	// Window is how far back rows are checked. Keep it shorter than the
	// retention of SENT events, or rows whose events were purged show up.
	Window time.Duration
	// Grace skips rows younger than this, so that a clock skew between the
	// application writing TimeColumn and the database is not a finding.
	Grace time.Duration
	// Limit is the most rows returned, 1 to MaxListLimit.
	Limit int
}

// Validate checks q, naming the offending field.
func (q MissingEventsQuery) Validate() error {
	for _, id := range []struct{ what, name string }{
		{"MissingEventsQuery.Table", q.Table}, {"MissingEventsQuery.KeyColumn", q.KeyColumn},
		{"MissingEventsQuery.TimeColumn", q.TimeColumn},
	} {
		if err := ferrytype.ValidateIdentifier(id.what, id.name, 63); err != nil {
			return err
		}
	}
	switch {
	case q.EventType == "":
		return fmt.Errorf("%w: MissingEventsQuery.EventType is empty", ferrytype.ErrInvalidConfig)
	case q.Window <= 0:
		return fmt.Errorf("%w: MissingEventsQuery.Window must be positive", ferrytype.ErrInvalidConfig)
	case q.Grace < 0 || q.Grace >= q.Window:
		return fmt.Errorf("%w: MissingEventsQuery.Grace %s must be within 0..Window (%s)", ferrytype.ErrInvalidConfig, q.Grace, q.Window)
	case q.Limit < 1 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: MissingEventsQuery.Limit %d must be within 1..%d", ferrytype.ErrInvalidConfig, q.Limit, MaxListLimit)
	}
	return nil
}

// MissingEvent is a business row without its event. Its JSON form is
// stable.
type MissingEvent struct {
	// Key is the row's key column, as text.
	Key string `json:"key"`
	// Time is the row's time column.
	Time time.Time `json:"time"`
}

// SentEventsQuery selects a page of SENT events for Admin.SentEvents.
type SentEventsQuery struct {
	// EventType is the events' type. Required.
	EventType string
	// AggregateType, when not empty, keeps events of that aggregate type
	// only.
	AggregateType string
	// Window bounds how far back events are read, by available_at (when
	// an event was enqueued for, or last retried; never after it was
	// sent). Keep it shorter than the retention of SENT events. Required.
	Window time.Duration
	// OlderThan keeps events sent at least this long ago: the consumers
	// had that long to apply them. Must be below Window.
	OlderThan time.Duration
	// After is where the previous page ended (SentCursorOf its last row);
	// the zero value starts at the oldest event.
	After SentCursor
	// Limit is the most rows returned, 1 to MaxListLimit.
	Limit int
}

// SentCursor is a position in the order of Admin.SentEvents.
type SentCursor struct {
	AvailableAt time.Time
	ID          string
}

// SentCursorOf returns the position just after r.
func SentCursorOf(r Row) SentCursor { return SentCursor{AvailableAt: r.AvailableAt, ID: r.ID} }

// Validate checks q, naming the offending field.
func (q SentEventsQuery) Validate() error {
	switch {
	case q.EventType == "":
		return fmt.Errorf("%w: SentEventsQuery.EventType is empty", ferrytype.ErrInvalidConfig)
	case q.Window <= 0:
		return fmt.Errorf("%w: SentEventsQuery.Window must be positive", ferrytype.ErrInvalidConfig)
	case q.OlderThan < 0 || q.OlderThan >= q.Window:
		return fmt.Errorf("%w: SentEventsQuery.OlderThan %s must be within 0..Window (%s)", ferrytype.ErrInvalidConfig, q.OlderThan, q.Window)
	case q.Limit < 1 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: SentEventsQuery.Limit %d must be within 1..%d", ferrytype.ErrInvalidConfig, q.Limit, MaxListLimit)
	}
	return nil
}
