package ferrycloudevents

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// Mode is how an event travels: as a CloudEvent in binary or structured
// content mode, or in ferry's own form.
type Mode string

// The modes of Config.
const (
	// Binary puts the attributes in the message's headers and the payload,
	// unchanged, in its body.
	Binary Mode = "binary"
	// Structured puts the whole CloudEvent, as JSON
	// (application/cloudevents+json), in the body.
	Structured Mode = "structured"
	// Ferry leaves the event in ferry's own form (ferrybroker.FerryForm):
	// for the destinations whose consumers do not read CloudEvents yet.
	Ferry Mode = "ferry"
)

// The extension attributes that carry what CloudEvents has no attribute
// for.
const (
	// ExtAggregateType is the aggregate type of an event with an aggregate.
	ExtAggregateType = "ferryaggregatetype"
	// ExtSequence is the aggregate sequence, as a decimal string.
	ExtSequence = "ferrysequence"
)

// The prefixes of the AMQP binding's application properties.
const (
	// AMQPPrefix is the prefix the CloudEvents Go SDK's AMQP binding
	// reads and writes (the binding's prefix up to its version 1.0.1).
	AMQPPrefix = "cloudEvents:"
	// AMQPPrefixNew is the AMQP binding's prefix from its version 1.0.2.
	AMQPPrefixNew = "cloudEvents_"
)

const (
	kafkaPrefix      = "ce_"
	natsPrefix       = "ce-"
	kafkaContentType = "content-type"
	natsContentType  = "Content-Type"
	jsonType         = "application/json"
)

// Config configures an Encoding.
type Config struct {
	// Source is every CloudEvent's source: a URI-reference naming the
	// service or the table the events come from ("/orders-service",
	// "urn:ferry:orders:outbox", "https://example.com/orders"). Required.
	Source string
	// Mode is the content mode of every destination not in Destinations.
	// Default Binary.
	Mode Mode
	// Destinations overrides Mode for the destinations named (the
	// routing key, subject or topic an event is published to: its
	// Destination, or its type when it has none).
	Destinations map[string]Mode
	// AMQPPrefix is the prefix of the attributes' headers on RabbitMQ:
	// AMQPPrefix (the default) or AMQPPrefixNew.
	AMQPPrefix string
}

// Encoding writes events as CloudEvents: a publisher's
// ferrybroker.Encoding. It is safe for concurrent use.
type Encoding struct {
	cfg Config
}

var _ ferrybroker.Encoding = (*Encoding)(nil)

// NewEncoding returns the Encoding cfg describes, or an error wrapping
// ferrytype.ErrInvalidConfig.
func NewEncoding(cfg Config) (*Encoding, error) {
	bad := func(format string, args ...any) (*Encoding, error) {
		return nil, fmt.Errorf("%w: ferrycloudevents: "+format, append([]any{ferrytype.ErrInvalidConfig}, args...)...)
	}
	if strings.TrimSpace(cfg.Source) == "" {
		return bad("Config.Source is required: a URI-reference naming the service or the table, such as /orders-service")
	}
	if types.ParseURIRef(cfg.Source) == nil {
		return bad("Config.Source %q is not a URI-reference", cfg.Source)
	}
	if cfg.Mode == "" {
		cfg.Mode = Binary
	}
	if cfg.AMQPPrefix == "" {
		cfg.AMQPPrefix = AMQPPrefix
	}
	if cfg.AMQPPrefix != AMQPPrefix && cfg.AMQPPrefix != AMQPPrefixNew {
		return bad("Config.AMQPPrefix %q is neither %q nor %q", cfg.AMQPPrefix, AMQPPrefix, AMQPPrefixNew)
	}
	if err := cfg.Mode.check(); err != nil {
		return bad("Config.Mode: %v", err)
	}
	for d, m := range cfg.Destinations {
		if err := m.check(); err != nil {
			return bad("Config.Destinations[%q]: %v", d, err)
		}
	}
	cfg.Destinations = maps.Clone(cfg.Destinations)
	return &Encoding{cfg: cfg}, nil
}

// ParseMode reads a mode's name: binary, structured or ferry.
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	return m, m.check()
}

func (m Mode) check() error {
	switch m {
	case Binary, Structured, Ferry:
		return nil
	}
	return fmt.Errorf("mode %q is none of binary, structured, ferry", string(m))
}

