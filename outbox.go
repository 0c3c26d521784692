package ferry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/google/uuid"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// DefaultMaxPayloadBytes is the default cap on an event's payload size.
const DefaultMaxPayloadBytes = 256 << 10

// Field limits, matching the outbox schema's column sizes.
const (
	maxIDLen            = 64
	maxTypeLen          = 64
	maxAggregateTypeLen = 64
	maxAggregateIDLen   = 128
	maxDestinationLen   = 255
)

// OutboxConfig configures an Outbox. A nil config uses the defaults.
type OutboxConfig struct {
	// MaxPayloadBytes caps an event's payload. Default 256 KiB. Keep it
	// under the broker's own limit (NATS: 1 MiB by default).
	MaxPayloadBytes int
	// Wakeup, when set, is rung after every enqueue so that relays in the
	// same process look for new events at once. See Outbox.Notify.
	Wakeup *Wakeup
	// Hooks observe and adjust events at enqueue: each implements
	// HookEnqueue, called for each event before it is written (a value
	// that does not is refused); the OpenTelemetry plugin uses it to
	// capture the trace context into the event's headers.
	Hooks []Hook
	// NewID generates event ids for events that have none. Default: a
	// UUIDv7 string, time-ordered.
	NewID func() (string, error)
	// SkipSequence stops numbering each aggregate's events (they all get
	// sequence 0). It saves one statement per enqueue on MySQL/MariaDB and
	// SQLite, and the serialisation of concurrent enqueuers of one
	// aggregate; in exchange the events take no part in ordered relaying
	// and carry no version for consumers' order guards. Default false.
	SkipSequence bool
}

// Hook is any value implementing one or more of the Hook* interfaces; the
// core detects them by type assertion, so plugins implement only what they
// need.
type Hook any

// HookEnqueue is called for each event before it is written to the outbox,
// in the caller's transaction and goroutine. It may add headers: ev.Headers
// is a copy owned by the outbox.
type HookEnqueue interface {
	OnEnqueue(ctx context.Context, ev *Event)
}

// Outbox writes events in the caller's transactions. TTx is the caller's
// transaction type, *sql.Tx or pgx.Tx, fixed by the store driver.
type Outbox[TTx any] struct {
	driver  ferrystore.Driver[TTx]
	maxSize int
	wakeup  *Wakeup
	hooks   []HookEnqueue
	newID   func() (string, error)
	opts    ferrystore.EnqueueOptions
}

