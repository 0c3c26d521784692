package ferrytype

import (
	"encoding/json"
	"time"
)

// Status is the state of an outbox row.
type Status string

// The states an outbox row moves through. NEW rows wait to be claimed;
// SENDING rows are leased to one relay; SENT rows were confirmed by the broker
// (which says nothing of downstream processing); DEAD rows exhausted their
// retries and wait for a person: `ferry dead retry` makes them NEW again,
// `ferry dead discard` makes them DISCARDED. A DISCARDED row is never
// published; it stays as the record of that decision (when, and why), and
// in ordered mode it no longer holds back the later events of its
// aggregate. Transitions lists every change of status and what makes it.
const (
	StatusNew       Status = "NEW"
	StatusSending   Status = "SENDING"
	StatusSent      Status = "SENT"
	StatusDead      Status = "DEAD"
	StatusDiscarded Status = "DISCARDED"
)

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	for _, v := range [...]Status{StatusNew, StatusSending, StatusSent, StatusDead, StatusDiscarded} {
		if s == v {
			return true
		}
	}
	return false
}

// Event is a business event written to the outbox inside the caller's
// transaction.
type Event struct {
	// ID is the stable event id. It travels as the broker message id and is
	// never regenerated. Empty means: generate a UUIDv7 once, at enqueue.
	ID string
	// AggregateType and AggregateID name the entity the event belongs to
	// ("order", "42"). Events of one aggregate get consecutive sequence
	// numbers in enqueue order; an event without an AggregateID gets
	// sequence 0 and takes no part in per-aggregate ordering.
	AggregateType string
	AggregateID   string
	// Type is the event type ("OrderPaid"). Required.
	Type string
	// Payload is the event body. It must be valid JSON.
	Payload json.RawMessage
	// Headers are string headers carried to the broker message. The trace
	// context is added here at enqueue by the outbox's hooks.
	Headers map[string]string
	// Destination is the topic, NATS subject or AMQP routing key. Empty
	// means the event's Type.
	Destination string
	// Exchange is the AMQP exchange; other brokers ignore it. Empty means
	// the publisher's default exchange.
	Exchange string
	// Delay postpones the first publish attempt, measured on the database
	// clock.
	Delay time.Duration
}

// Message is an event claimed from the outbox and handed to a publisher.
type Message struct {
	ID            string
	AggregateType string
	AggregateID   string
	// Sequence is the event's position within its aggregate, starting at 1;
	// 0 for events written without an aggregate sequence.
	Sequence    int64
	Type        string
	Payload     []byte
	Headers     map[string]string
	Destination string
	Exchange    string
	// Attempt counts publish attempts including this one.
	Attempt   int
	CreatedAt time.Time
}

// Route returns the destination the message is published to: Destination,
// or the event type when none was given.
func (m *Message) Route() string {
	if m.Destination != "" {
		return m.Destination
	}
	return m.Type
}
