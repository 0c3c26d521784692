package ferrywatermill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
)

// OutboxPublisher is a Watermill publisher that writes messages to ferry's
// outbox inside the caller's transaction: a Watermill application
// publishes in its business transaction, as with watermill-sql's
// publisher, and ferry's relay delivers the messages once, and only if,
// the transaction commits. Make one per transaction; it holds no resources.
//
// Each message becomes an event as Event describes (its UUID the event id,
// its topic the destination); Publish writes all of a call's messages or,
// on an error, none that the caller may keep: roll the transaction back.
//
// The event id is the outbox's key, and the id a republished event keeps
// so that consumers can deduplicate by it: one UUID is one event, with one
// topic. A message whose UUID is already an event id in the outbox
// (written before, to this topic or another, committed or earlier in this
// transaction), or is twice in one call, fails the call with an error
// wrapping ferrytype.ErrDuplicate: roll the transaction back, as after any
// error. An event committed before is left as it was, to be relayed once,
// to its own topic. message.Copy keeps the UUID: a copy for a second topic
// needs a UUID of its own (an empty one takes the outbox's), with the
// original in its metadata if consumers need it.
type OutboxPublisher[TTx any] struct {
	outbox *ferry.Outbox[TTx]
	tx     TTx
	cfg    OutboxPublisherConfig
	closed bool
}

// OutboxPublisherConfig configures an OutboxPublisher. A nil config uses
// the defaults.
type OutboxPublisherConfig struct {
	// WrapPayloads stores a payload that is not JSON (protobuf, text, an
	// empty one) as a JSON string of its base64 encoding, marked by the
	// header MetadataPayloadEncoding; the Publisher (the relay's side)
	// and the Consumer unwrap it, so Watermill subscribers get the bytes
	// that were published. Default false: such a payload is refused with
	// ferry.ErrInvalidPayload, since the outbox stores JSON.
	WrapPayloads bool
}

var _ message.Publisher = (*OutboxPublisher[any])(nil)

// NewOutboxPublisher returns a Watermill publisher writing to outbox in tx.
func NewOutboxPublisher[TTx any](outbox *ferry.Outbox[TTx], tx TTx, cfg *OutboxPublisherConfig) (*OutboxPublisher[TTx], error) {
	if outbox == nil {
		return nil, fmt.Errorf("%w: ferrywatermill.NewOutboxPublisher: the outbox is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &OutboxPublisherConfig{}
	}
	return &OutboxPublisher[TTx]{outbox: outbox, tx: tx, cfg: *cfg}, nil
}

// Publish writes messages to the outbox in the publisher's transaction,
// under the context of the first message. A message whose payload is not
// JSON, or whose fields exceed the outbox's limits, fails the whole call
// before anything is written.
func (p *OutboxPublisher[TTx]) Publish(topic string, messages ...*message.Message) error {
	if p.closed {
		return fmt.Errorf("ferrywatermill: outbox publisher: %w", ferrytype.ErrClosed)
	}
	if len(messages) == 0 {
		return nil
	}
	if topic == "" {
		return fmt.Errorf("%w: the topic is empty", ferrytype.ErrInvalidEvent)
	}
	events := make([]ferry.Event, len(messages))
	ctx := context.Background()
	for i, msg := range messages {
		if msg == nil {
			return fmt.Errorf("%w: message %d is nil", ferrytype.ErrInvalidEvent, i)
		}
		if i == 0 {
			ctx = msg.Context()
		}
		events[i] = Event(topic, msg)
		if p.cfg.WrapPayloads && !json.Valid(events[i].Payload) {
			events[i].Payload = wrap(events[i].Payload)
			if events[i].Headers == nil {
				events[i].Headers = map[string]string{}
			}
			events[i].Headers[MetadataPayloadEncoding] = PayloadBase64
		}
	}
	ids, err := p.outbox.EnqueueTx(ctx, p.tx, events...)
	if err != nil {
		switch {
		case errors.Is(err, ferrytype.ErrInvalidPayload):
			err = fmt.Errorf("%w (an event's payload is JSON: marshal the message as JSON, or set OutboxPublisherConfig.WrapPayloads)", err)
		case errors.Is(err, ferrytype.ErrDuplicate):
			err = fmt.Errorf("%w (a message's UUID is its event id, the outbox's key: a UUID already in the outbox, "+
				"or twice in the call, is refused; publish a copy to another topic under a UUID of its own)", err)
		}
		return fmt.Errorf("ferrywatermill: write to the outbox: %w", err)
	}
	// A message without a UUID takes the id the outbox gave its event.
	for i, msg := range messages {
		if msg.UUID == "" {
			msg.UUID = ids[i]
		}
	}
	return nil
}

// Close makes later Publish calls fail; the transaction is the caller's to
// commit or roll back.
func (p *OutboxPublisher[TTx]) Close() error {
	p.closed = true
	return nil
}
