// Package ferrystore defines the Store interface that ferry's core uses to
// talk to a database, and the small executor abstraction that lets one
// store serve both database/sql and pgx transactions.
//
// Every SQL dialect lives in its own package (ferrymysql, ferrypg,
// ferrysqlite); the core never branches on the dialect. The operations
// that differ between them only in spelling are written once, against a
// small dialect interface, in an internal package the three share.
// ferrymem, in the core module, keeps the same tables in memory, for
// tests. Each status change a store makes is an edge of
// ferrytype.Transitions. Each store runs the conformance suite in
// ferrystoretest, which tests every edge.
package ferrystore

import (
	"context"
	"io/fs"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// Store is an outbox table in one database: the operations the relay, the
// sweeper, retention and the CLI perform with the store's own connections.
// All times are computed by the database clock; durations are passed in and
// added there.
type Store interface {
	// Dialect names the SQL dialect: "mysql", "postgres" or "sqlite";
	// "memory" for the in-memory store (ferrymem), which runs no SQL.
	Dialect() string
	// Table is the outbox table's name.
	Table() string
	// Migrate creates or upgrades the store's tables to the newest
	// embedded migration. It is safe to run concurrently and repeatedly.
	Migrate(ctx context.Context) error
	// Migrations returns the store's migrations rendered for its table
	// names, as files named NNNN_name.up.sql and NNNN_name.down.sql.
	Migrations() (fs.FS, error)
	// CheckSchema compares the table with the migrations the store embeds:
	// it reads which migrations of the table have run (from the migration
	// table) and whether the table exists, and changes nothing. The relay
	// daemon and the operator's commands check the schema through it
	// before they touch the table. An error means the database could not
	// be asked; a schema that is not current is described by the result
	// (Schema.Err).
	CheckSchema(ctx context.Context) (Schema, error)

	// Enqueue inserts rows through ex, which is usually the caller's
	// transaction. Each row has its ID set and its payload validated.
	// Aggregate sequence numbers are assigned here, in the same
	// transaction, unless opts.SkipSequence.
	Enqueue(ctx context.Context, ex Executor, rows []ferrytype.Event, opts EnqueueOptions) error

	// Claim leases up to p.Limit available NEW rows to p.Token: status
	// SENDING, locked_until = now + p.Lease, attempts + 1. It returns the
	// claimed rows. The claim transaction ends before Claim returns.
	//
	// A claimed row that cannot be turned into a message (an error
	// wrapping ferrytype.ErrMalformedRow) is never returned: Claim moves
	// it on to DEAD under p.Token (ferrytype.TransitionMalformed) with the
	// error as last_error, and reports it to p.Malformed. The other rows
	// of the batch are claimed and returned as usual. If recording the
	// malformed rows fails, Claim returns the error: where the claim is one
	// transaction (MySQL) nothing was claimed; elsewhere the batch's rows
	// stay SENDING until their lease expires, as after a lost claim.
	Claim(ctx context.Context, p ClaimParams) ([]ferrytype.Message, error)
	// MarkSent marks SENT the rows among ids that are still SENDING under
	// token, and returns how many it changed. A row not changed was taken
	// from this lease (by the sweeper, another relay, a person): it is
	// left as it is.
	MarkSent(ctx context.Context, token string, ids []string) (int64, error)
	// MarkFailed records failed attempts: each row still SENDING under its
	// token goes back to NEW after its delay, or to DEAD
	// (ferrytype.TransitionFailRetry, ferrytype.TransitionFailDead). The
	// result says which ids took which edge and which were fenced. On an
	// error nothing was changed.
	MarkFailed(ctx context.Context, fails []Failure) (MarkFailedResult, error)
	// Release gives back the rows among ids still SENDING under token,
	// whose publish never left the process (ferrytype.ErrNotSent): status
	// NEW, available now, lease cleared, attempts - 1, so that the claim
	// spent no attempt (ferrytype.TransitionRelease). last_error is left
	// as it was. It returns how many rows it changed; the others were
	// fenced.
	Release(ctx context.Context, token string, ids []string) (int64, error)
	// ExpiredClaims returns up to limit SENDING rows whose lease ended,
	// for the sweeper to return (MarkFailed, fenced by each token).
	ExpiredClaims(ctx context.Context, limit int) ([]Claimed, error)
	// ClaimsOf returns up to limit SENDING rows whose lease token starts
	// with prefix + ".", whether or not their lease ended: the claims of a
	// relay found dead (RelayBeat.Claims), for the maintainer to return at
	// once with MarkFailed, fenced by each token, as the sweeper does.
	// prefix must be 1 to MaxClaimsPrefixLen lowercase hex characters (an
	// error wrapping ferrytype.ErrInvalidConfig otherwise: an empty prefix
	// must never match every claim), limit positive. It reads the SENDING
	// rows through the pending index (status first) and locks nothing.
	ClaimsOf(ctx context.Context, prefix string, limit int) ([]Claimed, error)
	// PurgeSent deletes up to limit SENT rows sent more than olderThan ago
	// and returns how many it deleted.
	PurgeSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
	// Ready reports whether any NEW row is available now: what an idle
	// relay asks between claims. It reads at most one entry of the pending
	// index (status, available_at), takes no locks and writes nothing, so
	// it may run every few milliseconds.
	Ready(ctx context.Context) (bool, error)
	// Pending reports whether any row is NEW (available now or later) or
	// SENDING: whether a drain has anything left. Like Ready it reads at
	// most one entry of the pending index and locks nothing, so a drain
	// can ask it often where Stats, which counts every pending row, would
	// cost the database as much as the relaying.
	Pending(ctx context.Context) (bool, error)
	// Stats counts rows by status, exactly, from the pending index alone
	// (every pending and DEAD row's entry, no row), and measures the oldest
	// pending row among the PendingWindow of each status next in line (see
	// Stats.OldestPending), reading at most 2 × PendingWindow rows.
	Stats(ctx context.Context) (Stats, error)
	// Get returns one row by event id, or an error wrapping
	// ferrytype.ErrNotFound.
	Get(ctx context.Context, id string) (Row, error)

	// AcquireLease takes or renews the lease name (LeaseMaintenance,
	// LeaseLog) for owner until the database clock's now + ttl, in one
	// atomic statement: it succeeds when the row is free (or absent: it
	// creates it), already owner's, or its lease ended, so that of two
	// relays racing for a free or ended lease exactly one holds it. It
	// returns the row as it is after the call (the position saved by the
	// holders among it) and whether owner holds the lease. source is
	// stored when the lease is taken (free text, cut to
	// MaxLeaseSourceLen bytes). name must be 1 to MaxLeaseNameLen bytes,
	// owner 1 to MaxLeaseOwnerLen, ttl positive (an error wrapping
	// ferrytype.ErrInvalidConfig otherwise).
	AcquireLease(ctx context.Context, name, owner, source string, ttl time.Duration) (LeaseState, bool, error)
	// RenewLease extends owner's lease name to the database clock's now +
	// ttl, and stores pos as its position when pos is not empty, only
	// while owner holds it, in one statement. It reports whether it did:
	// false when fenced (the lease ended and went to another owner, or
	// was released).
	RenewLease(ctx context.Context, name, owner string, pos LogPosition, ttl time.Duration) (bool, error)
	// ReleaseLease gives up owner's lease name, keeping its position, so
	// that another owner takes it at once. Not holding it is no error.
	ReleaseLease(ctx context.Context, name, owner string) error
	// LeaseState reads the lease name; ok is false when its row was never
	// written.
	LeaseState(ctx context.Context, name string) (st LeaseState, ok bool, err error)

	// Classifier classifies the driver's errors of statements the caller
	// ran in its own transaction.
	Classifier
	// RelayRegistry records which relays run on the table, in its
	// heartbeat table.
	RelayRegistry

	// Close releases what the store opened itself. A store built on a
	// caller's pool leaves the pool open.
	Close() error
}

// Classifier is part of every Store and InboxStore: Classify maps a
// database error of the store's driver to ferry's classes
// (ferrytype.ErrRetryable, ErrLockConflict, ErrDuplicate,
// ErrUndefinedTable) by wrapping it, so that callers test with errors.Is
// and can still reach the driver's error with errors.As. Errors the
// store's own methods return are classified already; Classify is for
// errors of statements the caller ran in its own transaction. An error of
// no class is returned unchanged.
type Classifier interface {
	Classify(err error) error
}

// Driver is a Store that can also unwrap the caller's transactions of type
// TTx (*sql.Tx or pgx.Tx) into an Executor, so that events are written in
// the caller's own transaction.
type Driver[TTx any] interface {
	Store
	// UnwrapTx returns an Executor that runs statements in tx.
	UnwrapTx(tx TTx) Executor
}

// Listener is implemented by stores that can tell the relay about new rows
// as soon as they commit (PostgreSQL LISTEN/NOTIFY; ferrymem, in process).
type Listener interface {
	// Listen calls notify after each commit that inserted outbox rows,
	// until ctx ends. It returns ctx's error, or an error when listening
	// failed; the caller may call Listen again.
	Listen(ctx context.Context, notify func()) error
}

// EnqueueOptions tune one Enqueue.
type EnqueueOptions struct {
	// SkipSequence writes sequence 0 for every row instead of numbering
	// each aggregate's events: one statement less per enqueue, but the
	// rows take no part in ordered claims and carry no version.
	SkipSequence bool
}

// ClaimParams are the parameters of one claim.
type ClaimParams struct {
	// Limit is the largest number of rows to claim.
	Limit int
	// Token is the lease token, unique to this claim.
	Token string
	// Lease is how long the claim holds the rows before the sweeper may
	// return them.
	Lease time.Duration
	// Ordered claims only rows whose every earlier row of the same
	// aggregate is SENT (or DISCARDED by a person), so an aggregate's next
	// event is never published before its previous one was confirmed.
	Ordered bool
	// IDs, when not empty, restricts the claim to these events, looked up
	// by primary key instead of scanning the pending index: the log
	// relay's claims, of the events its feed read from the database's log.
	// Only those still NEW and available now are claimed, at most Limit
	// of them, oldest available first; with Ordered, only those whose
	// earlier event is SENT (two events of one aggregate in IDs: the later
	// one stays NEW). An id of no row is ignored. A store may wait for a
	// row still locked by the transaction that inserted it (MariaDB tells
	// binlog readers of a transaction before InnoDB shows it committed).
	IDs []string
	// Malformed, when not nil, is called once for each claimed row that
	// Claim recorded DEAD as malformed, with its event id and the reason
	// (wrapping ferrytype.ErrMalformedRow), after the claim committed.
	Malformed func(id string, reason error)
}

// Failure is a failed publish attempt to record.
type Failure struct {
	ID    string
	Token string
	// Dead moves the row to DEAD instead of back to NEW.
	Dead bool
	// Delay is how long the row waits before its next attempt; none for a
	// row that goes DEAD (Wait).
	Delay time.Duration
	// Error says what went wrong; it is stored as last_error.
	Error string
}

// Wait is what the store adds to its clock for the row's available_at:
// Delay, or nothing when the row goes DEAD, whose available_at is when it
// died (Filter.DiedBy).
func (f Failure) Wait() time.Duration {
	if f.Dead {
		return 0
	}
	return f.Delay
}

// MarkFailedResult says what MarkFailed did with each failure it was
// given: every id is in exactly one of the lists, in the order of the
// failures.
type MarkFailedResult struct {
	// Retried are the rows that went back to NEW, to be claimed again
	// after their delay.
	Retried []string
	// Dead are the rows that went to DEAD.
	Dead []string
	// Fenced are the rows left as they were: not SENDING under the
	// failure's token any more (swept, retried by another relay, changed
	// by a person).
	Fenced []string
}

// Changed counts the rows MarkFailed changed: retried and dead.
func (r MarkFailedResult) Changed() int64 { return int64(len(r.Retried) + len(r.Dead)) }

// add files id under the outcome of one failure.
func (r *MarkFailedResult) add(id string, dead bool, changed bool) {
	switch {
	case !changed:
		r.Fenced = append(r.Fenced, id)
	case dead:
		r.Dead = append(r.Dead, id)
	default:
		r.Retried = append(r.Retried, id)
	}
}

// MarkFailedResultOf builds the result of fails from the ids whose rows
// changed.
func MarkFailedResultOf(fails []Failure, changed func(i int) bool) MarkFailedResult {
	var r MarkFailedResult
	for i, f := range fails {
		r.add(f.ID, f.Dead, changed(i))
	}
	return r
}

// Claimed is a SENDING row: an event claimed by a relay, under its lease
// token, that the relay has not settled (Store.ExpiredClaims,
// Store.ClaimsOf).
type Claimed struct {
	ID       string
	Token    string
	Attempts int
	// Destination is where the event is published: its destination, or
	// its type when it has none (ferrytype.Message.Route).
	Destination string
}

// PendingWindow is how many pending rows of each status, NEW and SENDING,
// the figures of the pending events that need their rows read are
// computed over: the PendingWindow next in line, in the order of the
// pending index (status, available_at, event_id), in which relays claim
// them. Stats.OldestPending, Admin.PendingByDestination and Admin.Attempts
// read at most 2 × PendingWindow rows whatever the backlog, so that they
// answer in a bounded time behind a backlog of millions; they are exact
// when no more rows than that are pending (Stats.Windowed is false).
const PendingWindow = 10000

// Stats describes an outbox table. The counts are exact: they read the
// pending index alone. OldestPending is measured among the rows next in
// line (PendingWindow).
type Stats struct {
	// Counts by status.
	New, Sending, Sent, Dead int64
	// Ready counts NEW rows available now.
	Ready int64
	// OldestPending is how long the NEW or SENDING row pending for the
	// longest has been, among the PendingWindow NEW and the PendingWindow
	// SENDING rows next in line: since its created_at, or since a person
	// last retried it out of DEAD (Row.RevivedAt); zero when none is
	// pending. It is exact when Windowed is false. When Windowed is true it
	// is a lower bound of the true age: an event further back in line (a
	// delayed one, or one that waits for its next attempt after failures)
	// may have waited longer. It is never below the wait of the event next
	// in line since it became available, which is what a relay that fell
	// behind makes grow.
	OldestPending time.Duration
	// OldestPendingID is that row's event id; empty when none is pending.
	OldestPendingID string
	// Windowed reports that more than PendingWindow rows were NEW, or
	// SENDING, so that OldestPending was measured among the rows next in
	// line only. Admin.PendingByDestination and Admin.Attempts are then
	// computed over those rows only, too.
	Windowed bool
}

// Row is an outbox row as stored.
type Row struct {
	// Message holds the event; its Attempt is the row's attempts column.
	ferrytype.Message
	Status      ferrytype.Status
	LeaseToken  string
	AvailableAt time.Time
	LockedUntil time.Time // zero when NULL
	SentAt      time.Time // zero when NULL
	LastError   string
	// DiscardedAt and DiscardReason record when and why a person discarded
	// a DEAD event (status DISCARDED); zero otherwise.
	DiscardedAt   time.Time
	DiscardReason string
	// ErrorClass is the class of LastError (ferryadmin.ErrorClass) as the
	// store recorded it with the error; empty for a row that never failed,
	// or that failed before the table had migration 0004.
	ErrorClass string
	// RevivedAt is when a person last retried the row out of DEAD
	// (Admin.Retry); zero when never. A revived row counts as pending from
	// then on, not from CreatedAt.
	RevivedAt time.Time
	// Malformed says why the relay cannot turn the row into a message
	// (ferrytype.ErrMalformedRow's text and the column); empty for a
	// well-formed row. The Message then holds what could be read.
	Malformed string
	// RawHeaders is the headers column as stored when it is not a JSON
	// object of strings (Headers is then nil); empty otherwise.
	RawHeaders string
}
