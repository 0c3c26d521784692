// Package ferrycloudevents writes ferry's events as CloudEvents (CNCF,
// specification 1.0) on every broker ferry publishes to, and reads
// CloudEvents, those of other producers among them, into a
// ferrybroker.Delivery, so that a consumer in any language reads ferry's
// events with its CloudEvents SDK, and ferry's Inbox applies events ferry
// did not publish.
//
// An Encoding is a publisher's ferrybroker.Encoding (ferryamqp.Config,
// ferrynats.Config, ferrykafka.Config: Encoding; ferry relay
// --message-format cloudevents). An event becomes a CloudEvent with
//
//	id               the event id
//	source           Config.Source (a URI naming the service or the table)
//	type             the event type
//	subject          the aggregate id, when the event has one
//	time             the event's created_at
//	datacontenttype  application/json
//	data             the payload
//
// and the extension attributes ferryaggregatetype (the aggregate type) and
// ferrysequence (the aggregate sequence, as a string: CloudEvents integers
// are 32-bit). The event's own headers whose names are valid extension
// names once in lower case (letters and digits, at most 20), traceparent
// and tracestate among them, travel as extensions too; the others stay
// plain headers of the message, beside the CloudEvent.
//
// In binary content mode (the default) the attributes are headers named by
// each protocol binding: ce_ on Kafka (and the content type in
// content-type), ce- on NATS, and on RabbitMQ the AMQP binding's
// application properties as AMQP 0-9-1 headers, cloudEvents: (the prefix
// the Go SDK reads and writes; Config.AMQPPrefix for the newer
// cloudEvents_) with the content type in the content_type property. The
// body is the payload, unchanged. In structured content mode the body is
// the JSON envelope (application/cloudevents+json) and the headers carry
// its content type only. The broker's own id stays the event id either
// way (AMQP message_id, Nats-Msg-Id), so the broker's deduplication works
// as before.
//
// Decoding is a consumer's ferrybroker.Decoding
// (ferrybroker.ConsumerOptions.Decoding). It reads binary mode (either
// AMQP prefix), structured mode (by content type, and on Kafka and NATS a
// JSON body with a specversion member and no content type, as Debezium's
// CloudEventsConverter and the Go SDK's NATS bindings write), and ferry's
// own headers otherwise, so a consumer reads its queue through a change of
// format. It sets the Delivery's MessageID to the CloudEvent's id, Type to
// its type, AggregateID to its subject, AggregateType and Sequence from
// ferry's extensions, Payload to its data, and adds its other attributes
// and extensions to Headers under their CloudEvents names ("source",
// "time", "traceparent", ...). A CloudEvent that is not valid (a missing id,
// source or type, a malformed time) is parked as malformed.
package ferrycloudevents
