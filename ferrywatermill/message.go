package ferrywatermill

import (
	"encoding/base64"
	"encoding/json"
	"maps"

	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// MetadataName is the metadata key under which Watermill's CQRS marshalers
// name an event; an event written through the OutboxPublisher without a
// ferrybroker.HeaderEventType takes its type from it.
const MetadataName = "name"

// MetadataPayloadEncoding marks an event whose payload the OutboxPublisher
// wrapped (OutboxPublisherConfig.WrapPayloads): its value is
// PayloadBase64, and the event's payload is a JSON string holding the
// message's payload in standard base64. Message and Delivery unwrap such
// payloads and drop the mark.
const MetadataPayloadEncoding = "Ferry-Payload-Encoding"

// PayloadBase64 is the value of MetadataPayloadEncoding.
const PayloadBase64 = "base64"

// wrap returns payload as a JSON string of its base64 encoding.
func wrap(payload []byte) []byte {
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(payload))
	return b
}

// unwrap returns the payload a wrapped event carries.
func unwrap(payload []byte) ([]byte, error) {
	var s string
	if err := json.Unmarshal(payload, &s); err != nil {
		return nil, fmt.Errorf("a payload marked %s=%s is not a JSON string: %w", MetadataPayloadEncoding, PayloadBase64, err)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("a payload marked %s=%s is not base64: %w", MetadataPayloadEncoding, PayloadBase64, err)
	}
	return b, nil
}

// Message returns the Watermill message a relay publishes for m: its UUID
// is the event id, its payload the event's (unwrapped, when the
// OutboxPublisher wrapped it), its metadata the event's headers followed
// by the ferry headers (ferrybroker.MetadataHeaders), which win over an
// event header of the same name. It fails only on a payload marked
// wrapped that does not unwrap.
func Message(m *ferrytype.Message) (*message.Message, error) {
	payload := []byte(m.Payload)
	if m.Headers[MetadataPayloadEncoding] == PayloadBase64 {
		var err error
		if payload, err = unwrap(payload); err != nil {
			return nil, fmt.Errorf("event %s: %w", m.ID, err)
		}
	}
	msg := message.NewMessage(m.ID, payload)
	msg.Metadata = make(message.Metadata, len(m.Headers)+6)
	maps.Copy(msg.Metadata, m.Headers)
	delete(msg.Metadata, MetadataPayloadEncoding)
	for _, h := range ferrybroker.MetadataHeaders(m) {
		msg.Metadata[h[0]] = h[1]
	}
	return msg, nil
}

// Event returns the ferry event the OutboxPublisher writes for msg,
// published to topic:
//
//   - ID: msg.UUID (an empty one gets the outbox's generated id);
//   - Type: the metadata ferrybroker.HeaderEventType, else MetadataName,
//     else the topic;
//   - AggregateType, AggregateID: the metadata
//     ferrybroker.HeaderAggregateType and HeaderAggregateID, for ordered
//     relaying and the aggregate's sequence;
//   - Destination: the topic;
//   - Payload: msg.Payload, which must be JSON (the outbox refuses anything
//     else with ferry.ErrInvalidPayload);
//   - Headers: the rest of the metadata.
func Event(topic string, msg *message.Message) ferry.Event {
	ev := ferry.Event{
		ID:            msg.UUID,
		Type:          msg.Metadata.Get(ferrybroker.HeaderEventType),
		AggregateType: msg.Metadata.Get(ferrybroker.HeaderAggregateType),
		AggregateID:   msg.Metadata.Get(ferrybroker.HeaderAggregateID),
		Destination:   topic,
		Payload:       []byte(msg.Payload),
	}
	if ev.Type == "" {
		ev.Type = msg.Metadata.Get(MetadataName)
	}
	if ev.Type == "" {
		ev.Type = topic
	}
	for k, v := range msg.Metadata {
		if isFerryHeader(k) {
			continue
		}
		if ev.Headers == nil {
			ev.Headers = make(map[string]string, len(msg.Metadata))
		}
		ev.Headers[k] = v
	}
	return ev
}

// isFerryHeader reports the metadata keys ferry sets itself: the relay
// writes them from the event's columns, so they are not stored as headers.
func isFerryHeader(k string) bool {
	switch k {
	case ferrybroker.HeaderEventID, ferrybroker.HeaderEventType, ferrybroker.HeaderAggregateType,
		ferrybroker.HeaderAggregateID, ferrybroker.HeaderSequence, ferrybroker.HeaderCreatedAt:
		return true
	}
	return false
}

// Delivery returns the delivery a ferry handler sees for msg, consumed from
// topic: MessageID is msg.UUID, else the metadata ferrybroker.HeaderEventID;
// Headers is the metadata; the ferry fields come from the ferry headers; a
// payload the OutboxPublisher wrapped, relayed by a publisher that does
// not unwrap it (ferryamqp, say), is unwrapped. Redelivered and
// DeliveryCount are the consumer's to set. An error (a payload marked
// wrapped that does not unwrap) makes the message malformed.
func Delivery(topic string, msg *message.Message) (*ferrybroker.Delivery, error) {
	d, _, err := delivery(topic, msg)
	return d, err
}

// delivery is Delivery, with the content type a consumer checks the
// payload against: the metadata Content-Type, or for an unwrapped payload
// application/octet-stream (it is not JSON).
func delivery(topic string, msg *message.Message) (*ferrybroker.Delivery, string, error) {
	d := &ferrybroker.Delivery{MessageID: msg.UUID, Route: topic, Payload: []byte(msg.Payload),
		Headers: maps.Clone(map[string]string(msg.Metadata))}
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	d.FillFromHeaders()
	ct := d.Headers["Content-Type"]
	if d.Headers[MetadataPayloadEncoding] == PayloadBase64 {
		p, err := unwrap(d.Payload)
		if err != nil {
			return d, ct, fmt.Errorf("%w: %w", ferrybroker.ErrMalformed, err)
		}
		d.Payload = p
		delete(d.Headers, MetadataPayloadEncoding)
		if ct == "" {
			ct = "application/octet-stream"
		}
	}
	return d, ct, nil
}
