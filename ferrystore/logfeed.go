package ferrystore

import (
	"context"
	"errors"
	"time"
)

// LogFeed reads a database's log of committed changes (MariaDB/MySQL's
// binlog, PostgreSQL's logical replication) for one outbox table, and
// reports the events that became NEW: rows inserted NEW, and rows updated
// back to NEW (a retry recorded by a relay, a person's ferry dead retry).
// A relay with a feed (ferry.RelayConfig.Feed) claims those events by id
// as soon as their transaction commits, instead of polling the table.
//
// The log is a source of ids, never of truth: a relay claims each event
// from the table by id, in the same state machine as a polling claim, so a
// feed that misses, repeats or reorders events costs latency, never an
// event or a second publish. Implementations: ferrybinlog (MariaDB/MySQL)
// and ferrypgoutput (PostgreSQL).
type LogFeed interface {
	// Source names the log and the server, for logs and ferry status:
	// "binlog 127.0.0.1:3307", "pgoutput slot ferry_outbox".
	Source() string
	// Check verifies that the database is set up for the feed and returns
	// an error wrapping ErrLogSetup that names what is missing and its
	// fix: binlog off, a format other than ROW, a row image other than
	// FULL, missing REPLICATION privileges, wal_level not logical, no free
	// replication slot, a publication that does not cover the table.
	// It creates what the feed may create itself (PostgreSQL's publication
	// and slot).
	Check(ctx context.Context) error
	// Position returns the end of the log now: a feed streaming from it
	// reports every change committed after this call.
	Position(ctx context.Context) (LogPosition, error)
	// Stream reads the changes committed after from, in commit order,
	// and calls fn with each transaction's events that became NEW (a
	// transaction with none may be skipped, or reported with no events so
	// that its position is known). fn's error ends Stream with that error.
	// Stream returns when ctx ends (with ctx's error), when fn fails, or
	// when reading fails: an error wrapping ErrLogGap when the log no
	// longer holds from (the binlog was purged, the slot invalidated or
	// dropped); another error when the connection failed, after which the
	// caller may stream again from its checkpoint.
	Stream(ctx context.Context, from LogPosition, fn func(ctx context.Context, b LogBatch) error) error
	// Flushed tells the feed that every change up to pos is handled and
	// checkpointed: the database may discard the log before it
	// (PostgreSQL: the slot's confirmed flush LSN). A feed whose database
	// keeps its log by its own rules (the binlog's expiry) ignores it.
	Flushed(pos LogPosition)
	// Lag reports how far the feed's last checkpoint is behind the log's
	// end: the bytes of log the database retains for it and, when known,
	// the time since the last change that was read. Lag is what ferry
	// status and the metrics show.
	Lag(ctx context.Context) (LogLag, error)
	// Close releases the feed's connections. It keeps what it created in
	// the database (the slot), which is what resumes the feed.
	Close() error
}

// LogPosition is a position in a database's log, opaque to the relay:
// a GTID set or file:offset on MariaDB/MySQL, an LSN on PostgreSQL. The
// empty position means none.
type LogPosition string

// LogEvent is an event a feed saw become NEW.
type LogEvent struct {
	// ID is the event id (the outbox row's event_id).
	ID string
	// Attempts is the row's attempts column in the change: 0 for a new
	// event or one a person retried, more for a retry a relay recorded.
	Attempts int
}

// LogBatch is one committed transaction's events.
type LogBatch struct {
	// Pos is the position after the transaction: a feed streaming from it
	// does not report this transaction again.
	Pos LogPosition
	// Events are the transaction's events that became NEW, in the order
	// the transaction wrote them.
	Events []LogEvent
	// Committed is when the transaction committed, by the database's
	// clock, as the log records it; zero when unknown.
	Committed time.Time
}

// LogLag is how far a feed is behind its database's log.
type LogLag struct {
	// Bytes of log retained for the feed: from its checkpoint to the
	// log's end (PostgreSQL: the slot's restart LSN to the current WAL
	// position; MariaDB/MySQL: from the checkpoint to the binlog's end).
	Bytes int64
	// Position is the feed's checkpoint, Head the log's end.
	Position, Head LogPosition
}

// Errors of log feeds.
var (
	// ErrLogSetup says the database is not set up for a log feed; the
	// error wrapping it names what and the fix.
	ErrLogSetup = errors.New("ferry: database not set up for the log relay")
	// ErrLogGap says the log no longer holds the position a feed was to
	// resume from: changes may have been skipped, so the relay falls back
	// to the table.
	ErrLogGap = errors.New("ferry: the log no longer holds the checkpoint")
)
