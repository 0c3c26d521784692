package ferry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// InboxOutcome is what Inbox.Process did with an operation.
type InboxOutcome int

const (
	// InboxApplied: the marker and the business effect committed together.
	InboxApplied InboxOutcome = iota + 1
	// InboxDuplicate: the operation was already applied (same key, same
	// defining fields). Nothing was written; ack the delivery.
	InboxDuplicate
	// InboxConflict: the key was applied with other defining fields. The
	// conflict is recorded durably; nothing else was written. The delivery
	// must be parked, never counted as a success.
	InboxConflict
	// InboxStale: the version guard found a newer version already applied.
	// The operation is recorded (its marker has outcome "stale") and its
	// effect skipped: an older event never overwrites newer state.
	InboxStale
)

// String returns the outcome's name.
func (o InboxOutcome) String() string {
	switch o {
	case InboxApplied:
		return "applied"
	case InboxDuplicate:
		return "duplicate"
	case InboxConflict:
		return "conflict"
	case InboxStale:
		return "stale"
	}
	return fmt.Sprintf("inbox-outcome(%d)", int(o))
}

// Inbox errors.
var (
	// ErrConflict is returned (wrapping ferrytype.ErrPoison) when an
	// operation conflicts with the one applied under its key.
	ErrConflict = errors.New("ferry: conflicting operation")
	// ErrNoEffect is returned by ExpectAffected when a statement changed
	// fewer or more rows than the operation needs. Returned from the
	// business function, it rolls the transaction back: no effect, no
	// marker.
	ErrNoEffect = errors.New("ferry: statement had no effect")
	// ErrOutOfOrder is returned by GuardContiguous when a version
	// arrives before the one it follows. Nothing was written; retry the
	// delivery later, when the gap may have filled.
	ErrOutOfOrder = errors.New("ferry: operation arrived before an earlier one")
)

// VersionGuard selects how an operation's Version is checked against the
// newest version applied for its Aggregate, so that an older event never
// overwrites newer state (R2.8). It is the consumer's guard; the relay's
// own ordering of an aggregate's events is RelayConfig.Ordered.
type VersionGuard int

const (
	// GuardNone applies operations whatever their version. Default.
	GuardNone VersionGuard = iota
	// GuardNewer applies an operation only when its Version is above the
	// newest applied for its Aggregate; older ones become stale no-ops.
	// For state-overwriting updates where skipping is fine.
	GuardNewer
	// GuardContiguous applies only Version = newest + 1; older ones become
	// stale no-ops and later ones fail with ErrOutOfOrder, to be retried
	// until the gap fills. For operations that must each happen, in order.
	GuardContiguous
)

// Operation identifies one business operation a delivery asks for.
type Operation struct {
	// Key is the business operation key, scoped by the consumer:
	// "order:42:paid". Not the message id: a re-wrapped event with a new
	// message id is still the same operation. Required, at most 128 bytes.
	Key string
	// EventID is the delivering event's id, stored in the marker (and in
	// conflicts) for tracing. At most 64 bytes.
	EventID string
	// Fields are the values that define the operation (user id, amount),
	// JSON-encodable. A redelivery with equal fields is a duplicate; with
	// different fields, a conflict. Compared by a canonical fingerprint:
	// map key order and number spelling (10, 10.0, 1e1) do not matter.
	Fields any
	// Aggregate and Version feed the version guard (Guard). Aggregate
	// scopes the version: "order:42". Versions start at 1.
	Aggregate string
	Version   int64
	Guard     VersionGuard
}

// InboxResult describes a processed operation.
type InboxResult struct {
	Outcome InboxOutcome
	// AppliedEventID is the event id stored in the marker: the event that
	// applied the operation (for a duplicate or conflict, an earlier one).
	AppliedEventID string
	// ConflictID is the recorded conflict's id.
	ConflictID int64
	// CurrentVersion is the aggregate's newest applied version before this
	// operation, when ordered.
	CurrentVersion int64
}

