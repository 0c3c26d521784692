// Package ferrykafka publishes outbox events to Kafka, and consumes them as
// a member of a consumer group, through franz-go
// (github.com/twmb/franz-go).
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
// Its records are unknown; the publisher builds a new client and produces
// on it from the next batch on: Dial's from the URL's options, New's from
// the caller's client's options (kgo.Client.Opts), leaving the caller's
// client open. A caller's client that also consumes or is transactional
// is not copied: the publisher then reports itself disconnected
// (Disconnected says why) until the caller builds a new client and
// publisher.
//
// # Connectivity
//
// The publisher asks the brokers for metadata every Config.PingInterval
// (1s). Connected is false, and Disconnected says why, from the first
// failed ask until the next good one; the relay stops claiming meanwhile,
// and a Publish in that time sends nothing (not sent). Check asks at once.
// When a broker closes a new connection before answering its first
// request, franz-go guesses at a cause ("is TLS missing?", "is SASL
// missing?"); a network cut or a broker restarting does the same, so the
// publisher's and the consumer's errors state what happened instead — "the
// broker closed a new connection before answering its first request" —
// with franz-go's error still in the chain. Only Dial and New, at start,
// add where to look when every connection ends so.
//
// # Consuming
//
// A Consumer runs a ferrybroker.Handler on the records of
// ConsumerConfig.Topics as
// a member of the consumer group ConsumerConfig.Group, as every ferry
// consumer does (ferrybroker.Consumer): the handler commits its effect
// (through ferry's Inbox, which finds a record handled before), then the
// record counts as done. NewConsumer takes franz-go connection options
// (ClientConfig.Opts of a parsed URL) and DialConsumer a URL: the consumer
// builds its own client, because a group's options and rebalance callbacks
// are fixed when a franz-go client is built. DialConsumer and Start wait
// out an outage (no broker reachable): they try again after 100ms,
// doubling up to 5s, log each failure and give up only when their context
// ends, or at once on a cause no retry mends (a missing topic, a login,
// access or certificate refused, TLS on one side only); Stop ends the
// wait. Its client joins the group
// with a 10s session timeout and a 10s rebalance timeout instead of
// franz-go's 45s and 60s, so that the partitions of a consumer that was
// killed, or that hangs in a rebalance, go to the others within seconds
// rather than a minute; ConsumerConfig.ClientOpts change them, and any
// other franz-go option but the group's own. A new group starts at the
// earliest offset (franz-go's default; kgo.ConsumeResetOffset changes it).
// After a leader change that shows the brokers lost records the consumer
// had read, franz-go resets the partition to where the logs agree (or,
// when it cannot tell, to kgo.ConsumeResetOffset) and the records from
// there come again: the consumer logs the rewind at WARN with both
// offsets, counts it (ConsumerStats.Rewinds and Rewound), tells the hooks
// (ferrybroker.HookRewound: ferryprom counts it) and commits from the
// earlier offset on.
//
// Kafka has no per-message ack: the group commits, per partition, the
// offset to resume from. So:
//
//   - Order. A partition's records are handled one at a time, in offset
//     order; ConsumerConfig.Concurrency handlers run at once across
//     partitions. A ferry publisher keys a record by its aggregate id, so
//     one aggregate's events are handled in the order they were
//     published.
//   - Offsets. Auto-commit is off (kgo.DisableAutoCommit). The offset
//     past a record is committed only once that record and every record
//     before it in the partition was handled (the handler returned nil)
//     or parked: every ConsumerConfig.CommitInterval (1s), when a
//     rebalance revokes partitions, and at Stop. A delivery is reported
//     acked (Stats, ferrybroker.HookSettled) when the commit that covers
//     it succeeded; a crash before that delivers it again, which the
//     inbox reports as a duplicate. The fault point
//     ferryfault.ConsumerAfterHandle (set in the context given to Start)
//     is that point: an error there acts as a crash of the record's
//     partition, whose offset is not committed, nothing later in it is
//     handled or committed, and it is not fetched until it is assigned
//     again (after a rebalance or a restart), when the record comes again.
//   - Retries. Kafka never delivers a record again by itself: a transient
//     failure is retried in place after the RedeliveryPolicy's delay
//     (200ms doubling up to 30s by default), and the partition waits
//     meanwhile; the others go on. Delivery.DeliveryCount and Redelivered
//     count those in-place deliveries. Kafka keeps no delivery count: a
//     record read again after a rebalance or a restart starts counting at
//     1, so RedeliveryPolicy.MaxDeliveries bounds the retries of one
//     consumer's turn, not of the record's life.
//   - Parking. A poison record (an error wrapping ferrytype.ErrPoison), a
//     malformed one (a payload that is not JSON, a failed
//     ConsumerConfig.Validate), a tombstone (a record with no value), or
//     one whose last allowed delivery failed is produced to
//     ConsumerConfig.ParkTopic, with its key, value and headers and the
//     park headers (ferrybroker.HeaderParkReason and the others, plus
//     HeaderParkPartition, HeaderParkOffset and HeaderParkGroup); once the
//     brokers acknowledged the copy, the partition moves on. If the copy
//     cannot be produced, the record is retried instead, never skipped. A
//     crash between the copy and the commit parks the record twice.
//   - Rebalances. The client blocks rebalances while a poll's records
//     are queued (kgo.BlockRebalanceOnPoll), so no record of a revoked
//     partition is taken after the revoke. When a rebalance revokes
//     partitions, the consumer takes no more of their records, waits up
//     to ConsumerConfig.RevokeTimeout (5s; keep it below the rebalance
//     timeout) for their handlers in flight, commits what was handled,
//     and lets the rebalance go on; a handler still running is cancelled
//     and its record left to the next owner. When partitions are lost
//     (the member was fenced: a missed session timeout, a stale
//     generation), nothing more of them is committed and their handlers
//     are cancelled: what they did comes again to the next owner, and the
//     inbox finds it done.
//   - Stop stops fetching, lets the handlers in flight finish (or, when
//     its context ends, cancels them), commits, and leaves the group, so
//     that the others take the partitions at once.
//
// A partition whose records wait (a handler retrying, a slow handler)
// holds at most a few hundred fetched records: past that the consumer
// pauses fetching it (kgo.Client.PauseFetchPartitions) until its handler
// catches up, so that the other partitions go on.
//
// A Delivery's MessageID is the Ferry-Event-Id header, else Debezium's id
// header, else topic/partition/offset; Route is the topic; Headers are the
// record's (the first of a repeated key); AggregateID, when no
// Ferry-Aggregate-Id header says it, is the record key.
//
// # Debezium
//
// The Consumer also reads the records Debezium's outbox event router
// (io.debezium.transforms.outbox.EventRouter) writes from ferry's
// outbox_event table, in place of a ferry relay: an id header holding the
// event id, the aggregate id as the key, a topic per aggregate type
// (outbox.event.<aggregate_type>, whose suffix becomes
// Delivery.AggregateType when no header says it), and the payload. A
// connector that reads ferry's table (MySQL shown; the transform's
// settings are the same for PostgreSQL):
//
//	connector.class=io.debezium.connector.mysql.MySqlConnector
//	table.include.list=app.outbox_event
//	tombstones.on.delete=false
//	key.converter=org.apache.kafka.connect.storage.StringConverter
//	value.converter=org.apache.kafka.connect.storage.StringConverter
//	transforms=outbox
//	transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
//	transforms.outbox.table.field.event.id=event_id
//	transforms.outbox.table.field.event.key=aggregate_id
//	transforms.outbox.table.field.event.payload=payload
//	transforms.outbox.route.by.field=aggregate_type
//	transforms.outbox.route.topic.replacement=outbox.event.${routedByValue}
//	transforms.outbox.table.fields.additional.placement=event_type:header:Ferry-Event-Type,aggregate_type:header:Ferry-Aggregate-Type,aggregate_seq:header:Ferry-Aggregate-Seq
//
// The additional placement puts the event type and sequence in ferry's
// headers, so that Delivery.Type and Sequence are set as for a ferry
// relay's record. With the StringConverter the payload column arrives as
// its JSON text; with Kafka Connect's JsonConverter
// (value.converter.schemas.enable=false) it arrives as a JSON string
// holding that text, which the consumer unwraps for a record that has
// Debezium's id header and no Ferry-Event-Id. A JsonConverter with
// schemas enabled wraps the value in a schema envelope, which the
// consumer passes on as it is: turn schemas off. Header values (and the
// key) may be written by any of Kafka Connect's converters: plain
// (SimpleHeaderConverter, the default, or StringConverter), JSON
// (JsonConverter with schemas off: "wallet" in quotes, 7 as it is) or JSON
// with a schema envelope (JsonConverter with schemas on:
// {"schema":{"type":"string"},"payload":"wallet"}). The consumer decodes
// every header of a Debezium record, and ferry's own headers (Ferry-*) of
// any record, to the value: Delivery.AggregateType reads wallet, and
// Delivery.Headers holds the decoded values.
//
// Debezium takes only the rows ferry inserts: the status, attempts, lease
// and sent_at columns the relay maintains mean nothing to it (the router
// expects an insert-only table and logs a warning per update,
// table.op.invalid.behavior), and the headers column (the trace context
// and the event's own headers) does not become record headers. Run either
// Debezium or a ferry relay on a table, never both: each would publish
// every event, and the outbox's statuses would say nothing of what
// Debezium sent. The rows stay NEW: delete them once Debezium captured
// them (the router drops deletes; with tombstones.on.delete=false the
// connector writes no tombstone for them). A tombstone that reaches the
// consumer anyway is parked with its reason.
//
// # Testing
//
// The package's tests run the ferrybrokertest conformance suites (the
// publisher's and the consumer's), faults, a relay, and the consumer's
// rebalances, lost partitions and crashes through a SQLite inbox against
// kfake, franz-go's in-process fake of a Kafka cluster speaking the real
// protocol: they need no service. kfake cannot show
// what replication does (a follower that lags, an unclean leader election,
// min.insync.replicas enforced: kfake reports the setting, which
// Publisher.Durability reads, but does not enforce it), the timing of a
// real broker under load, or a network that delays rather than drops.
package ferrykafka
