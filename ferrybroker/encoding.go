package ferrybroker

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/ferrytype"
)

// Protocol names how a broker carries a message's metadata: the protocol
// binding an Encoding writes and a Decoding reads.
type Protocol string

// The protocols of ferry's publishers and consumers.
const (
	// ProtocolAMQP is RabbitMQ's AMQP 0-9-1: a headers table, and the
	// content type in the message's content_type property.
	ProtocolAMQP Protocol = "amqp"
	// ProtocolKafka is Kafka: record headers, the content type among them.
	ProtocolKafka Protocol = "kafka"
	// ProtocolNATS is NATS JetStream: message headers, the content type
	// among them.
	ProtocolNATS Protocol = "nats"
)

// Encoded is an event written as a broker message by an Encoding.
type Encoded struct {
	// Headers are the message's headers, in the order the broker is to
	// carry them. On Kafka and NATS they hold the content type, in the
	// header the encoding's binding names.
	Headers [][2]string
	// ContentType is the message's content type. The AMQP publisher sets
	// it as the message's content_type property; the others ignore it.
	ContentType string
	// Body is the message's body.
	Body []byte
}

// An Encoding writes an event as a broker message, in place of ferry's
// own form (the event's headers overlaid with MetadataHeaders, the payload
// as the body). A publisher whose Encoding is nil writes ferry's form.
// ferrycloudevents.Encoding writes CloudEvents.
//
// Every publisher still sets the broker's own id field to the event id
// (AMQP message_id, JetStream Nats-Msg-Id), which its deduplication reads,
// and its own routing (routing key, subject, topic, record key): an
// Encoding writes the headers and the body.
type Encoding interface {
	// Encode returns m as a message of protocol p. An error means that m
	// cannot be written in this encoding: the publisher reports the event
	// rejected (ferrytype.OutcomeRejected) with the error, and sends
	// nothing.
	Encode(m *ferrytype.Message, p Protocol) (Encoded, error)
}

// A Decoding reads a delivery written in another form than ferry's own:
// it sets the Delivery's metadata (MessageID, Type, AggregateType,
// AggregateID, Sequence) and, when the form wraps the event, its Payload.
// A consumer whose ConsumerOptions.Decoding is nil reads ferry's headers
// (Delivery.FillFromHeaders). ferrycloudevents.Decoding reads CloudEvents
// and ferry's form both.
type Decoding interface {
	// Decode fills d, whose Route, Payload (the message body) and Headers
	// the consumer has set, from a message of protocol p whose content
	// type is contentType. It returns the content type of d.Payload once
	// decoded, which the consumer checks it against (CheckDelivery). An
	// error parks the delivery as malformed without running the handler.
	Decode(d *Delivery, contentType string, p Protocol) (payloadType string, err error)
}

// Decode fills d with dec, or from ferry's headers when dec is nil (the
// payload's content type is then contentType). A consumer calls it once
// it has set d's Route, Payload and Headers. An error wraps ErrMalformed.
func Decode(dec Decoding, d *Delivery, contentType string, p Protocol) (string, error) {
	if dec == nil {
		d.FillFromHeaders()
		return contentType, nil
	}
	ct, err := dec.Decode(d, contentType, p)
	if err != nil {
		return ct, malformed(err)
	}
	return ct, nil
}

// malformed wraps err in ErrMalformed, unless it wraps it already.
func malformed(err error) error {
	if errors.Is(err, ErrMalformed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}

// FerryForm is m in ferry's own form for protocol p, as a publisher with no
// Encoding writes it: the event's headers, sorted by name, less any that
// would pass for one of ferry's, then MetadataHeaders; the payload as the
// body; on AMQP, the content type application/json. An Encoding that
// leaves some events in ferry's form returns it.
func FerryForm(m *ferrytype.Message, p Protocol) Encoded {
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if !IsMetadataHeader(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	meta := MetadataHeaders(m)
	h := make([][2]string, 0, len(names)+len(meta))
	for _, k := range names {
		h = append(h, [2]string{k, m.Headers[k]})
	}
	h = append(h, meta...)
	e := Encoded{Headers: h, Body: m.Payload}
	if p == ProtocolAMQP {
		e.ContentType = "application/json"
	}
	return e
}

var metadataHeaders = []string{HeaderEventID, HeaderEventType, HeaderAggregateType, HeaderAggregateID,
	HeaderSequence, HeaderCreatedAt}

// IsMetadataHeader reports whether k names one of MetadataHeaders, in any
// case: a header of the event's own that would pass for ferry's.
func IsMetadataHeader(k string) bool {
	return slices.ContainsFunc(metadataHeaders, func(h string) bool { return strings.EqualFold(h, k) })
}
