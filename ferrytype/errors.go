package ferrytype

import (
	"errors"
	"fmt"
	"regexp"
)

// Sentinel errors. Errors returned by ferry wrap these with context; test
// with errors.Is.
var (
	// ErrInvalidEvent marks an event that cannot be enqueued: a missing
	// type, an over-long field. Nothing was written.
	ErrInvalidEvent = errors.New("ferry: invalid event")
	// ErrInvalidPayload marks a payload that is not valid JSON.
	ErrInvalidPayload = errors.New("ferry: payload is not valid JSON")
	// ErrPayloadTooLarge marks a payload over the configured size cap.
	ErrPayloadTooLarge = errors.New("ferry: payload too large")
	// ErrInvalidIdentifier marks a configured table or object name that is
	// not a plain SQL identifier.
	ErrInvalidIdentifier = errors.New("ferry: invalid identifier")
	// ErrInvalidConfig marks a configuration value out of range; the error
	// names the field.
	ErrInvalidConfig = errors.New("ferry: invalid config")
	// ErrClosed is returned by components used after Stop or Close.
	ErrClosed = errors.New("ferry: closed")
	// ErrNotFound is returned when a named row does not exist.
	ErrNotFound = errors.New("ferry: not found")
	// ErrPoison marks a delivery that will never succeed however often it
	// is retried (invalid payload, unknown event type, a recorded
	// conflict): consumers park it with the error as reason instead of
	// retrying it.
	ErrPoison = errors.New("ferry: poison message")
	// ErrNotSent marks the error of an unknown publish outcome whose
	// message provably never left the process: the publisher was not
	// connected, the broker blocked the connection before the write, the
	// message never had a slot in the confirm window, the context ended
	// before the write. The broker cannot have it, so the attempt is not
	// the event's fault: the relay gives such events back without
	// spending an attempt. A message that was written and whose confirm
	// was lost is never ErrNotSent (see ferrytype.NotSent).
	ErrNotSent = errors.New("ferry: not sent")
	// ErrMalformedRow marks an outbox row the relay cannot turn into a
	// message: headers that are not a JSON object of strings, a payload
	// that is not JSON, an empty event type, a value not of its column's
	// kind. Such rows come from hand-written INSERTs or older writers;
	// retrying cannot help, so the claim records them DEAD at once with
	// the error as last_error. Its text, "malformed row", begins that
	// last_error.
	ErrMalformedRow = errors.New("malformed row")

	// ErrRetryable marks a transient database error after which the same
	// work, run again in a new transaction, may succeed: a deadlock, a
	// lock wait timeout, a serialization failure, a busy database, or a
	// connection lost before the statement reached the server. An error
	// whose outcome is unknown (the connection broke during a commit) is
	// never retryable. Stores classify their driver's errors (see
	// ferrystore.Classifier); the driver's error stays in the chain.
	ErrRetryable = errors.New("ferry: retryable database error")
	// ErrLockConflict marks a deadlock or a lock wait timeout. Every
	// ErrLockConflict is also ErrRetryable.
	ErrLockConflict = errors.New("ferry: lock conflict")
	// ErrDuplicate marks a unique-key violation.
	ErrDuplicate = errors.New("ferry: duplicate key")
	// ErrUndefinedTable marks a statement on a table that does not exist,
	// usually because the migrations have not run.
	ErrUndefinedTable = errors.New("ferry: undefined table")
	// ErrSchemaOutdated marks a table whose migrations have not all run:
	// it does not exist yet, or an older ferry created it. The error names
	// the missing migrations; running them (ferry migrate) is the fix.
	ErrSchemaOutdated = errors.New("ferry: schema not migrated")
)

// Classed wraps err so that errors.Is(err, class) holds for each of
// classes, while errors.Is and errors.As still find everything err wraps.
// A nil err stays nil; an err already in every class is returned as it
// is.
func Classed(err error, classes ...error) error {
	if err == nil {
		return nil
	}
	missing := classes[:0:0]
	for _, c := range classes {
		if !errors.Is(err, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return err
	}
	return &classedError{err: err, classes: missing}
}

type classedError struct {
	err     error
	classes []error
}

func (c *classedError) Error() string   { return c.err.Error() }
func (c *classedError) Unwrap() []error { return append([]error{c.err}, c.classes...) }

// Poison wraps err so that errors.Is(err, ErrPoison) holds.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return poisonError{err}
}

type poisonError struct{ err error }

func (p poisonError) Error() string   { return p.err.Error() }
func (p poisonError) Unwrap() []error { return []error{p.err, ErrPoison} }

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// MaxIdentifierLen is the longest identifier ferry accepts: PostgreSQL's
// limit, one byte under MySQL's.
const MaxIdentifierLen = 63

// ValidateIdentifier checks that name is a plain SQL identifier of at
// most maxLen bytes (and never more than MaxIdentifierLen): letters,
// digits and underscores, not starting with a digit, as the pattern
// ^[A-Za-z_][A-Za-z0-9_]{0,62}$ says, so that it can be quoted safely into
// SQL. what names the setting in the error, which states maxLen: the one
// limit that applies.
func ValidateIdentifier(what, name string, maxLen int) error {
	return validateIdentifier(what, name, maxLen, "")
}

// ValidateTableName is ValidateIdentifier for the name of a table ferry
// creates and names other tables and indexes after (<table>_relay,
// <table>_aggregate_idx): maxLen leaves room for what it adds, and an
// error says so.
func ValidateTableName(what, name string, maxLen int) error {
	why := ""
	if min(maxLen, MaxIdentifierLen) < MaxIdentifierLen {
		why = fmt.Sprintf(" (ferry names indexes and tables after it, and their names must fit in %d bytes)", MaxIdentifierLen)
	}
	return validateIdentifier(what, name, maxLen, why)
}

func validateIdentifier(what, name string, maxLen int, why string) error {
	maxLen = min(maxLen, MaxIdentifierLen)
	switch {
	case !identRe.MatchString(name):
		return fmt.Errorf("%w: %s %q: want letters, digits and underscores, not starting with a digit, at most %d bytes%s",
			ErrInvalidIdentifier, what, name, maxLen, why)
	case len(name) > maxLen:
		return fmt.Errorf("%w: %s %q is %d bytes: at most %d%s", ErrInvalidIdentifier, what, name, len(name), maxLen, why)
	}
	return nil
}
