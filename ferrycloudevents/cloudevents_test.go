package ferrycloudevents_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/ferrytype"
)

var protocols = []ferrybroker.Protocol{ferrybroker.ProtocolAMQP, ferrybroker.ProtocolKafka, ferrybroker.ProtocolNATS}

func message() ferrytype.Message {
	return ferrytype.Message{
		ID: "01J8Z6XK6Q6T3V2B1N0M9K8J7H", Type: "orders.paid", AggregateType: "order", AggregateID: "o-42",
		Sequence: 1 << 40, Payload: []byte(`{"order":"o-42","amount":1250}`),
		Headers: map[string]string{
			"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"Tenant":       "acme",
			"X-Request-Id": "r-1",
			"id":           "spoof",
		},
		CreatedAt: time.Date(2026, 12, 7, 10, 11, 12, 345678000, time.UTC),
	}
}

// delivery is what a consumer of protocol p builds from e: the headers,
// the body, and the content type where p carries it.
func delivery(e ferrybroker.Encoded, p ferrybroker.Protocol) (*ferrybroker.Delivery, string) {
	d := &ferrybroker.Delivery{Route: "orders.paid", Payload: e.Body, Headers: map[string]string{}}
	for _, kv := range e.Headers {
		d.Headers[kv[0]] = kv[1]
	}
	switch p {
	case ferrybroker.ProtocolAMQP:
		return d, e.ContentType
	case ferrybroker.ProtocolKafka:
		return d, d.Headers["content-type"]
	}
	return d, d.Headers["Content-Type"]
}

func TestEncodingRoundTrips(t *testing.T) {
	for _, mode := range []ferrycloudevents.Mode{ferrycloudevents.Binary, ferrycloudevents.Structured} {
		enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/orders-service", Mode: mode})
		require.NoError(t, err)
		for _, p := range protocols {
			t.Run(string(mode)+"/"+string(p), func(t *testing.T) {
				m := message()
				e, err := enc.Encode(&m, p)
				require.NoError(t, err)
				d, ct := delivery(e, p)
				payloadType, err := ferrycloudevents.Decoding{}.Decode(d, ct, p)
				require.NoError(t, err)
				require.Equal(t, "application/json", payloadType)
				require.Equal(t, m.ID, d.MessageID)
				require.Equal(t, m.Type, d.Type)
				require.Equal(t, m.AggregateID, d.AggregateID)
				require.Equal(t, m.AggregateType, d.AggregateType)
				require.Equal(t, m.Sequence, d.Sequence)
				require.JSONEq(t, string(m.Payload), string(d.Payload))
				require.Equal(t, "/orders-service", d.Headers["source"])
				require.Equal(t, "2026-12-07T10:11:12.345678Z", d.Headers["time"])
				require.Equal(t, m.Headers["traceparent"], d.Headers["traceparent"])
				require.Equal(t, "acme", d.Headers["tenant"], "a header with a valid name travels as an extension")
				require.Equal(t, "r-1", d.Headers["X-Request-Id"], "a header with another name travels plain")
				for k := range d.Headers {
					require.False(t, strings.HasPrefix(k, "Ferry-"), "no ferry header: %s", k)
				}
				if mode == ferrycloudevents.Binary {
					require.Equal(t, string(m.Payload), string(e.Body), "binary mode: the body is the payload")
				}
			})
		}
	}
}

