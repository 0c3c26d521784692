// Package ferrytest holds test helpers for users of ferry: an in-memory
// message broker (Broker) that a relay publishes to in a unit test, with
// ferry's in-memory database (ferrystore/ferrymem) as the outbox's store,
// so that a test of the code that enqueues events sees them published
// without a database server or a broker.
//
//	db := ferrymem.NewDB(nil)
//	store, _ := ferrymem.New(db, nil)
//	broker := ferrytest.NewBroker(nil)
//	relay, _ := ferry.NewRelay(store, broker, nil)
//	// ... the code under test enqueues events in a ferrymem transaction ...
//	relay.Drain(ctx)
//	msgs := broker.Messages("orders.paid") // what reached the broker, in order
//
// The broker behaves as the brokers ferry's adapters publish to, in the
// ways the relay can tell: it confirms a message it stored; it recognises
// a message id it stored within its duplicate window and confirms the
// republish as a duplicate without storing it again, as JetStream does
// with Nats-Msg-Id (RelayStats.Duplicates counts those); it returns a
// message whose route no queue takes (BrokerConfig.Routes); it reports
// its connection (ferrybroker.Connectivity), which a test takes down with
// Disconnect to stage an outage; and a test may script a message's fate
// (SetFault): a lost confirm, a message lost on the way, one that never
// left, a rejection, a return. It passes the publisher conformance suite
// (ferrybrokertest.Exercise) that every broker adapter passes.
//
// It is a fake: nothing is durable, there is no consumer side, and it
// proves none of ferry's guarantees, which ferry's own tests show on real
// databases and brokers. It imports the standard library and ferry's core
// only.
package ferrytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// DefaultDuplicateWindow is how long a Broker remembers a message id by
// default: two minutes, JetStream's default duplicate window.
const DefaultDuplicateWindow = 2 * time.Minute

// BrokerConfig configures a Broker. The zero value (or nil) uses the
// defaults.
type BrokerConfig struct {
	// DuplicateWindow is how long the broker remembers the id of a
	// message it stored: a publish of that id within the window is
	// confirmed as a duplicate (PublishResult.Duplicate) and not stored
	// again, as JetStream does. Default DefaultDuplicateWindow; negative
	// turns detection off, so that every publish is stored, as on
	// RabbitMQ and Kafka.
	DuplicateWindow time.Duration
	// Routes reports whether a queue takes messages published to route
	// (a message's destination, or its type when it has none). A message
	// to a route it refuses is returned (ferrytype.OutcomeReturned) and not
	// stored, as an unroutable AMQP message or a subject no JetStream
	// stream takes. It must be safe to call from several goroutines.
	// Default: every route is taken.
	Routes func(route string) bool
	// Clock is the broker's clock, which stamps stored messages and
	// measures the duplicate window. It must be safe to call from several
	// goroutines. Default time.Now.
	Clock func() time.Time
}

// Fault is the scripted fate of one published message (Broker.SetFault),
// instead of what the broker would do with it.
type Fault int

const (
	// FaultNone publishes the message as the broker would: stored and
	// confirmed, a duplicate, or returned.
	FaultNone Fault = iota
	// FaultLoseConfirm lets the broker take the message (stored, or
	// recognised as a duplicate) and loses its confirm: the outcome is
	// unknown. A republish of it within the window is a duplicate.
	FaultLoseConfirm
	// FaultLoseMessage loses the message on its way, after it left the
	// publisher: not stored, and the outcome is unknown, as when a
	// connection breaks with the publish written.
	FaultLoseMessage
	// FaultNotSent fails the message before it leaves the publisher: not
	// stored, and the outcome is unknown of the not-sent class
	// (ferrytype.NotSent), which spends no attempt.
	FaultNotSent
	// FaultReject has the broker refuse the message: not stored,
	// ferrytype.OutcomeRejected.
	FaultReject
	// FaultReturn has the broker route the message nowhere: not stored,
	// ferrytype.OutcomeReturned.
	FaultReturn
)

// String returns the fault's name.
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultLoseConfirm:
		return "lose confirm"
	case FaultLoseMessage:
		return "lose message"
	case FaultNotSent:
		return "not sent"
	case FaultReject:
		return "reject"
	case FaultReturn:
		return "return"
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// ErrInjected is in the error of every outcome a Fault decided.
var ErrInjected = errors.New("ferrytest: injected fault")

// ErrDisconnected is the cause Disconnected reports for an outage a test
// staged with Disconnect(nil).
var ErrDisconnected = errors.New("ferrytest: broker unreachable")

// Message is a message the broker stored.
type Message struct {
	// Route is where it was published: its destination, or its type
	// when it has none.
	Route string
	// Message is the message as the publisher handed it over. Its ID is
	// the outbox event's id.
	ferrytype.Message
	// Stored is when the broker stored it, by its clock.
	Stored time.Time
}

// Broker is an in-memory message broker and the publisher to it: a
// ferrybroker.Publisher, ferrybroker.Connectivity and ferrybroker.Checker.
// Its zero value is not usable; NewBroker makes one. It is safe for
// concurrent use; any number of relays may publish to it.
type Broker struct {
	window time.Duration
	routes func(string) bool
	clock  func() time.Time

	mu     sync.Mutex
	stored []Message
	seen   map[string]time.Time // id -> when it was stored
	fault  func(ferrytype.Message) Fault
	down   error // the outage's cause while disconnected
	closed bool
	// changed is closed, and replaced, whenever a message is stored.
	changed chan struct{}
}

