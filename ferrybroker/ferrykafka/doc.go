// Package ferrykafka publishes outbox events to Kafka through a franz-go
// client (github.com/twmb/franz-go).
//
// # Connecting
//
// New takes a *kgo.Client the caller built and keeps owning; Dial builds
// one from a URL (see ParseURL):
//
//	kafka://b1:9092,b2:9092
//	kafkas://relay:password@b1:9093,b2:9093?sasl=scram-sha-512&tls_ca=/etc/kafka/ca.pem
//
// Dial's client produces with acks from every in-sync replica through
// franz-go's idempotent producer, sends a batch as soon as it is handed
// over (no linger) and stops on detected data loss; Config.ClientOpts
// override any of that. Either way the publisher checks at start that a
// broker answers and that Config.Topics exist (or, with Config.Declare,
// creates them with kadm).
//
// # Records
//
// Each event becomes one record. Its topic is the event's destination, or,
// without one, the event type or the aggregate type (Config.TopicFrom)
// after Config.TopicPrefix. Its key is the aggregate id, so that the
// default partitioner puts every event of an aggregate in one partition,
// and the idempotent producer keeps them there in the order they were
// handed over, retries included. Its value is the payload; its headers are
// the event's own (one that would pass for ferry's is dropped), then
// ferry's: ferrybroker.HeaderEventID (Ferry-Event-Id) and the others of
// ferrybroker.MetadataHeaders. Its timestamp is the produce time, not the
// event's creation, so that an event published late does not fall to the
// topic's retention at once.
//
// Kafka keeps no message id: an event published twice (after an unknown
// outcome, or by a second relay after a crash) is stored twice, with the
// same Ferry-Event-Id. Consumers deduplicate on it, as ferry's inbox does.
//
// # Outcomes
//
// Publish hands the whole batch to the client asynchronously, so that it
// pipelines, and waits for every record's ack or for its context:
//
//   - acknowledged: confirmed.
//   - UNKNOWN_TOPIC_OR_PARTITION: returned (unroutable), with an error
//     naming the topic. A topic not yet known to exist is asked about
//     first, and a message to one the brokers say does not exist is
//     returned without being sent; a topic that disappears later is
//     returned once franz-go's unknown-topic retries are spent. (A client
//     with kgo.AllowAutoTopicCreation skips the question: the brokers
//     create the topic.)
//   - MESSAGE_TOO_LARGE, an authorization error, INVALID_RECORD,
//     CORRUPT_MESSAGE and the like: rejected. The brokers did not store
//     the record.
//   - anything else is unknown: no ack before the context ended, a
//     connection lost with the request in flight,
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND (the leader wrote it), a delivery
//     timeout, a fatal producer error.
//
// An unknown outcome is also ferrytype.ErrNotSent where nothing of the
// message reached the client: the publisher was not connected, the
// context had ended, or no buffer slot (Config.MaxBufferedRecords) freed
// up in time.
//
// franz-go's idempotent producer never gives up a record whose request is
// in flight, whatever its context says (it cannot tell whether the broker
// wrote it; see twmb/franz-go#1202 and #1217), and it fails every record
// buffered in a partition once the first one's context ends. So the
// records carry the values of Publish's context but not its end, and
// Publish stops waiting when its context ends: the records still in the
// client are reported unknown and produced when the client can, which may
// store them next to the relay's later republish.
//
// A fatal producer error (OUT_OF_ORDER_SEQUENCE_NUMBER, an unknown
// producer id, a fenced epoch) leaves a franz-go client unable to produce.
// Its records are unknown; a Dial'd publisher builds a new client and
// produces on it from the next batch on, while one built with New reports
// itself disconnected (Disconnected says why) until the caller builds a
// new client and publisher.
//
// # Connectivity
//
// The publisher asks the brokers for metadata every Config.PingInterval
// (1s). Connected is false, and Disconnected says why, from the first
// failed ask until the next good one; the relay stops claiming meanwhile,
// and a Publish in that time sends nothing (not sent). Check asks at once.
//
// # Testing
//
// The package's tests run the ferrybrokertest conformance suite, faults
// and a relay against kfake, franz-go's in-process fake of a Kafka cluster
// speaking the real protocol: they need no service. kfake cannot show
// what replication does (a follower that lags, an unclean leader election,
// min.insync.replicas), the timing of a real broker under load, or a
// network that delays rather than drops.
package ferrykafka
