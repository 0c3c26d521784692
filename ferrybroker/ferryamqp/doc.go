// Package ferryamqp carries ferry events through RabbitMQ: a Publisher,
// which the relay publishes outbox events with, and a Consumer, which runs
// a handler for each delivery and acks it only after the handler
// committed. It uses github.com/rabbitmq/amqp091-go.
//
// # Publishing
//
// Each event becomes one persistent (delivery mode 2), mandatory message
// with content type application/json: message_id is the event id, type
// the event type, timestamp its creation time, and the headers hold the
// event's own headers (the trace context among them) overlaid with ferry's
// metadata headers (ferrybroker.MetadataHeaders) and HeaderPublishTag. It
// goes to the event's own exchange, or Config.Exchange (amq.topic by
// default), with the event's destination, or else its type, as routing
// key. With no configuration at all a Publisher works out of the box on
// amq.topic.
//
// Publish waits for each message's own publisher confirm, pipelined: every
// channel keeps up to Config.Window publishes awaiting their confirms, so
// a batch costs about one round trip, not one per message (on the
// reference 2-core machine, one outstanding confirm caps a channel at
// about 4,400 msg/s, a window of 100 to 1,000 reaches 34,000 to 40,000).
// Concurrent Publish calls (the relay's lanes, several relays in one
// process) spread over Config.Channels channels.
//
// # What a confirm does and does not promise
//
// A confirmed message is one RabbitMQ took responsibility for: a quorum
// queue confirms once a majority of its replicas wrote it to disk, a
// durable classic queue once the persistent message is on disk. It does
// not mean that any consumer received or processed it; that is the
// consumer's ack, a separate hand-off (ferry's relay marks SENT, never
// "processed"). Outcomes, per message:
//
//   - Confirmed: basic.ack, and the message was not returned.
//   - Returned: RabbitMQ routed it to no queue. With mandatory set it says
//     so with a basic.return, and then acks the message all the same: a
//     confirm alone would count an unroutable message as delivered. The
//     return is matched to the very publish it belongs to by
//     HeaderPublishTag, even when one event id is in flight twice. An
//     event for an exchange that does not exist is returned too, without
//     being published (RabbitMQ would close the channel, turning every
//     other publish in flight on it into an unknown outcome). A message
//     that an alternate exchange takes is not returned: the alternate
//     exchange must lead to a queue.
//   - Rejected: basic.nack on a live channel (a quorum queue at its length
//     limit with overflow=reject-publish, an internal error), or a message
//     that breaks an AMQP limit (a routing key over 255 bytes) and was
//     never sent.
//   - Unknown: everything that may or may not have reached a queue: the
//     context ended before the confirm; the channel or connection closed
//     with the confirm pending (amqp091-go then reports every pending
//     confirm as a nack; those are not broker nacks, and ferryamqp never
//     reports them rejected). The relay retries unknown outcomes with the
//     same event id, so a message may be stored twice: consumers
//     deduplicate by business key.
//   - Unknown, not sent (ferrytype.ErrNotSent, PublishResult.NotSent): a
//     message that provably never left the process: the connection was
//     down (after Config.ReconnectWait), RabbitMQ blocked the connection
//     before it was written, it never got a slot in the confirm window, its
//     channel closed before it was written, or the context ended first.
//     RabbitMQ cannot have it. The relay gives such events back to NEW
//     without spending an attempt, and claims nothing while Connected is
//     false (connection down or blocked; see ferrybroker.Connectivity), so
//     an outage never makes an event DEAD. A message written to the socket
//     whose confirm is lost stays plain unknown and counts as an attempt.
//
// # Blocked connections
//
// Under a memory or disk alarm RabbitMQ stops reading from connections
// that publish and says so with connection.blocked. A publish would then
// hang in a socket write that no context interrupts. ferryamqp writes on a
// goroutine of its own per channel, so Publish always returns when its
// context ends (every message not confirmed by then unknown, not sent
// for those never written), watches connection.blocked and writes nothing
// more until the alarm clears; Check, Connected and Disconnected report
// the block.
//
// # Topology
//
// Config.Topology lists exchanges, queues and bindings. With Declare they
// are declared at start and after each reconnect; without, exchanges and
// queues are checked with passive declares, and a missing one is a start
// error that names it ("exchange orders does not exist: declare it, or let
// ferry declare it (Declare, --declare)"). Bindings cannot be listed over
// AMQP 0-9-1: a missing binding shows up as returned messages, which the
// relay counts and retries, never as confirmed ones.
//
// Queues are durable quorum queues by default: replicated by Raft,
// confirmed only once a majority stored a message, with a delivery count
// per message and a delivery limit; on the reference machine they also
// take about twice the publish rate of classic durable queues with a much
// tighter p99. Classic queues are available (QueueClassic) and replicate
// nothing. A declared queue gets a parking queue (Name+".parking", same
// type) as its dead-letter target through the default exchange: on quorum
// queues with x-dead-letter-strategy=at-least-once (which needs
// x-overflow=reject-publish) and x-delivery-limit (default 20).
// Queue.Arguments shows exactly what is declared.
//
// # Connections
//
// New takes a connection the caller opened and owns; when it closes, the
// publisher reports every later publish unknown. Dial opens its own
// (amqp:// or amqps://, ConnectionConfig.TLS for a custom *tls.Config) and
// reconnects with backoff after a loss, declaring or checking the topology
// again; a Publish during the outage waits up to Config.ReconnectWait,
// then reports unknown. Neither accepts amqp091-go's automatic recovery: a
// recovered channel restarts its delivery tags and nacks the confirms it
// had pending, which would make lost confirms look like broker nacks and
// let a consumer ack a new delivery with an old tag. Credentials never
// appear in errors or logs.
//
// # Clusters
//
// Dial, DialConsumer and Connect take the nodes of a RabbitMQ cluster as
// one broker URL, their AMQP URLs comma-separated, each whole and all in
// the same virtual host (amqp://u:p@rabbit1:5672/app,amqp://u:p@rabbit2:5672/app,
// amqp://u:p@rabbit3:5672/app; an empty element, or differing virtual
// hosts, is an ErrInvalidConfig error). A publisher or consumer holds one
// connection, to one node at a time. The first connection tries the nodes
// in the order given; after a loss, each reconnection attempt starts at
// the node after the one last connected to and tries every node once
// before its backoff, so that a dead node is passed over at once. Moving
// to another node is logged once, with the old and the new node's
// address; a failed attempt says why at every node. What was in flight
// when the node died ends unknown, as after any connection loss, and the
// relay publishes it again: declare quorum queues (the default), whose
// confirm means a majority of the queue's members stored the message, so
// that a confirmed message survives the loss of any one node. A single
// URL works as it always did. Config.ManagementURL may list the nodes'
// management APIs too, for Durability.
//
// # Consuming
//
// A Consumer (NewConsumer, DialConsumer) is a ferrybroker.Consumer and
// passes ferrybrokertest.ExerciseConsumer. It consumes one queue with manual
// acks, at most ConsumerConfig.Prefetch deliveries ahead and
// ConsumerConfig.Concurrency handlers at once. For each delivery, in this
// order:
//
//  1. receive it and validate it (a JSON content type, or none, must hold
//     valid JSON; ConsumerConfig.Validate adds checks, such as
//     ferrybroker.RequireHeaders);
//  2. run the Handler, which begins a transaction, checks idempotency,
//     writes the business effect and commits (ferry's inbox does this);
//  3. only after the handler returned nil, ack the delivery.
//
// An ack before the commit could lose the effect if the process died in
// between; an ack lost after the commit only causes a redelivery, which
// the handler's idempotency absorbs.
//
// Acks are single (multiple=false) and go through the delivery's own
// Acknowledger, the channel it arrived on. A multiple ack covers every
// earlier delivery of the channel, and with concurrent handlers an earlier
// one may still be in progress: ferryamqp never acks past it. Acking the
// contiguous prefix of completed deliveries would save frames, but an ack
// costs far less than the database transaction before it (the broker acks
// 40,000 to 70,000 msg/s here, the database commits a few thousand), and a
// slow handler would hold back the acks of every later delivery. Because
// the tag is bound to its channel, a delivery received before a reconnect
// can only fail to ack (RabbitMQ then redelivers it); it can never ack a
// delivery of the new channel.
//
// # Failures and parking
//
// ConsumerConfig.Redelivery, a ferrybroker.RedeliveryPolicy, decides,
// through the settle policy every broker's consumer shares
// (ferrybroker.Settler). A handler error is transient unless it wraps
// ferrytype.ErrPoison: the delivery waits Redelivery.RetryDelay, doubling
// with its delivery count up to Redelivery.MaxRetryDelay, then goes back
// to the queue (basic.nack with requeue): no hot loop, and the delivery
// keeps its prefetch slot while it waits. A poison error, a malformed
// message, or a transient failure on delivery Redelivery.MaxDeliveries
// parks the message: a copy carrying the park headers
// (ferrybroker.HeaderParkReason, HeaderParkedAt, HeaderParkRoute,
// HeaderParkSource, HeaderParkDeliveryCount, and HeaderParkExchange) is
// published with a confirm to the parking queue, and only then is the
// original acked. If parking fails, the message is requeued: it is never
// acked and forgotten.
//
// Quorum queues count deliveries across consumers and restarts
// (x-delivery-count). Classic queues do not: the consumer counts failures
// per message id in memory, so the count restarts with the consumer, and a
// failing message without an id is retried (with backoff) until its
// handler returns ErrPoison. The queue's x-delivery-limit is a backstop for
// a message that kills its consumer before it can park it: past the limit
// RabbitMQ dead-letters it to the parking queue itself, with the reason
// delivery_limit in x-death. Keep Redelivery.MaxDeliveries (default 10)
// at or below the queue's delivery limit (default 20), so that the
// consumer parks first, with the real reason.
//
// # Replaying parked messages
//
// Once the cause of the parking is fixed, ReplayParked moves parked
// messages back to the queue they were parked from (ferry parked replay):
// each is published again, with a confirm, through the default exchange
// straight to that queue (not to its original exchange, which would
// deliver it again to every other queue bound there), and only then acked
// in the parking queue. It keeps the message's id, body, properties and
// headers and adds ferrybroker.HeaderReplayCount; the Consumer hands it to
// its handler with the routing key it was first published with, from the
// park headers. ListParked looks at the first messages of a parking queue
// without removing them.
//
// # Stopping and crashing
//
// Stop cancels the consumer (RabbitMQ sends no more deliveries), lets the
// handlers in progress finish and acks those that succeeded, then closes
// the channels: every delivery not acked by then (prefetched but not
// started, waiting for a retry) goes back to the queue. A consumer killed
// at any point loses nothing: RabbitMQ redelivers whatever it had not
// acked, marked redelivered.
//
// # RabbitMQ versions
//
// Quorum queues need RabbitMQ 3.8 or later; at-least-once dead-lettering
// needs 3.10 (before it, quorum queues dead-letter at most once: a message
// dead-lettered while the parking queue is unavailable is lost; the
// consumer's own parking, a confirmed copy before the ack, does not depend
// on it). Delivery limits exist only on quorum queues. On 3.x, a delivery
// returned to a quorum queue for any reason, a closed channel included,
// counts in x-delivery-count: a consumer stopped with deliveries prefetched
// raises their count, which is why Prefetch defaults small. RabbitMQ 4.0
// made 20 the default delivery limit of quorum queues. Developed and
// tested against RabbitMQ 3.10.
package ferryamqp