// NewOutbox returns an outbox writing through driver.
func NewOutbox[TTx any](driver ferrystore.Driver[TTx], cfg *OutboxConfig) (*Outbox[TTx], error) {
	if nilness.Nil(driver) {
		return nil, fmt.Errorf("%w: NewOutbox: driver is nil", ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &OutboxConfig{}
	}
	o := &Outbox[TTx]{driver: driver, maxSize: cfg.MaxPayloadBytes, wakeup: cfg.Wakeup, newID: cfg.NewID,
		opts: ferrystore.EnqueueOptions{SkipSequence: cfg.SkipSequence}}
	if o.maxSize == 0 {
		o.maxSize = DefaultMaxPayloadBytes
	}
	if o.maxSize < 0 {
		return nil, fmt.Errorf("%w: OutboxConfig.MaxPayloadBytes is negative", ErrInvalidConfig)
	}
	if o.newID == nil {
		o.newID = newUUIDv7
	}
	for i, h := range cfg.Hooks {
		eh, ok := h.(HookEnqueue)
		switch {
		case nilness.Nil(h):
			return nil, fmt.Errorf("%w: OutboxConfig.Hooks[%d] is nil", ErrInvalidConfig, i)
		case !ok:
			return nil, fmt.Errorf("%w: OutboxConfig.Hooks[%d] (%T) does not implement HookEnqueue: it would observe nothing",
				ErrInvalidConfig, i, h)
		}
		o.hooks = append(o.hooks, eh)
	}
	return o, nil
}

func newUUIDv7() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// EnqueueTx writes events to the outbox inside tx, the caller's open
// transaction, and returns their ids in order. The events become visible
// to relays when, and only if, tx commits: an event is never published for
// a business change that rolled back, and never lost for one that
// committed.
//
// Every event is validated before anything is written; on any error
// EnqueueTx returns without a usable result and the caller must roll tx
// back. Events of one aggregate get consecutive sequence numbers (unless
// SkipSequence); the sequence row stays locked until tx ends, which
// serialises enqueuers of the same aggregate, so that sequence order is the
// aggregate's commit order.
func (o *Outbox[TTx]) EnqueueTx(ctx context.Context, tx TTx, events ...Event) ([]string, error) {
	if len(events) == 0 {
		return nil, nil
	}
	rows := make([]Event, len(events))
	ids := make([]string, len(events))
	for i := range events {
		ev := events[i]
		if err := o.prepare(ctx, &ev); err != nil {
			return nil, fmt.Errorf("enqueue event %d (type %q): %w", i, events[i].Type, err)
		}
		rows[i], ids[i] = ev, ev.ID
	}
	if err := o.driver.Enqueue(ctx, o.driver.UnwrapTx(tx), rows, o.opts); err != nil {
		if errors.Is(err, ferrytype.ErrUndefinedTable) {
			t := o.driver.Table()
			err = ferrytype.Classed(fmt.Errorf("enqueue: outbox table %s (or %s_seq) does not exist: "+
				"run ferry migrate --table %s (or the store's Migrate): %w", t, t, t, err), ferrytype.ErrSchemaOutdated)
		}
		return nil, err
	}
	o.wakeup.Ring()
	return ids, nil
}

// Notify rings the outbox's Wakeup. EnqueueTx already rings it, before the
// caller commits; a relay that looked too early retries for a short while.
// Calling Notify right after Commit removes that guesswork.
func (o *Outbox[TTx]) Notify() { o.wakeup.Ring() }

// prepare validates ev, fills its id, copies its headers and runs the
// enqueue hooks.
func (o *Outbox[TTx]) prepare(ctx context.Context, ev *Event) error {
	switch {
	case ev.Type == "":
		return fmt.Errorf("%w: Type is empty", ErrInvalidEvent)
	case len(ev.Type) > maxTypeLen:
		return fmt.Errorf("%w: Type is longer than %d bytes", ErrInvalidEvent, maxTypeLen)
	case len(ev.ID) > maxIDLen:
		return fmt.Errorf("%w: ID is longer than %d bytes", ErrInvalidEvent, maxIDLen)
	case len(ev.AggregateType) > maxAggregateTypeLen:
		return fmt.Errorf("%w: AggregateType is longer than %d bytes", ErrInvalidEvent, maxAggregateTypeLen)
	case len(ev.AggregateID) > maxAggregateIDLen:
		return fmt.Errorf("%w: AggregateID is longer than %d bytes", ErrInvalidEvent, maxAggregateIDLen)
	case len(ev.Destination) > maxDestinationLen:
		return fmt.Errorf("%w: Destination is longer than %d bytes", ErrInvalidEvent, maxDestinationLen)
	case len(ev.Exchange) > maxDestinationLen:
		return fmt.Errorf("%w: Exchange is longer than %d bytes", ErrInvalidEvent, maxDestinationLen)
	case ev.Delay < 0:
		return fmt.Errorf("%w: Delay is negative", ErrInvalidEvent)
	case len(ev.Payload) > o.maxSize:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrPayloadTooLarge, len(ev.Payload), o.maxSize)
	case len(ev.Payload) == 0:
		return fmt.Errorf("%w: payload is empty", ErrInvalidPayload)
	case !json.Valid(ev.Payload):
		return ErrInvalidPayload
	}
	for k := range ev.Headers {
		if k == "" {
			return fmt.Errorf("%w: a header name is empty", ErrInvalidEvent)
		}
	}
	if ev.ID == "" {
		id, err := o.newID()
		if err != nil {
			return fmt.Errorf("generate event id: %w", err)
		}
		ev.ID = id
	}
	if len(o.hooks) > 0 {
		ev.Headers = maps.Clone(ev.Headers)
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		for _, h := range o.hooks {
			h.OnEnqueue(ctx, ev)
		}
	}
	return nil
}

// Store returns the outbox's store.
func (o *Outbox[TTx]) Store() ferrystore.Store { return o.driver }
