package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// Broker is the broker a bench publishes to, with a destination of its own
// that Close removes again: on RabbitMQ a durable queue of QueueType bound
// to amq.topic, on NATS a JetStream stream on file storage.
type Broker struct {
	// Kind is "amqp" or "nats".
	Kind string
	// Dest is the routing key or subject the bench's events carry.
	Dest string

	url string
	// RabbitMQ
	conn      *amqp.Connection
	queue     string
	queueType string
	// NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
}

// OpenBroker connects to the broker at rawURL (amqp://, amqps://, nats://,
// tls://) and declares a destination named after name; queueType is the
// RabbitMQ queue type ("quorum" or "classic").
func OpenBroker(ctx context.Context, rawURL, name, queueType string) (*Broker, error) {
	b := &Broker{url: rawURL}
	switch open.BrokerSystem(rawURL) {
	case "rabbitmq":
		conn, err := amqp.DialConfig(rawURL, amqp.Config{Heartbeat: 10 * time.Second, Properties: amqp.Table{"connection_name": "ferry-bench"}})
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %s", ferrytype.RedactURL(rawURL), ferrytype.RedactURL(err.Error()))
		}
		b.Kind, b.conn, b.queue, b.queueType, b.Dest = "amqp", conn, name, queueType, "ferrybench."+name
		ch, err := conn.Channel()
		if err != nil {
			b.Close()
			return nil, err
		}
		defer ch.Close()
		if _, err := ch.QueueDeclare(b.queue, true, false, false, false, amqp.Table{"x-queue-type": queueType}); err != nil {
			b.Close()
			return nil, fmt.Errorf("declare queue %s: %w", b.queue, err)
		}
		if err := ch.QueueBind(b.queue, b.Dest, "amq.topic", false, nil); err != nil {
			b.Close()
			return nil, fmt.Errorf("bind queue %s: %w", b.queue, err)
		}
	case "nats":
		nc, err := nats.Connect(rawURL, nats.Name("ferry-bench"))
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %s", ferrytype.RedactURL(rawURL), ferrytype.RedactURL(err.Error()))
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		if err != nil {
			nc.Close()
			return nil, err
		}
		b.Kind, b.nc, b.js = "nats", nc, js
		b.stream = strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		b.Dest = "ferrybench." + name + ".paid"
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream, Subjects: []string{"ferrybench." + name + ".>"},
			Storage: jetstream.FileStorage}); err != nil {
			b.Close()
			return nil, fmt.Errorf("create stream %s: %w", b.stream, err)
		}
	default:
		return nil, fmt.Errorf("%w: broker URL %s: want amqp://, amqps://, nats:// or tls://", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	return b, nil
}

// Publisher opens a relay's own publisher, as ferry relay would.
func (b *Broker) Publisher(ctx context.Context) (ferrybroker.Publisher, error) {
	if b.Kind == "amqp" {
		p, err := ferryamqp.Dial(ctx, b.url, &ferryamqp.Config{})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	p, err := ferrynats.Dial(ctx, b.url, &ferrynats.DialConfig{Config: ferrynats.Config{Stream: b.stream}})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Purge empties the destination between runs.
func (b *Broker) Purge(ctx context.Context) error {
	if b.Kind == "amqp" {
		ch, err := b.conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		_, err = ch.QueuePurge(b.queue, false)
		return err
	}
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

// Close deletes the destination and closes the connection.
func (b *Broker) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if b.conn != nil {
		if ch, err := b.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(b.queue, false, false, false)
			ch.Close()
		}
		b.conn.Close()
	}
	if b.nc != nil {
		if b.stream != "" {
			_ = b.js.DeleteStream(ctx, b.stream)
		}
		b.nc.Close()
	}
}

// Raw publishes n persistent messages with the client library alone and
// waits for every confirm: on RabbitMQ one channel in confirm mode with
// window publishes outstanding (mandatory, delivery mode 2), on NATS
// asynchronous JetStream publishes with at most window awaiting their
// acks. It is the broker's limit the relay is compared with.
func (b *Broker) Raw(ctx context.Context, n, window int) (time.Duration, error) {
	if b.Kind == "amqp" {
		return b.rawAMQP(ctx, n, window)
	}
	return b.rawNATS(ctx, n, window)
}

func (b *Broker) rawAMQP(ctx context.Context, n, window int) (time.Duration, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, n))
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	wait := func(dc *amqp.DeferredConfirmation) error {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("raw publish: the broker nacked a message")
		}
		return nil
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if len(pending) == window {
			if err := wait(pending[0]); err != nil {
				return 0, err
			}
			pending = pending[1:]
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", b.Dest, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: fmt.Sprintf("raw-%d", i),
			Type: "OrderPaid", Body: Payload,
		})
		if err != nil {
			return 0, err
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if err := wait(dc); err != nil {
			return 0, err
		}
	}
	took := time.Since(start)
	if len(returns) > 0 {
		return 0, fmt.Errorf("raw publish: %d messages returned unroutable", len(returns))
	}
	return took, nil
}

func (b *Broker) rawNATS(ctx context.Context, n, window int) (time.Duration, error) {
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return 0, err
	}
	futures := make([]jetstream.PubAckFuture, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		f, err := js.PublishAsync(b.Dest, Payload, jetstream.WithMsgID(fmt.Sprintf("raw-%d-%d", start.UnixNano(), i)))
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	took := time.Since(start)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, fmt.Errorf("raw publish: %w", err)
		}
	}
	return took, nil
}

// Count returns how many messages the destination holds.
func (b *Broker) Count(ctx context.Context) (int, error) {
	if b.Kind == "amqp" {
		ch, err := b.conn.Channel()
		if err != nil {
			return 0, err
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(b.queue, true, false, false, false, amqp.Table{"x-queue-type": b.queueType})
		return q.Messages, err
	}
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

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
// consumer on the queue with automatic acks (RabbitMQ), or an ordered
// consumer of new messages on the stream (NATS).
func (b *Broker) Consume(ctx context.Context, fn func(id string, at time.Time)) (stop func(), err error) {
	if b.Kind == "amqp" {
		ch, err := b.conn.Channel()
		if err != nil {
			return nil, err
		}
		if err := ch.Qos(1000, 0, false); err != nil {
			ch.Close()
			return nil, err
		}
		ds, err := ch.ConsumeWithContext(ctx, b.queue, "", true, false, false, false, nil)
		if err != nil {
			ch.Close()
			return nil, err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for d := range ds {
				fn(d.MessageId, time.Now())
			}
		}()
		return func() { ch.Close(); <-done }, nil
	}
	c, err := b.js.OrderedConsumer(ctx, b.stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	cc, err := c.Consume(func(m jetstream.Msg) { fn(m.Headers().Get(jetstream.MsgIDHeader), time.Now()) })
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

// relayArgs are the broker flags a ferry relay process needs to publish to
// the bench's destination: the queue or stream to verify.
func (b *Broker) relayArgs() []string {
	if b.Kind == "amqp" {
		return []string{"--broker-url", b.url, "--queue", b.queue}
	}
	return []string{"--broker-url", b.url, "--stream", b.stream}
}
