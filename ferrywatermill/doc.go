// Package ferrywatermill meets Watermill applications where they are: it
// puts ferry's outbox, relay and inbox behind Watermill's own interfaces.
//
//   - OutboxPublisher is a Watermill message.Publisher that writes to
//     ferry's outbox in the caller's transaction (as watermill-sql's
//     publisher takes a tx): a Watermill application publishes in its
//     business transaction and ferry's relay does the rest.
//   - Publisher makes any Watermill publisher a ferrybroker.Publisher:
//     ferry's relay (the library's and `ferry relay`'s) delivers through
//     it to every broker Watermill has. PublisherConfig.Guarantee says what
//     a nil error from that publisher vouches for.
//   - Consumer makes any Watermill subscriber a ferrybroker.Consumer:
//     ferry's handlers (ferry.InboxHandler: the marker and the effect in
//     one transaction) run on its messages, acked after the commit,
//     retried with backoff, poison and malformed messages parked.
//   - RouterHandler gives a Watermill router's handler the same outcomes,
//     for applications that keep their router.
//
// # Mapping
//
// A relayed event becomes a Watermill message (Message): UUID = event id,
// Payload = the event's JSON payload, Metadata = the event's headers, then
// the ferry headers (ferrybroker.HeaderEventID, HeaderEventType,
// HeaderAggregateType, HeaderAggregateID, HeaderSequence,
// HeaderCreatedAt). The Watermill topic is the event's destination.
//
// A message published through the OutboxPublisher becomes an event
// (Event): ID = UUID, Type = the metadata Ferry-Event-Type, else "name"
// (Watermill CQRS), else the topic; AggregateType and AggregateID = the
// metadata Ferry-Aggregate-Type and Ferry-Aggregate-Id; Destination = the
// topic; Headers = the other metadata. So a message keeps its UUID and
// metadata from the application's Publish to the subscriber's handler.
//
// A consumed message becomes a ferrybroker.Delivery (Delivery): MessageID =
// UUID (else Ferry-Event-Id), Headers = metadata, Route = the topic.
//
// # What Watermill's interfaces cannot say
//
// Publish returns one error: no per-message outcome, no "unroutable", no
// "rejected", no "duplicate". The Publisher makes one call per message
// for per-message outcomes, reports every error as unknown (the message
// may have reached the broker), and cannot see a message dropped as
// unroutable by a broker that confirms it anyway (RabbitMQ confirms an
// unroutable message): the destination must exist before events are
// relayed to it, or use ferryamqp, which publishes mandatory and reports
// returns. Subscribers keep no delivery count and their Ack is not
// confirmed: the Consumer counts deliveries itself, per process.
package ferrywatermill
