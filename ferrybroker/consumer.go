package ferrybroker

import (
	"context"
	"strconv"
	"time"
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
// delivery limit (see RedeliveryPolicy). A handler must never return nil before
// its effect is committed: the ack lets the broker forget the message.
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
	// A header that is not a sequence (text, or out of int64's range,
	// where ParseInt would clamp) leaves it 0, the value of "none".
	d.Sequence = 0
	if n, err := strconv.ParseInt(d.Headers[HeaderSequence], 10, 64); err == nil {
		d.Sequence = n
	}
}

// WithoutContext adapts fn, a handler that takes no context, to a Handler
// (which is itself a function type: any func(ctx, d) error is one). The
// context the consumer passes is dropped, so fn is not cut off when its
// handler timeout passes or Stop stops waiting: use it only for handlers
// that return quickly on their own.
func WithoutContext(fn func(d *Delivery) error) Handler {
	return func(_ context.Context, d *Delivery) error { return fn(d) }
}

// Consumer is what every broker's consumer (ferryamqp.Consumer,
// ferrynats.Consumer, ferrykafka.Consumer) does: it receives deliveries,
// runs a Handler for each with at most a configured number of handlers at
// once, and settles each delivery exactly once (Kafka, which acks by
// committing an offset per partition, reads "acked" as "the offset past it
// committed" and retries in place: see ferrykafka):
//
//   - acked, only after the handler returned nil;
//   - parked, when the handler returned an error wrapping
//     ferrytype.ErrPoison, when the message is malformed, or when a
//     transient error came on delivery RedeliveryPolicy.MaxDeliveries: a copy
//     with the park headers (HeaderParkReason and the others) is stored
//     where the consumer parks, and only then is the original settled;
//   - retried, after a transient error: the broker delivers it again after
//     RedeliveryPolicy's delay;
//   - left, when the consumer did not decide (it is stopping, the handler
//     was cut off, a fault point fired, the ack could not be sent): the
//     broker delivers it again.
//
// Acks are never cumulative across a delivery still in flight.
type Consumer interface {
	// Start connects (or binds to the client it was given), checks or
	// declares what it consumes and starts taking deliveries; ctx bounds
	// the start only. Starting a stopped consumer returns
	// ferrytype.ErrClosed.
	Start(ctx context.Context) error
	// Stop stops taking deliveries, lets the handlers in flight finish and
	// acks those that returned nil; deliveries taken but not started go
	// back to the broker. If ctx ends first, the handlers' contexts are
	// cancelled and their deliveries left to the broker; Stop then returns
	// ctx's error. Stopping twice, or before Start, is safe.
	Stop(ctx context.Context) error
	// Run starts the consumer, runs it until ctx ends, then stops it,
	// giving the handlers in flight the consumer's shutdown timeout.
	Run(ctx context.Context) error
	// Stats returns the consumer's counters.
	Stats() ConsumerStats
}

// ConsumerStats counts what a consumer did since it was created. Every
// delivered message is settled once: once the consumer is idle,
// Delivered == Acked + Retried + Parked + Left, and InFlight is 0.
type ConsumerStats struct {
	// Delivered counts deliveries taken from the broker.
	Delivered int64
	// Handled counts handler calls that returned (nil or an error).
	Handled int64
	// Acked counts deliveries acked after their handler returned nil.
	Acked int64
	// Retried counts deliveries handed back to the broker, after a
	// transient failure (or a failed park), for a later delivery.
	Retried int64
	// Parked counts deliveries whose copy was stored where the consumer
	// parks, after which the original was settled.
	Parked int64
	// ParkFailed counts attempts to park that failed; the delivery is
	// retried instead (and counted in Retried or Left).
	ParkFailed int64
	// Left counts deliveries the consumer did not settle (stopping, cut
	// off, a fault point, a failed ack): the broker delivers them again.
	Left int64
	// InFlight is the number of deliveries taken and not yet settled:
	// handlers running, parks in progress, retries waiting for their
	// delay.
	InFlight int64
	// Rewinds counts the partitions reset to an earlier offset after the
	// brokers lost records (Kafka only: see Rewind); Rewound, the records
	// those resets deliver again.
	Rewinds, Rewound int64
}

// Headers a consumer sets on the parked copy of a message, next to the
// original's own headers (which are kept). Values are strings.
const (
	// HeaderParkReason says why the message was parked: the handler's
	// poison error, the reason it is malformed, or the delivery limit
	// with the last error.
	HeaderParkReason = "Ferry-Park-Reason"
	// HeaderParkedAt is when it was parked (RFC 3339, UTC).
	HeaderParkedAt = "Ferry-Parked-At"
	// HeaderParkRoute is the routing key or subject the original was
	// published to: republish it there once the cause is fixed.
	HeaderParkRoute = "Ferry-Park-Route"
	// HeaderParkSource is the queue or stream the original was consumed
	// from.
	HeaderParkSource = "Ferry-Park-Source"
	// HeaderParkDeliveryCount is the delivery count when it was parked, in
	// decimal (0: unknown).
	HeaderParkDeliveryCount = "Ferry-Park-Delivery-Count"
)

// maxParkReason bounds the bytes of HeaderParkReason: a longer reason is
// cut and ends with "...".
const maxParkReason = 4096

// ParkHeaders returns the park headers, in this order, of the copy of
// delivery d parked for reason: HeaderParkReason, HeaderParkedAt (now),
// HeaderParkRoute (route, where the original was published to),
// HeaderParkSource (source, what it was consumed from) and
// HeaderParkDeliveryCount. Every consumer's Acknowledger sets them, next
// to the original's headers and its broker's own.
func ParkHeaders(reason error, d *Delivery, route, source string) [][2]string {
	text := reason.Error()
	if len(text) > maxParkReason {
		text = text[:maxParkReason] + "..."
	}
	return [][2]string{
		{HeaderParkReason, text},
		{HeaderParkedAt, time.Now().UTC().Format(time.RFC3339Nano)},
		{HeaderParkRoute, route},
		{HeaderParkSource, source},
		{HeaderParkDeliveryCount, strconv.Itoa(d.DeliveryCount)},
	}
}

// Headers a replay tool (ferryamqp.ReplayParked) sets on a parked message
// it puts back into the queue it was parked from, next to the message's own
// headers and the park headers (which are kept). Values are strings.
const (
	// HeaderReplayCount is how many times the message was replayed from a
	// parking queue, in decimal: 1 after the first replay.
	HeaderReplayCount = "Ferry-Replay-Count"
	// HeaderReplayedAt is when it was last replayed (RFC 3339, UTC).
	HeaderReplayedAt = "Ferry-Replayed-At"
)