func TestBinaryHeadersFollowEachBinding(t *testing.T) {
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "urn:ferry:orders"})
	require.NoError(t, err)
	m := message()
	names := func(p ferrybroker.Protocol) (map[string]string, ferrybroker.Encoded) {
		e, err := enc.Encode(&m, p)
		require.NoError(t, err)
		h := map[string]string{}
		for _, kv := range e.Headers {
			_, dup := h[kv[0]]
			require.False(t, dup, "header %s twice", kv[0])
			h[kv[0]] = kv[1]
		}
		return h, e
	}
	k, _ := names(ferrybroker.ProtocolKafka)
	require.Equal(t, "1.0", k["ce_specversion"])
	require.Equal(t, m.ID, k["ce_id"])
	require.Equal(t, "urn:ferry:orders", k["ce_source"])
	require.Equal(t, "o-42", k["ce_subject"])
	require.Equal(t, "application/json", k["content-type"])
	require.Equal(t, "1099511627776", k["ce_ferrysequence"])
	require.Equal(t, "order", k["ce_ferryaggregatetype"])
	require.Equal(t, "r-1", k["X-Request-Id"])
	require.NotContains(t, k, "ce_datacontenttype")

	n, _ := names(ferrybroker.ProtocolNATS)
	require.Equal(t, m.ID, n["ce-id"])
	require.Equal(t, "application/json", n["ce-datacontenttype"])

	a, e := names(ferrybroker.ProtocolAMQP)
	require.Equal(t, m.ID, a["cloudEvents:id"])
	require.Equal(t, "application/json", e.ContentType, "AMQP: the content_type property")
	require.NotContains(t, a, "cloudEvents:datacontenttype")

	newer, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/o", AMQPPrefix: ferrycloudevents.AMQPPrefixNew})
	require.NoError(t, err)
	e, err = newer.Encode(&m, ferrybroker.ProtocolAMQP)
	require.NoError(t, err)
	d, ct := delivery(e, ferrybroker.ProtocolAMQP)
	require.Equal(t, m.ID, d.Headers["cloudEvents_id"])
	_, err = ferrycloudevents.Decoding{}.Decode(d, ct, ferrybroker.ProtocolAMQP)
	require.NoError(t, err)
	require.Equal(t, m.ID, d.MessageID, "the decoding reads both AMQP prefixes")
}

func TestDestinationsKeepFerrysForm(t *testing.T) {
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/o",
		Destinations: map[string]ferrycloudevents.Mode{"orders.paid": ferrycloudevents.Ferry, "orders.shipped": ferrycloudevents.Structured}})
	require.NoError(t, err)
	m := message()
	e, err := enc.Encode(&m, ferrybroker.ProtocolKafka)
	require.NoError(t, err)
	require.Equal(t, ferrybroker.FerryForm(&m, ferrybroker.ProtocolKafka), e)
	d, ct := delivery(e, ferrybroker.ProtocolKafka)
	_, err = ferrycloudevents.Decoding{}.Decode(d, ct, ferrybroker.ProtocolKafka)
	require.NoError(t, err)
	require.Equal(t, m.ID, d.MessageID, "ferry's form is read by the headers")
	require.Equal(t, m.Sequence, d.Sequence)

	m.Destination = "orders.shipped"
	e, err = enc.Encode(&m, ferrybroker.ProtocolKafka)
	require.NoError(t, err)
	require.Equal(t, "application/cloudevents+json", e.ContentType)
	require.Contains(t, string(e.Body), `"specversion":"1.0"`)
}

// Debezium's CloudEventsConverter writes the structured JSON envelope as
// the record's value, with no content-type header (Kafka Connect
// converters write none), its own extensions, and the change event as
// data.
func TestDecodingReadsDebeziumsCloudEvents(t *testing.T) {
	body := `{
	  "id": "name:test_server;lsn:29274832;txId:565",
	  "source": "/debezium/postgresql/test_server",
	  "specversion": "1.0",
	  "type": "io.debezium.connector.postgresql.DataChangeEvent",
	  "time": "2020-07-28T12:59:46.187Z",
	  "datacontenttype": "application/json",
	  "iodebeziumop": "c",
	  "iodebeziumversion": "2.7.0.Final",
	  "iodebeziumconnector": "postgresql",
	  "iodebeziumname": "test_server",
	  "iodebeziumtsms": "1595941186187",
	  "iodebeziumdb": "postgres",
	  "iodebeziumschema": "inventory",
	  "iodebeziumtable": "customers",
	  "data": {"before": null, "after": {"id": 1005, "first_name": "Anne"}}
	}`
	d := &ferrybroker.Delivery{Route: "test_server.inventory.customers", Payload: []byte(body), Headers: map[string]string{}}
	ct, err := ferrycloudevents.Decoding{}.Decode(d, "", ferrybroker.ProtocolKafka)
	require.NoError(t, err)
	require.Equal(t, "application/json", ct)
	require.Equal(t, "name:test_server;lsn:29274832;txId:565", d.MessageID)
	require.Equal(t, "io.debezium.connector.postgresql.DataChangeEvent", d.Type)
	require.Equal(t, "c", d.Headers["iodebeziumop"])
	require.Equal(t, "customers", d.Headers["iodebeziumtable"])
	require.JSONEq(t, `{"before": null, "after": {"id": 1005, "first_name": "Anne"}}`, string(d.Payload))
}