// Encode writes m as a CloudEvent for protocol p, in the mode of its
// destination. An event that is not a valid CloudEvent (an empty id or
// type) is an error: the publisher reports it rejected.
func (e *Encoding) Encode(m *ferrytype.Message, p ferrybroker.Protocol) (ferrybroker.Encoded, error) {
	mode := e.cfg.Mode
	if dm, ok := e.cfg.Destinations[m.Route()]; ok {
		mode = dm
	}
	if mode == Ferry {
		return ferrybroker.FerryForm(m, p), nil
	}
	ev, plain, err := e.event(m)
	if err != nil {
		return ferrybroker.Encoded{}, err
	}
	prefix, err := e.prefix(p)
	if err != nil {
		return ferrybroker.Encoded{}, err
	}
	out := ferrybroker.Encoded{}
	// The event's headers that are no extension travel plain, first, so
	// that none can pass for an attribute's or the content type's.
	for _, kv := range plain {
		if !strings.HasPrefix(strings.ToLower(kv[0]), strings.ToLower(prefix)) &&
			!strings.EqualFold(kv[0], kafkaContentType) {
			out.Headers = append(out.Headers, kv)
		}
	}
	if mode == Structured {
		body, err := format.JSON.Marshal(ev)
		if err != nil {
			return ferrybroker.Encoded{}, fmt.Errorf("cloudevents: structured mode: %w", err)
		}
		out.Body, out.ContentType = body, event.ApplicationCloudEventsJSON
		switch p {
		case ferrybroker.ProtocolKafka:
			out.Headers = append(out.Headers, [2]string{kafkaContentType, out.ContentType})
		case ferrybroker.ProtocolNATS:
			out.Headers = append(out.Headers, [2]string{natsContentType, out.ContentType})
		}
		return out, nil
	}
	w := &binaryWriter{prefix: prefix, p: p, out: &out}
	if err := binding.ToMessage(ev).ReadBinary(context.Background(), w); err != nil {
		return ferrybroker.Encoded{}, fmt.Errorf("cloudevents: binary mode: %w", err)
	}
	slices.SortStableFunc(w.ext, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	out.Headers = append(out.Headers, w.ext...)
	return out, nil
}

// event builds m's CloudEvent and returns it with the event's headers that
// are no extension attribute.
func (e *Encoding) event(m *ferrytype.Message) (*event.Event, [][2]string, error) {
	ev := event.New()
	ev.SetID(m.ID)
	ev.SetSource(e.cfg.Source)
	ev.SetType(m.Type)
	if !m.CreatedAt.IsZero() {
		ev.SetTime(m.CreatedAt.UTC())
	}
	var plain [][2]string
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		name := strings.ToLower(k)
		if extensionName(name) {
			ev.SetExtension(name, m.Headers[k])
		} else {
			plain = append(plain, [2]string{k, m.Headers[k]})
		}
	}
	if m.AggregateID != "" {
		ev.SetSubject(m.AggregateID)
		ev.SetExtension(ExtAggregateType, m.AggregateType)
		ev.SetExtension(ExtSequence, strconv.FormatInt(m.Sequence, 10))
	}
	if err := ev.SetData(jsonType, m.Payload); err != nil {
		return nil, nil, fmt.Errorf("cloudevents: data: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return nil, nil, fmt.Errorf("cloudevents: event %q is not a valid CloudEvent: %w", m.ID, err)
	}
	return &ev, plain, nil
}

// reserved are the attribute names an event header may not take as an
// extension: the context attributes of CloudEvents 1.0 and ferry's.
var reserved = []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype",
	"dataschema", "data", "data_base64", ExtAggregateType, ExtSequence}

// extensionName reports whether an event header, in lower case, travels
// as an extension attribute: a valid name (letters and digits) of at most
// 20 characters, as the specification recommends, that no attribute has.
func extensionName(name string) bool {
	return len(name) <= 20 && event.IsExtensionNameValid(name) && !slices.Contains(reserved, name)
}

func (e *Encoding) prefix(p ferrybroker.Protocol) (string, error) {
	switch p {
	case ferrybroker.ProtocolAMQP:
		return e.cfg.AMQPPrefix, nil
	case ferrybroker.ProtocolKafka:
		return kafkaPrefix, nil
	case ferrybroker.ProtocolNATS:
		return natsPrefix, nil
	}
	return "", fmt.Errorf("cloudevents: no binding for protocol %q", string(p))
}

// binaryWriter writes a CloudEvent's attributes as the headers of a
// protocol binding's binary content mode (binding.BinaryWriter).
type binaryWriter struct {
	prefix string
	p      ferrybroker.Protocol
	out    *ferrybroker.Encoded
	ext    [][2]string // the extensions, sorted when written
}

func (w *binaryWriter) Start(context.Context) error { return nil }
func (w *binaryWriter) End(context.Context) error   { return nil }

func (w *binaryWriter) SetAttribute(a spec.Attribute, v any) error {
	s, err := types.Format(v)
	if err != nil {
		return fmt.Errorf("attribute %s: %w", a.Name(), err)
	}
	if a.Kind() == spec.DataContentType {
		w.out.ContentType = s
		switch w.p {
		case ferrybroker.ProtocolAMQP: // the content_type property
			return nil
		case ferrybroker.ProtocolKafka:
			w.out.Headers = append(w.out.Headers, [2]string{kafkaContentType, s})
			return nil
		}
	}
	w.out.Headers = append(w.out.Headers, [2]string{w.prefix + a.Name(), s})
	return nil
}

func (w *binaryWriter) SetExtension(name string, v any) error {
	s, err := types.Format(v)
	if err != nil {
		return fmt.Errorf("extension %s: %w", name, err)
	}
	w.ext = append(w.ext, [2]string{w.prefix + name, s})
	return nil
}

func (w *binaryWriter) SetData(r io.Reader) error {
	var b bytes.Buffer
	if _, err := b.ReadFrom(r); err != nil {
		return err
	}
	w.out.Body = b.Bytes()
	return nil
}
