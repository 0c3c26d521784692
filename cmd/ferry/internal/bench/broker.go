package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// Broker is the broker a bench publishes to, with a destination of its own
// that Close removes again: on RabbitMQ a durable queue of QueueType bound
// to amq.topic, on NATS a JetStream stream on file storage, on Kafka a
// topic with the brokers' default partitions and replication factor.
type Broker struct {
	// Kind is "amqp", "nats" or "kafka".
	Kind string
	// Dest is the routing key, subject or topic the bench's events carry.
	Dest string

	d destination
}

// destination is one broker's side of a bench: each broker has its own
// (broker_amqp.go, broker_nats.go, broker_kafka.go), so that the scenarios never branch on
// the broker.
type destination interface {
	// publisher opens a relay's own publisher, as ferry relay would.
	publisher(ctx context.Context) (ferrybroker.Publisher, error)
	// purge empties the destination between runs.
	purge(ctx context.Context) error
	// raw publishes n persistent messages with the client library alone,
	// with at most window awaiting their confirms, and waits for every
	// confirm.
	raw(ctx context.Context, n, window int) (time.Duration, error)
	// count returns how many messages the destination holds.
	count(ctx context.Context) (int, error)
	// consume delivers the id of each message arriving at the
	// destination to fn until stop is called.
	consume(ctx context.Context, fn func(id string, at time.Time)) (stop func(), err error)
	// plain opens a plain relay loop's own client: publish sends a batch
	// persistently and waits for every confirm.
	plain(ctx context.Context) (publish func(context.Context, []plainRow) error, closeFn func(), err error)
	// relayArgs are the broker flags of a ferry relay process.
	relayArgs() []string
	// version names the broker and the destination's kind.
	version() string
	// close deletes the destination and closes the connection.
	close()
}

// OpenBroker connects to the broker at rawURL (amqp://, amqps://, nats://,
// tls://, kafka://, kafkas://) and declares a destination named after name; queueType is the
// RabbitMQ queue type ("quorum" or "classic").
func OpenBroker(ctx context.Context, rawURL, name, queueType string) (*Broker, error) {
	switch open.BrokerSystem(rawURL) {
	case "rabbitmq":
		d, err := openAMQP(rawURL, name, queueType)
		if err != nil {
			return nil, err
		}
		return &Broker{Kind: "amqp", Dest: d.routingKey, d: d}, nil
	case "nats":
		d, err := openNATS(ctx, rawURL, name)
		if err != nil {
			return nil, err
		}
		return &Broker{Kind: "nats", Dest: d.subject, d: d}, nil
	case "kafka":
		d, err := openKafka(ctx, rawURL, name)
		if err != nil {
			return nil, err
		}
		return &Broker{Kind: "kafka", Dest: d.topic, d: d}, nil
	default:
		return nil, fmt.Errorf("%w: broker URL %s: want amqp://, amqps://, nats://, tls://, kafka:// or kafkas://", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
}

// Publisher opens a relay's own publisher, as ferry relay would.
func (b *Broker) Publisher(ctx context.Context) (ferrybroker.Publisher, error) {
	return b.d.publisher(ctx)
}

// Purge empties the destination between runs; on Kafka it remembers the
// topic's end offsets instead, from which Count and Consume start.
func (b *Broker) Purge(ctx context.Context) error { return b.d.purge(ctx) }

// Close deletes the destination and closes the connection.
func (b *Broker) Close() { b.d.close() }

// Raw publishes n persistent messages with the client library alone and
// waits for every confirm: on RabbitMQ one channel in confirm mode with
// window publishes outstanding (mandatory, delivery mode 2), on NATS
// asynchronous JetStream publishes with at most window awaiting their
// acks, on Kafka a bare franz-go producer (idempotent, acks from every
// in-sync replica) producing the relay's records with at most window
// awaiting their acks. It is the broker's limit the relay is compared with.
func (b *Broker) Raw(ctx context.Context, n, window int) (time.Duration, error) {
	return b.d.raw(ctx, n, window)
}

// Count returns how many messages the destination holds: on Kafka, the
// records past the offsets of the last Purge.
func (b *Broker) Count(ctx context.Context) (int, error) { return b.d.count(ctx) }

// expect waits up to 10s for the destination to hold exactly n messages:
// the broker's own count, checked after every drain.
func (b *Broker) expect(ctx context.Context, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.Count(ctx)
		if err != nil {
			return fmt.Errorf("count messages at the broker: %w", err)
		}
		if got == n {
			return nil
		}
		if got > n || time.Now().After(deadline) {
			return fmt.Errorf("the broker holds %d messages for %d events", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Consume delivers the id of each message arriving at the destination to
// fn, with the time it arrived, until the returned stop is called: a
// consumer on the queue with automatic acks (RabbitMQ), an ordered
// consumer of new messages on the stream (NATS), or a franz-go consumer of
// the topic's partitions from the offsets of the last Purge (Kafka).
func (b *Broker) Consume(ctx context.Context, fn func(id string, at time.Time)) (stop func(), err error) {
	return b.d.consume(ctx, fn)
}

// relayArgs are the broker flags a ferry relay process needs to publish to
// the bench's destination: the queue, stream or topic to verify.
func (b *Broker) relayArgs() []string { return b.d.relayArgs() }

func (b *Broker) version() string { return b.d.version() }