var (
	_ ferrybroker.Publisher    = (*Broker)(nil)
	_ ferrybroker.Connectivity = (*Broker)(nil)
	_ ferrybroker.Checker      = (*Broker)(nil)
)

// NewBroker returns an empty broker, connected.
func NewBroker(cfg *BrokerConfig) *Broker {
	var c BrokerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return &Broker{window: c.DuplicateWindow, routes: c.Routes, clock: c.Clock,
		seen: map[string]time.Time{}, changed: make(chan struct{})}
}

// Publish publishes msgs, one outcome per message in order: confirmed
// once stored (a duplicate within the window: confirmed, Duplicate set,
// not stored again); returned when BrokerConfig.Routes refuses its route;
// what SetFault scripted; not sent while the broker is disconnected or
// closed. A message that comes after ctx ended is unknown.
func (b *Broker) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	b.mu.Lock()
	defer b.mu.Unlock()
	stored := false
	for i := range msgs {
		if err := ctx.Err(); err != nil {
			res[i] = ferrytype.Unknown(fmt.Errorf("ferrytest: publish: %w", err))
			continue
		}
		var ok bool
		res[i], ok = b.publish(msgs[i])
		stored = stored || ok
	}
	if stored {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	return res
}

// publish decides one message's outcome, and whether it was stored.
func (b *Broker) publish(m ferrytype.Message) (ferrytype.PublishResult, bool) {
	switch {
	case b.closed:
		return ferrytype.NotSent(fmt.Errorf("ferrytest: publish: %w", ferrytype.ErrClosed)), false
	case b.down != nil:
		return ferrytype.NotSent(fmt.Errorf("ferrytest: publish: %w", b.down)), false
	}
	fault := FaultNone
	if b.fault != nil {
		fault = b.fault(m)
	}
	injected := func(what string) error { return fmt.Errorf("%w: %s", ErrInjected, what) }
	switch fault {
	case FaultLoseMessage:
		return ferrytype.Unknown(injected("message lost on its way")), false
	case FaultNotSent:
		return ferrytype.NotSent(injected("not sent")), false
	case FaultReject:
		return ferrytype.Rejected(injected("rejected")), false
	case FaultReturn:
		return ferrytype.Returned(injected("returned")), false
	}
	route := m.Route()
	if b.routes != nil && !b.routes(route) {
		return ferrytype.Returned(fmt.Errorf("ferrytest: no queue takes route %q", route)), false
	}
	now := b.clock()
	at, dup := b.seen[m.ID]
	dup = dup && b.window > 0 && now.Sub(at) < b.window
	if !dup {
		m.Headers = maps.Clone(m.Headers)
		m.Payload = append([]byte(nil), m.Payload...)
		b.stored = append(b.stored, Message{Route: route, Message: m, Stored: now})
		if b.window > 0 {
			b.seen[m.ID] = now
		}
	}
	if fault == FaultLoseConfirm {
		return ferrytype.Unknown(injected("confirm lost")), !dup
	}
	return ferrytype.PublishResult{Outcome: ferrytype.OutcomeConfirmed, Duplicate: dup}, !dup
}

// Messages returns the messages stored on route, in the order the broker
// stored them; every stored message when route is empty.
func (b *Broker) Messages(route string) []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.messages(route)
}

func (b *Broker) messages(route string) []Message {
	var out []Message
	for _, m := range b.stored {
		if route == "" || m.Route == route {
			out = append(out, m)
		}
	}
	return out
}

// Wait waits until at least n messages are stored on route (every route
// when empty) and returns them all, in order; or returns ctx's error with
// those stored so far. It waits on the broker's signal, never by polling.
func (b *Broker) Wait(ctx context.Context, route string, n int) ([]Message, error) {
	for {
		b.mu.Lock()
		msgs, changed := b.messages(route), b.changed
		b.mu.Unlock()
		if len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			where := "on route " + route
			if route == "" {
				where = "in all"
			}
			return msgs, fmt.Errorf("ferrytest: %d of %d messages stored %s: %w", len(msgs), n, where, ctx.Err())
		}
	}
}

// SetFault scripts the fate of each message published from now on: f
// returns the Fault of a message (FaultNone for the broker's own
// outcome). It must be safe to call from several goroutines; it is called
// with the broker's lock held, so it must not call the broker. Nil
// removes the script.
func (b *Broker) SetFault(f func(m ferrytype.Message) Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fault = f
}

// Disconnect takes the broker out of reach until Reconnect, as an outage
// would: Connected reports false, Disconnected returns cause
// (ErrDisconnected when nil), Check fails, and every publish is not sent
// (ferrytype.NotSent), as the publishers of ferry's adapters report a
// publish made during an outage. A relay claims nothing meanwhile.
func (b *Broker) Disconnect(cause error) {
	if cause == nil {
		cause = ErrDisconnected
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = cause
}

// Reconnect ends the outage Disconnect began.
func (b *Broker) Reconnect() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = nil
}

// Connected reports whether a publish made now could reach the broker:
// false while it is disconnected, and once it is closed.
func (b *Broker) Connected() bool {
	return b.Disconnected() == nil
}

// Disconnected says why Connected is false; nil while it is true.
func (b *Broker) Disconnected() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("ferrytest: %w", ferrytype.ErrClosed)
	case b.down != nil:
		return b.down
	}
	return nil
}

// Check returns Disconnected's error: nil while the broker is reachable.
func (b *Broker) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.Disconnected()
}

// Close closes the publisher: later publishes are not sent. The messages
// stored stay readable. Closing twice is safe.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}