// The Go SDK's NATS bindings write structured mode as the body alone, with
// no content type; on RabbitMQ and without a specversion member, such a
// body is ferry's form.
func TestDecodingReadsAStructuredCloudEventWithoutContentType(t *testing.T) {
	body := `{"specversion":"1.0","id":"e-1","source":"/s","type":"t","subject":"a-1","data":{"n":1}}`
	d := &ferrybroker.Delivery{Payload: []byte(body), Headers: map[string]string{}}
	_, err := ferrycloudevents.Decoding{}.Decode(d, "", ferrybroker.ProtocolNATS)
	require.NoError(t, err)
	require.Equal(t, "e-1", d.MessageID)
	require.Equal(t, "a-1", d.AggregateID)
	require.JSONEq(t, `{"n":1}`, string(d.Payload))

	d = &ferrybroker.Delivery{Payload: []byte(body), Headers: map[string]string{ferrybroker.HeaderEventID: "f-1"}}
	_, err = ferrycloudevents.Decoding{}.Decode(d, "", ferrybroker.ProtocolAMQP)
	require.NoError(t, err)
	require.Equal(t, "f-1", d.MessageID, "RabbitMQ: read by ferry's headers")
	require.Equal(t, body, string(d.Payload))

	d = &ferrybroker.Delivery{Payload: []byte(`{"id":"x"}`), Headers: map[string]string{ferrybroker.HeaderEventID: "f-2"}}
	_, err = ferrycloudevents.Decoding{}.Decode(d, "", ferrybroker.ProtocolNATS)
	require.NoError(t, err)
	require.Equal(t, "f-2", d.MessageID, "no specversion: ferry's form")
}

func TestDecodingRefusesAnInvalidCloudEvent(t *testing.T) {
	cases := map[string]*ferrybroker.Delivery{
		"no source": {Headers: map[string]string{"ce_specversion": "1.0", "ce_id": "1", "ce_type": "t"}, Payload: []byte(`{}`)},
		"bad time":  {Headers: map[string]string{"ce_specversion": "1.0", "ce_id": "1", "ce_type": "t", "ce_source": "/s", "ce_time": "yesterday"}, Payload: []byte(`{}`)},
		"version":   {Headers: map[string]string{"ce_specversion": "9.9", "ce_id": "1", "ce_type": "t", "ce_source": "/s"}, Payload: []byte(`{}`)},
		"sequence":  {Headers: map[string]string{"ce_specversion": "1.0", "ce_id": "1", "ce_type": "t", "ce_source": "/s", "ce_ferrysequence": "x"}, Payload: []byte(`{}`)},
		"envelope":  {Headers: map[string]string{"content-type": "application/cloudevents+json"}, Payload: []byte(`{"specversion":"1.0",`)},
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ferrybroker.Decode(ferrycloudevents.Decoding{}, d, d.Headers["content-type"], ferrybroker.ProtocolKafka)
			require.Error(t, err)
			require.True(t, errors.Is(err, ferrybroker.ErrMalformed), "%v", err)
		})
	}
}

func TestEncodingRefusesWhatIsNoCloudEvent(t *testing.T) {
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/o"})
	require.NoError(t, err)
	m := message()
	m.Type = ""
	_, err = enc.Encode(&m, ferrybroker.ProtocolNATS)
	require.ErrorContains(t, err, "not a valid CloudEvent")

	for _, cfg := range []ferrycloudevents.Config{
		{},
		{Source: "not a uri reference%"},
		{Source: "/o", Mode: "envelope"},
		{Source: "/o", AMQPPrefix: "ce_"},
		{Source: "/o", Destinations: map[string]ferrycloudevents.Mode{"x": "json"}},
	} {
		_, err := ferrycloudevents.NewEncoding(cfg)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "%+v", cfg)
	}
}
