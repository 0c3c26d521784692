// Package ferrybroker defines the Publisher interface the relay publishes
// through, the header names every broker adapter uses for an event's
// metadata, and the consumer contract: the Consumer interface, Handler and
// Delivery, ConsumerStats, ConsumerOptions (the settings every consumer's
// config embeds), RedeliveryPolicy, the park headers and the consumer hooks
// (HookDelivered, HookHandleStart, HookHandled, HookSettled) through which
// ferryprom and ferryotel observe any broker's consumer. Every broker's
// consumer settles its deliveries through one Settler, which tells the
// broker what it decided through the delivery's Acknowledger. Adapters
// live in ferryamqp, ferrynats and ferrykafka (and ferrywatermill, for any
// Watermill subscriber); each runs the conformance suites in
// ferrybrokertest (Exercise for publishers, ExerciseConsumer for
// consumers).
package ferrybroker

import (
	"context"
	"strconv"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// Publisher publishes claimed outbox events to a broker.
type Publisher interface {
	// Publish publishes msgs and returns exactly one result per message,
	// in the same order. It returns when every message has an outcome;
	// when ctx ends first, every message still waiting gets
	// OutcomeUnknown. Publish never reports a message confirmed unless the
	// broker confirmed that very message, and never reports a message it
	// may have delivered as rejected: when in doubt, the outcome is
	// unknown. It is safe to call from several goroutines.
	Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult
	// Close releases the publisher's connections.
	Close() error
}

// Checker is implemented by publishers that can tell whether the broker
// is reachable, for readiness checks.
type Checker interface {
	Check(ctx context.Context) error
}

// Connectivity is implemented by publishers that know, without a round
// trip, whether a publish made now could reach the broker: ferryamqp's,
// ferrynats's and ferrykafka's. The relay stops claiming while Connected is false, so that
// an outage spends no event's attempts, and claims again as soon as it is
// true (it looks again every RelayConfig.PollInterval).
type Connectivity interface {
	// Connected reports whether the connection to the broker is up and the
	// broker accepts publishes on it: false while the connection is down
	// or reconnecting, and while RabbitMQ blocks it (a resource alarm).
	Connected() bool
	// Disconnected says why Connected is false, nil while it is true. The
	// error names no password.
	Disconnected() error
}

// Header names carrying an event's metadata on a broker message, next to the
// event's own headers (the trace context among them). The event id also
// travels in the broker's native id field: AMQP message_id, JetStream
// Nats-Msg-Id.
const (
	HeaderEventID       = "Ferry-Event-Id"
	HeaderEventType     = "Ferry-Event-Type"
	HeaderAggregateType = "Ferry-Aggregate-Type"
	HeaderAggregateID   = "Ferry-Aggregate-Id"
	HeaderSequence      = "Ferry-Aggregate-Seq"
	HeaderCreatedAt     = "Ferry-Created-At"
)

// MetadataHeaders returns the ferry headers for m. Adapters add them after
// the event's own headers, so an event cannot spoof them.
func MetadataHeaders(m *ferrytype.Message) [][2]string {
	h := [][2]string{
		{HeaderEventID, m.ID},
		{HeaderEventType, m.Type},
	}
	if m.AggregateID != "" {
		h = append(h,
			[2]string{HeaderAggregateType, m.AggregateType},
			[2]string{HeaderAggregateID, m.AggregateID},
			[2]string{HeaderSequence, strconv.FormatInt(m.Sequence, 10)})
	}
	if !m.CreatedAt.IsZero() {
		h = append(h, [2]string{HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	return h
}

// AllUnknown returns n unknown results caused by err.
func AllUnknown(n int, err error) []ferrytype.PublishResult {
	out := make([]ferrytype.PublishResult, n)
	for i := range out {
		out[i] = ferrytype.Unknown(err)
	}
	return out
}

// AllNotSent returns n unknown results of messages that never left the
// process, caused by err (ferrytype.NotSent).
func AllNotSent(n int, err error) []ferrytype.PublishResult {
	out := make([]ferrytype.PublishResult, n)
	for i := range out {
		out[i] = ferrytype.NotSent(err)
	}
	return out
}
