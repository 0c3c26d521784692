package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrytype"
)

// amqpDest is a bench's destination on RabbitMQ: a durable queue of
// queueType bound to amq.topic with routingKey.
type amqpDest struct {
	url        string
	conn       *amqp.Connection
	queue      string
	queueType  string
	routingKey string
}

func openAMQP(rawURL, name, queueType string) (*amqpDest, error) {
	conn, err := amqp.DialConfig(rawURL, amqp.Config{Heartbeat: 10 * time.Second, Properties: amqp.Table{"connection_name": "ferry-bench"}})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", ferrytype.RedactURL(rawURL), ferrytype.RedactURL(err.Error()))
	}
	d := &amqpDest{url: rawURL, conn: conn, queue: name, queueType: queueType, routingKey: "ferrybench." + name}
	ch, err := conn.Channel()
	if err != nil {
		d.close()
		return nil, err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(d.queue, true, false, false, false, amqp.Table{"x-queue-type": queueType}); err != nil {
		d.close()
		return nil, fmt.Errorf("declare queue %s: %w", d.queue, err)
	}
	if err := ch.QueueBind(d.queue, d.routingKey, "amq.topic", false, nil); err != nil {
		d.close()
		return nil, fmt.Errorf("bind queue %s: %w", d.queue, err)
	}
	return d, nil
}

func (d *amqpDest) publisher(ctx context.Context) (ferrybroker.Publisher, error) {
	p, err := ferryamqp.Dial(ctx, d.url, &ferryamqp.Config{})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (d *amqpDest) purge(context.Context) error {
	ch, err := d.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueuePurge(d.queue, false)
	return err
}

func (d *amqpDest) close() {
	if d.conn == nil {
		return
	}
	if ch, err := d.conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(d.queue, false, false, false)
		ch.Close()
	}
	d.conn.Close()
}

// raw publishes on one channel in confirm mode with window publishes
// outstanding (mandatory, delivery mode 2).
func (d *amqpDest) raw(ctx context.Context, n, window int) (time.Duration, error) {
	ch, err := d.conn.Channel()
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
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", d.routingKey, true, false, amqp.Publishing{
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

func (d *amqpDest) count(context.Context) (int, error) {
	ch, err := d.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(d.queue, true, false, false, false, amqp.Table{"x-queue-type": d.queueType})
	return q.Messages, err
}

// consume runs a consumer on the queue with automatic acks.
func (d *amqpDest) consume(ctx context.Context, fn func(id string, at time.Time)) (func(), error) {
	ch, err := d.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		ch.Close()
		return nil, err
	}
	ds, err := ch.ConsumeWithContext(ctx, d.queue, "", true, false, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ds {
			fn(m.MessageId, time.Now())
		}
	}()
	return func() { ch.Close(); <-done }, nil
}

// plain opens a connection of its own with a channel in confirm mode.
func (d *amqpDest) plain(context.Context) (func(context.Context, []plainRow) error, func(), error) {
	conn, err := amqp.Dial(d.url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	publish := func(ctx context.Context, rows []plainRow) error {
		dcs := make([]*amqp.DeferredConfirmation, len(rows))
		for i, r := range rows {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", r.dest, true, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: r.id, Type: "OrderPaid",
				Body: []byte(r.payload)})
			if err != nil {
				return err
			}
			dcs[i] = dc
		}
		for _, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("the broker nacked an event")
			}
		}
		select {
		case ret := <-returns:
			return fmt.Errorf("event %s returned unroutable", ret.MessageId)
		default:
			return nil
		}
	}
	return publish, func() { ch.Close(); conn.Close() }, nil
}

func (d *amqpDest) relayArgs() []string { return []string{"--broker-url", d.url, "--queue", d.queue} }

func (d *amqpDest) version() string {
	return fmt.Sprintf("rabbitmq %v, %s queue", d.conn.Properties["version"], d.queueType)
}
