package ferrycloudevents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/ferrydev/ferry/ferrybroker"
)

// Decoding reads CloudEvents, in binary or structured content mode, and
// ferry's own form: a consumer's ferrybroker.Decoding
// (ferrybroker.ConsumerOptions.Decoding). Its zero value is ready.
type Decoding struct{}

var _ ferrybroker.Decoding = Decoding{}

// Decode fills d from the CloudEvent it carries, or from ferry's headers
// when it carries none (see the package's documentation). It returns the
// content type of the event's data.
func (Decoding) Decode(d *ferrybroker.Delivery, contentType string, p ferrybroker.Protocol) (string, error) {
	m := &message{d: d, contentType: contentType}
	switch {
	case m.binary(p):
	case m.structured(p):
	default:
		d.FillFromHeaders()
		return contentType, nil
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return "", fmt.Errorf("cloudevents: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return "", fmt.Errorf("cloudevents: not a valid CloudEvent: %w", err)
	}
	d.MessageID, d.Type, d.AggregateID = ev.ID(), ev.Type(), ev.Subject()
	d.AggregateType, d.Sequence = "", 0
	ext := ev.Extensions()
	if v, ok := ext[ExtAggregateType]; ok {
		if d.AggregateType, err = types.ToString(v); err != nil {
			return "", fmt.Errorf("cloudevents: extension %s: %w", ExtAggregateType, err)
		}
	}
	if v, ok := ext[ExtSequence]; ok {
		s, err := types.Format(v)
		if err == nil {
			d.Sequence, err = strconv.ParseInt(s, 10, 64)
		}
		if err != nil {
			return "", fmt.Errorf("cloudevents: extension %s %v is not an integer: %w", ExtSequence, v, err)
		}
	}
	// The attributes, under their names, for the handler.
	set := func(name string, v any) {
		if s, err := types.Format(v); err == nil && s != "" {
			d.Headers[name] = s
		}
	}
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	set("specversion", ev.SpecVersion())
	set("source", ev.Source())
	if !ev.Time().IsZero() {
		set("time", ev.Time())
	}
	set("dataschema", ev.DataSchema())
	for k, v := range ext {
		if k != ExtAggregateType && k != ExtSequence {
			set(k, v)
		}
	}
	d.Payload = ev.Data()
	ct := ev.DataContentType()
	if ct == "" {
		ct = jsonType // the specification's default for JSON data
	}
	return ct, nil
}

// message reads a Delivery as a CloudEvents binding.MessageReader.
type message struct {
	d           *ferrybroker.Delivery
	contentType string
	version     spec.Version // binary mode
	prefix      string       // binary mode: the prefix found
	format      format.Format
}

// binary reports whether the delivery holds a binary-mode CloudEvent of
// protocol p: a specversion header with the binding's prefix.
func (m *message) binary(p ferrybroker.Protocol) bool {
	var prefixes []string
	switch p {
	case ferrybroker.ProtocolAMQP:
		prefixes = []string{AMQPPrefix, AMQPPrefixNew}
	case ferrybroker.ProtocolKafka:
		prefixes = []string{kafkaPrefix}
	case ferrybroker.ProtocolNATS:
		prefixes = []string{natsPrefix}
	}
	for _, prefix := range prefixes {
		if v, ok := header(m.d.Headers, prefix+"specversion"); ok {
			m.prefix = prefix
			if m.version = spec.WithPrefix(prefix).Version(v); m.version == nil {
				// An unknown version: read as 1.0, whose check says so.
				m.version = spec.WithPrefix(prefix).Latest()
			}
			return true
		}
	}
	return false
}

// structured reports whether the delivery holds a structured-mode
// CloudEvent: its content type says so, or, on Kafka, where Kafka Connect
// converters write no headers, and on NATS, where the Go SDK's bindings
// write structured mode with no header, a JSON object with a specversion
// member has no content type.
func (m *message) structured(p ferrybroker.Protocol) bool {
	ct := m.contentType
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		ct = mt
	}
	if f := format.Lookup(ct); f != nil {
		m.format = f
		return true
	}
	if (p == ferrybroker.ProtocolKafka || p == ferrybroker.ProtocolNATS) && ct == "" && bytes.HasPrefix(bytes.TrimSpace(m.d.Payload), []byte("{")) {
		var probe struct {
			SpecVersion *string `json:"specversion"`
		}
		if json.Unmarshal(m.d.Payload, &probe) == nil && probe.SpecVersion != nil {
			m.format = format.JSON
			return true
		}
	}
	return false
}

func (m *message) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.d.Payload))
}

func (m *message) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	lower := strings.ToLower(m.prefix)
	for k, v := range m.d.Headers {
		name, ok := cutPrefixFold(k, lower)
		if !ok {
			continue
		}
		var err error
		if a := m.version.Attribute(m.prefix + name); a != nil {
			err = w.SetAttribute(a, v)
		} else {
			err = w.SetExtension(strings.ToLower(name), v)
		}
		if err != nil {
			return fmt.Errorf("header %s: %w", k, err)
		}
	}
	// The content type, where the binding does not carry it as an
	// attribute: AMQP's property, Kafka's content-type header.
	if m.version.Attribute(m.prefix+"datacontenttype") != nil {
		if _, ok := header(m.d.Headers, m.prefix+"datacontenttype"); !ok && m.contentType != "" {
			if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.contentType); err != nil {
				return err
			}
		}
	}
	if len(m.d.Payload) > 0 {
		return w.SetData(bytes.NewReader(m.d.Payload))
	}
	return nil
}

// GetAttribute and GetExtension make message a
// binding.MessageMetadataReader, which the SDK asks of a binary message.
func (m *message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	a := m.version.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if v, ok := header(m.d.Headers, m.prefix+a.Name()); ok {
		return a, v
	}
	return a, nil
}

func (m *message) GetExtension(name string) any {
	if v, ok := header(m.d.Headers, m.prefix+name); ok {
		return v
	}
	return nil
}

func (m *message) Finish(error) error { return nil }

// header returns the value of the header named name in any case.
func header(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// cutPrefixFold cuts lowerPrefix, in lower case, from k in any case.
func cutPrefixFold(k, lowerPrefix string) (string, bool) {
	if len(k) < len(lowerPrefix) || strings.ToLower(k[:len(lowerPrefix)]) != lowerPrefix {
		return "", false
	}
	return k[len(lowerPrefix):], true
}
