package ferrybroker

import (
	"context"
	"strconv"
)

// Delivery is one message a consumer received from a broker.
type Delivery struct {
	// MessageID is the broker message id, which for events from a ferry
	// relay is the outbox event id. A consumer must not deduplicate by it
	// alone: a re-wrapped event may carry a new id for the same business
	// operation (see ferry's Inbox).
	MessageID string
	// Type, AggregateType, AggregateID and Sequence come from the ferry
	// headers (see MetadataHeaders); empty or zero when absent.
	Type          string
	AggregateType string
	AggregateID   string
	Sequence      int64
	// Route is the routing key or subject the message was published to.
	Route   string
	Payload []byte
	// Headers holds every string header of the message.
	Headers map[string]string
	// Redelivered reports that the broker delivered this message before.
	Redelivered bool
	// DeliveryCount is the broker's count of deliveries of this message,
	// this one included, when the broker keeps one (quorum queues,
	// JetStream); 0 when unknown.
	DeliveryCount int
}

// Handler runs the effect of one delivery. Returning nil means the effect
// is durable (committed, or found already done): the consumer acks the
// delivery. An error wrapping ferrytype.ErrPoison parks the delivery at
// once with the error as its reason; any other error is transient: the
// delivery is retried after a delay and parked only after the consumer's
// delivery limit. A handler must never return nil before its effect is
// committed: the ack lets the broker forget the message.
type Handler func(ctx context.Context, d *Delivery) error

// FillFromHeaders sets the ferry metadata fields of d from d.Headers.
func (d *Delivery) FillFromHeaders() {
	if d.MessageID == "" {
		d.MessageID = d.Headers[HeaderEventID]
	}
	if d.Type == "" {
		d.Type = d.Headers[HeaderEventType]
	}
	d.AggregateType = d.Headers[HeaderAggregateType]
	d.AggregateID = d.Headers[HeaderAggregateID]
	d.Sequence, _ = strconv.ParseInt(d.Headers[HeaderSequence], 10, 64)
}

// HandlerFunc adapts a function that ignores the context.
func HandlerFunc(fn func(d *Delivery) error) Handler {
	return func(_ context.Context, d *Delivery) error { return fn(d) }
}

// Named fault points of consumers (see the consumers' FaultPoint configs).
const (
	// FaultConsumerAfterHandle is reached after the handler returned nil —
	// its transaction committed — and before the delivery is acked. A
	// crash here leaves a committed effect whose delivery comes again: the
	// inbox must report it as a duplicate.
	FaultConsumerAfterHandle = "consumer.after-handle"
)