// InboxFilter is an optional fast filter in front of the database (Redis,
// see ferryredis). It is never authoritative: "seen" only sends the inbox
// straight to the stored marker to compare; the database decides. Errors
// are logged and ignored.
type InboxFilter interface {
	// Seen reports whether consumer may already have applied key.
	Seen(ctx context.Context, consumer, key string) (bool, error)
	// Remember records that consumer applied key; called after commit.
	Remember(ctx context.Context, consumer, key string, ttl time.Duration) error
}

// InboxConfig configures an Inbox.
type InboxConfig struct {
	// Consumer names the consumer: markers are scoped by it, so two
	// consumers of one event each apply their effect once. Required, at
	// most 64 bytes: "points-award".
	Consumer string
	// MaxRetries bounds the reruns of an operation whose transaction hit a
	// deadlock, a lock wait timeout or a serialization failure. Default 8.
	MaxRetries int
	// ReplayWindow is the longest time after which an event may be
	// delivered again (broker redelivery, replay from a stream, a relay
	// republishing). Marker retention may not be shorter: PurgeMarkers
	// refuses. Default DefaultReplayWindow (7 days).
	ReplayWindow time.Duration
	// Filter is an optional fast filter; FilterTTL its entries' lifetime
	// (default ReplayWindow).
	Filter    InboxFilter
	FilterTTL time.Duration
	// Hooks observe the inbox (HookInbox).
	Hooks []Hook
	// Logger receives the inbox's logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultReplayWindow is InboxConfig.ReplayWindow's default: markers are
// kept at least this long. Tools that purge markers without an Inbox (the
// ferry CLI) refuse shorter retentions by the same rule.
const DefaultReplayWindow = 7 * 24 * time.Hour

// Inbox applies business operations idempotently: it runs the caller's
// business function and inserts a marker for the operation in the same
// database transaction, so the effect and the record that it happened
// commit together or not at all.
//
// What the transaction covers: the marker, the version guard and every
// statement the business function runs through the transaction it is given.
// What it does not cover: anything else the function does — an HTTP call,
// a message, a write to another database. Enqueue those as tasks in the
// same transaction (see NewTaskWorker) instead.
type Inbox[TTx any] struct {
	driver ferrystore.InboxDriver[TTx]
	cfg    InboxConfig
	hooks  []HookInbox
	log    *slog.Logger
}

// NewInbox returns an inbox for one consumer on driver's database.
func NewInbox[TTx any](driver ferrystore.InboxDriver[TTx], cfg *InboxConfig) (*Inbox[TTx], error) {
	if nilness.Nil(driver) || cfg == nil {
		return nil, fmt.Errorf("%w: NewInbox needs a driver and a config naming the consumer", ErrInvalidConfig)
	}
	c := *cfg
	switch {
	case c.Consumer == "" || len(c.Consumer) > 64:
		return nil, fmt.Errorf("%w: InboxConfig.Consumer must be 1 to 64 bytes", ErrInvalidConfig)
	case c.MaxRetries < 0 || c.ReplayWindow < 0 || c.FilterTTL < 0:
		return nil, fmt.Errorf("%w: InboxConfig.MaxRetries, ReplayWindow and FilterTTL may not be negative", ErrInvalidConfig)
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 8
	}
	if c.ReplayWindow == 0 {
		c.ReplayWindow = DefaultReplayWindow
	}
	if c.FilterTTL == 0 {
		c.FilterTTL = c.ReplayWindow
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Filter != nil && nilness.Nil(c.Filter) {
		return nil, fmt.Errorf("%w: InboxConfig.Filter is a nil %T (leave it unset for no filter)", ErrInvalidConfig, c.Filter)
	}
	in := &Inbox[TTx]{driver: driver, cfg: c, log: c.Logger.With("consumer", c.Consumer)}
	for i, h := range c.Hooks {
		v, ok := h.(HookInbox)
		switch {
		case nilness.Nil(h):
			return nil, fmt.Errorf("%w: InboxConfig.Hooks[%d] is nil", ErrInvalidConfig, i)
		case !ok:
			return nil, fmt.Errorf("%w: InboxConfig.Hooks[%d] (%T) does not implement HookInbox: it would observe nothing",
				ErrInvalidConfig, i, h)
		}
		in.hooks = append(in.hooks, v)
	}
	return in, nil
}

// Consumer returns the inbox's consumer name.
func (in *Inbox[TTx]) Consumer() string { return in.cfg.Consumer }

// Process applies op: in one transaction it inserts the operation's marker,
// runs the version guard when op asks for one, and runs fn, then commits.
//
//   - Applied: fn's effect and the marker committed.
//   - Duplicate (nil error): the marker insert hit the unique key; the
//     transaction was rolled back explicitly, the stored marker read and
//     its fields found equal. fn did not run.
//   - Conflict: same, but the fields differ. The conflict is recorded and
//     the error wraps ErrConflict and ferrytype.ErrPoison.
//   - Stale (nil error): the version guard skipped fn; the marker records it.
//   - An error from fn, or from the database: everything rolled back.
//     Errors the store classifies as ferrytype.ErrRetryable (deadlocks,
//     lock wait timeouts, serialization failures) are retried (MaxRetries) with fn run
//     again from the start, so fn must only act through tx.
//
// Concurrent deliveries of one operation are arbitrated by the marker's
// unique key, never by a prior read: one applies, the others wait for it
// and then see a duplicate (or apply, if it rolled back).
func (in *Inbox[TTx]) Process(ctx context.Context, op Operation, fn func(ctx context.Context, tx TTx) error) (InboxResult, error) {
	start := time.Now()
	res, err := in.process(ctx, op, fn)
	if res.Outcome != 0 {
		for _, h := range in.hooks {
			h.OnInbox(in.cfg.Consumer, res.Outcome, time.Since(start))
		}
	}
	return res, err
}

func (in *Inbox[TTx]) process(ctx context.Context, op Operation, fn func(ctx context.Context, tx TTx) error) (InboxResult, error) {
	switch {
	case op.Key == "" || len(op.Key) > 128:
		return InboxResult{}, ferrytype.Poison(fmt.Errorf("%w: Operation.Key must be 1 to 128 bytes", ErrInvalidEvent))
	case len(op.EventID) > 64:
		return InboxResult{}, ferrytype.Poison(fmt.Errorf("%w: Operation.EventID is longer than 64 bytes", ErrInvalidEvent))
	case op.Guard != GuardNone && (op.Aggregate == "" || len(op.Aggregate) > 200 || op.Version < 1):
		return InboxResult{}, ferrytype.Poison(fmt.Errorf("%w: an ordered operation needs an Aggregate (at most 200 bytes) and a Version from 1", ErrInvalidEvent))
	}
	fields, fp, err := Fingerprint(op.Fields)
	if err != nil {
		return InboxResult{}, ferrytype.Poison(err)
	}
	if in.cfg.Filter != nil {
		seen, err := in.cfg.Filter.Seen(ctx, in.cfg.Consumer, op.Key)
		if err != nil {
			in.log.Warn("inbox filter failed; asking the database", "error", err)
		}
		if seen {
			// A hint only: the stored marker decides.
			if m, err := in.driver.GetMarker(ctx, in.cfg.Consumer, op.Key); err == nil {
				return in.compare(ctx, op, fields, fp, m)
			}
		}
	}
	backoff := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		res, err := in.once(ctx, op, fields, fp, fn)
		err = in.driver.Classify(err)
		if err == nil || !errors.Is(err, ferrytype.ErrRetryable) || attempt >= in.cfg.MaxRetries || ctx.Err() != nil {
			return res, err
		}
		in.log.Info("operation hit a deadlock or lock timeout; running it again", "key", op.Key, "attempt", attempt+1, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// unmigrated returns err, classified, and when it says that one of the
// inbox's own tables does not exist, wraps it in ferrytype.ErrSchemaOutdated
// with the fix: consumers retry such an error and never park the message
// for it (ferrybroker.RedeliveryPolicy.ParkReason).
func (in *Inbox[TTx]) unmigrated(err error, what string) error {
	err = in.driver.Classify(err)
	if !errors.Is(err, ferrytype.ErrUndefinedTable) {
		return err
	}
	return ferrytype.Classed(fmt.Errorf("inbox %s could not %s: its tables are not migrated: "+
		"run ferry migrate --inbox (or the inbox store's Migrate): %w", in.cfg.Consumer, what, err), ferrytype.ErrSchemaOutdated)
}

func (in *Inbox[TTx]) once(ctx context.Context, op Operation, fields []byte, fp string, fn func(ctx context.Context, tx TTx) error) (res InboxResult, err error) {
	tx, err := in.driver.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = in.driver.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	ex := in.driver.UnwrapTx(tx)
	outcome := InboxApplied
	if op.Guard != GuardNone {
		prev, moved, err := in.driver.AdvanceVersion(ctx, ex, in.cfg.Consumer, op.Aggregate, op.Version, op.Guard == GuardContiguous)
		if err != nil {
			return res, in.unmigrated(err, "advance the version guard")
		}
		res.CurrentVersion = prev
		switch {
		case !moved && op.Version > prev:
			// Contiguous, with a gap: leave it for a later delivery. (A
			// duplicate of an applied version never gets here: its
			// version is not above prev.)
			return res, fmt.Errorf("%w: %s version %d, newest applied %d", ErrOutOfOrder, op.Aggregate, op.Version, prev)
		case !moved:
			outcome = InboxStale
		}
	}
	marker := ferrystore.Marker{Consumer: in.cfg.Consumer, Key: op.Key, EventID: op.EventID, Fields: fields,
		Fingerprint: fp, Outcome: outcome.String()}
	if err := in.driver.InsertMarker(ctx, ex, marker); err != nil {
		// Roll back explicitly before anything else, then read what is
		// stored.
		done = true
		_ = in.driver.Rollback(context.WithoutCancel(ctx), tx)
		if err = in.driver.Classify(err); !errors.Is(err, ferrytype.ErrDuplicate) {
			return res, in.unmigrated(fmt.Errorf("inbox: insert marker: %w", err), "insert its marker")
		}
		m, gerr := in.driver.GetMarker(ctx, in.cfg.Consumer, op.Key)
		if gerr != nil {
			return res, fmt.Errorf("inbox: duplicate key %s, then reading its marker: %w", op.Key, gerr)
		}
		return in.compare(ctx, op, fields, fp, m)
	}
	if outcome == InboxApplied {
		if err := fn(ctx, tx); err != nil {
			return res, err
		}
	}
	if err := ferryfault.At(ctx, ferryfault.InboxBeforeCommit); err != nil {
		return res, fmt.Errorf("inbox: %w", err)
	}
	done = true
	if err := in.driver.Commit(ctx, tx); err != nil {
		// A failed commit may still have committed. The marker says.
		if m, gerr := in.driver.GetMarker(context.WithoutCancel(ctx), in.cfg.Consumer, op.Key); gerr == nil &&
			m.EventID == op.EventID && m.Fingerprint == fp {
			in.log.Warn("commit reported an error but the operation is committed", "key", op.Key, "error", err)
		} else {
			return res, fmt.Errorf("inbox: commit (outcome unknown; a retry will tell): %w", err)
		}
	}
	if in.cfg.Filter != nil {
		if err := in.cfg.Filter.Remember(ctx, in.cfg.Consumer, op.Key, in.cfg.FilterTTL); err != nil {
			in.log.Warn("inbox filter: remember failed", "key", op.Key, "error", err)
		}
	}
	res.Outcome, res.AppliedEventID = outcome, op.EventID
	return res, nil
}

// compare tells a duplicate from a conflict, recording the latter.
func (in *Inbox[TTx]) compare(ctx context.Context, op Operation, fields []byte, fp string, m ferrystore.Marker) (InboxResult, error) {
	res := InboxResult{AppliedEventID: m.EventID}
	if m.Fingerprint == fp {
		res.Outcome = InboxDuplicate
		return res, nil
	}
	id, err := in.driver.RecordConflict(ctx, ferrystore.Conflict{
		Consumer: in.cfg.Consumer, Key: op.Key,
		Stored:   ferrystore.ConflictSide{EventID: m.EventID, Fields: m.Fields, Fingerprint: m.Fingerprint},
		Incoming: ferrystore.ConflictSide{EventID: op.EventID, Fields: fields, Fingerprint: fp},
	})
	if err != nil {
		// Not recorded: not parked either. The redelivery tries again.
		return res, fmt.Errorf("inbox: conflict on %s not recorded: %w", op.Key, err)
	}
	res.Outcome, res.ConflictID = InboxConflict, id
	in.log.Warn("conflicting operation recorded", "key", op.Key, "conflict_id", id,
		"applied_event_id", m.EventID, "incoming_event_id", op.EventID)
	return res, ferrytype.Poison(fmt.Errorf("%w: key %s was applied by event %s with other fields (conflict %d)",
		ErrConflict, op.Key, m.EventID, id))
}

// PurgeMarkers deletes markers older than olderThan, batch rows at a time,
// until none is left or ctx ends, and returns how many it deleted. It
// refuses a retention shorter than the replay window: a replayed event
// older than its marker would be applied again.
func (in *Inbox[TTx]) PurgeMarkers(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < in.cfg.ReplayWindow {
		return 0, fmt.Errorf("%w: marker retention %s is shorter than the replay window %s: "+
			"an event replayed after its marker is gone would be applied again", ErrInvalidConfig, olderThan, in.cfg.ReplayWindow)
	}
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := in.driver.PurgeMarkers(ctx, olderThan, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

// ExpectAffected returns nil when a statement affected want rows, else an
// error wrapping ErrNoEffect. Return it from the business function to roll
// back the effect and the marker when, say, the account to credit does not
// exist.
func ExpectAffected(n, want int64) error {
	if n != want {
		return fmt.Errorf("%w: %d rows affected, want %d", ErrNoEffect, n, want)
	}
	return nil
}

// ExpectResult is ExpectAffected for database/sql: it passes err through and
// checks that res affected one row. With pgx's own API, whose Exec returns a
// pgconn.CommandTag, use ExpectTag.
//
//	err := ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE points_account SET points = points + ? WHERE user_id = ?`, 10, 7))
func ExpectResult(res sql.Result, err error) error {
	return ExpectResultN(res, err, 1)
}

// ExpectResultN is ExpectResult for want rows.
func ExpectResultN(res sql.Result, err error, want int64) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	return ExpectAffected(n, want)
}

// ExpectTag is ExpectAffected for pgx: it passes err through and checks
// that tag, the pgconn.CommandTag that pgx.Tx's Exec returns (or anything
// else that counts its rows without an error), affected one row; for
// another count, ExpectAffected(tag.RowsAffected(), want). For
// database/sql's sql.Result, whose RowsAffected also returns an error, use
// ExpectResult.
//
//	err := ferry.ExpectTag(tx.Exec(ctx, `UPDATE points_account SET points = points + $1 WHERE user_id = $2`, 10, 7))
func ExpectTag(tag interface{ RowsAffected() int64 }, err error) error {
	if err != nil {
		return err
	}
	if tag == nil {
		return fmt.Errorf("%w: no command tag", ErrNoEffect)
	}
	return ExpectAffected(tag.RowsAffected(), 1)
}

// InboxHandler adapts an inbox to a broker consumer: each delivery is
// decoded into its operation (a decode error is poison: the delivery is
// parked) and applied with fn as its business function. Applied, duplicate
// and stale deliveries are acked; a conflict is parked; any other error is
// retried by the consumer.
func InboxHandler[TTx any](in *Inbox[TTx], decode func(d *ferrybroker.Delivery) (Operation, error),
	fn func(ctx context.Context, tx TTx, d *ferrybroker.Delivery) error) ferrybroker.Handler {
	return func(ctx context.Context, d *ferrybroker.Delivery) error {
		op, err := decode(d)
		if err != nil {
			return ferrytype.Poison(fmt.Errorf("decode delivery %s: %w", d.MessageID, err))
		}
		if op.EventID == "" {
			op.EventID = d.MessageID
		}
		_, err = in.Process(ctx, op, func(ctx context.Context, tx TTx) error { return fn(ctx, tx, d) })
		return err
	}
}
