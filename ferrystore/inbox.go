package ferrystore

import (
	"context"
	"encoding/json"
	"io/fs"
	"time"
)

// InboxStore is the database side of ferry's inbox: the marker table that
// records which business operations a consumer applied, the conflict table,
// and the per-aggregate versions of the order guard. One InboxStore serves
// every consumer of its database; markers are scoped by consumer name.
type InboxStore interface {
	// Dialect names the SQL dialect: "mysql", "postgres" or "sqlite";
	// "memory" for the in-memory store (ferrymem).
	Dialect() string
	// Migrate creates or upgrades the inbox tables.
	Migrate(ctx context.Context) error
	// Migrations returns the inbox migrations rendered for its tables.
	Migrations() (fs.FS, error)

	// InsertMarker inserts m through ex, the operation's transaction. A
	// marker with the same consumer and key makes it fail with an error
	// that Classify puts in ferrytype.ErrDuplicate.
	InsertMarker(ctx context.Context, ex Executor, m Marker) error
	// GetMarker reads a committed marker; ferrytype.ErrNotFound when none.
	GetMarker(ctx context.Context, consumer, key string) (Marker, error)
	// RecordConflict stores c durably, once per consumer, key and incoming
	// fingerprint: a conflict seen again increments its occurrences. It
	// returns the conflict's id.
	RecordConflict(ctx context.Context, c Conflict) (int64, error)
	// AdvanceVersion moves the version of (consumer, aggregate) to
	// version through ex, under the row's lock, when the stored version is
	// lower (contiguous: exactly version-1). It returns the stored version
	// before the call and whether it moved. A missing row counts as 0.
	AdvanceVersion(ctx context.Context, ex Executor, consumer, aggregate string, version int64, contiguous bool) (prev int64, moved bool, err error)

	// Classifier classifies the driver's errors: ferrytype.ErrDuplicate
	// for a unique-key violation, ferrytype.ErrRetryable for an error
	// after which the whole transaction may be run again (deadlock, lock
	// wait timeout, serialization failure, busy database).
	Classifier

	// PurgeMarkers deletes up to limit markers older than olderThan.
	PurgeMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
	// PurgeableMarkers counts the markers, of every consumer, older than
	// olderThan: what PurgeMarkers would delete, deleting nothing (ferry
	// purge --markers --dry-run).
	PurgeableMarkers(ctx context.Context, olderThan time.Duration) (int64, error)
	// Conflicts lists conflicts, newest first; open only unless all.
	Conflicts(ctx context.Context, f ConflictFilter) ([]Conflict, error)
	// GetConflict returns one conflict; ferrytype.ErrNotFound when none.
	GetConflict(ctx context.Context, id int64) (Conflict, error)
	// ResolveConflict records a person's decision on an open conflict,
	// stamped with the database clock. It changes no business data. ferrytype.ErrNotFound when the conflict
	// does not exist or is already resolved.
	ResolveConflict(ctx context.Context, id int64, r Resolution) error
	// OpenConflicts counts the open conflicts of each consumer that has
	// any. It reads the conflicts' (status, id) index and each open row:
	// its cost grows with the open conflicts, never with resolved ones.
	OpenConflicts(ctx context.Context) (map[string]int64, error)
	// MarkerCount counts the markers of consumer, all consumers when empty.
	MarkerCount(ctx context.Context, consumer string) (int64, error)
	// ExistingMarkers returns the keys among keys (at most MaxListLimit)
	// for which consumer has a committed marker, in one statement that
	// looks each key up by the markers' primary key. Reconciliation uses
	// it to find events whose effect a consumer never applied.
	ExistingMarkers(ctx context.Context, consumer string, keys []string) (map[string]bool, error)
	// RecentMarkers counts the markers created within the last `within`,
	// by the database clock, per consumer and outcome ("applied", or
	// "stale" for an operation the order guard recorded as a no-op): the
	// recent work of each consumer of the database, as a console shows it.
	// It reads the range of the markers' created_at index (the one
	// retention purges by) the window covers, and each of its rows: its
	// cost grows with the markers written in the window, never with older
	// ones. Duplicates and conflicts write no marker: they are not counted
	// here (duplicates are counted only by the inbox's metrics, conflicts
	// in the conflict table).
	RecentMarkers(ctx context.Context, within time.Duration) ([]MarkerCount, error)

	Close() error
}

// MarkerCount is how many markers one consumer recorded with one outcome.
type MarkerCount struct {
	Consumer string
	Outcome  string
	Markers  int64
}

// InboxDriver is an InboxStore that also runs transactions of the caller's
// type TTx (*sql.Tx or pgx.Tx), which the business function receives.
type InboxDriver[TTx any] interface {
	InboxStore
	// Begin starts a transaction on the store's database.
	Begin(ctx context.Context) (TTx, error)
	// Commit commits tx.
	Commit(ctx context.Context, tx TTx) error
	// Rollback rolls tx back.
	Rollback(ctx context.Context, tx TTx) error
	// UnwrapTx returns an executor for tx.
	UnwrapTx(tx TTx) Executor
}

// Marker records that a consumer applied a business operation. Its JSON
// form is stable.
type Marker struct {
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	EventID  string `json:"event_id"`
	// Fields is the canonical JSON of the fields that define the
	// operation, as stored; Fingerprint its SHA-256, hex.
	Fields      json.RawMessage `json:"fields"`
	Fingerprint string          `json:"fingerprint"`
	// Outcome is "applied", or "stale" for an operation the order guard
	// turned into a recorded no-op.
	Outcome   string    `json:"outcome"`
	CreatedAt time.Time `json:"created_at"`
}

// Conflict is one business key delivered with different defining fields
// than the operation already applied under it. Its JSON form is stable.
type Conflict struct {
	ID       int64  `json:"id"`
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	// Status is "OPEN" or "RESOLVED".
	Status string `json:"status"`
	// Occurrences counts the deliveries of Incoming, FirstSeen and
	// LastSeen say when the first and the last came.
	Occurrences int64     `json:"occurrences"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	// Stored is the operation applied; Incoming the one refused, whose
	// delivery was parked.
	Stored   ConflictSide `json:"stored"`
	Incoming ConflictSide `json:"incoming"`
	// Resolution is the decision recorded, nil while the conflict is
	// open.
	Resolution *Resolution `json:"resolution,omitempty"`
}

// ConflictSide is one of the two operations of a conflict: the event that
// carried it and the fields that define it.
type ConflictSide struct {
	EventID string `json:"event_id"`
	// Fields is the canonical JSON of the operation's defining fields, as
	// stored; Fingerprint its SHA-256, hex.
	Fields      json.RawMessage `json:"fields"`
	Fingerprint string          `json:"fingerprint"`
}

// Resolution is a person's decision on a conflict. It records what was
// decided, by whom and when; ferry never re-applies an effect because of
// it. Its JSON form is stable.
type Resolution struct {
	// Decision: "keep-stored" (the applied operation stands),
	// "applied-manually" (someone fixed the data by hand),
	// "ignored" (not a real conflict).
	Decision string `json:"decision"`
	By       string `json:"by"`
	Note     string `json:"note"`
	// ResolvedAt is when the decision was recorded, by the database
	// clock; InboxStore.ResolveConflict sets it and ignores the value
	// given.
	ResolvedAt time.Time `json:"resolved_at"`
}

// ConflictFilter selects conflicts.
type ConflictFilter struct {
	Consumer string // all when empty
	All      bool   // resolved ones too
	Limit    int    // default 100
}
