package ferrywatermill

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
	"github.com/ferrydev/ferry/internal/runner"
)

// MetadataRedelivered is the metadata key through which watermill-amqp
// says the broker delivered a message before ("true"); a Consumer sets
// Delivery.Redelivered from it as well as from its own count.
const MetadataRedelivered = "_watermill_amqp_redelivered"

// maxCounted bounds the deliveries a Consumer counts at once (those
// retried and not yet settled for good); past it the counts start again.
const maxCounted = 100_000

// maxConcurrency bounds ConsumerConfig.Concurrency: a Consumer subscribes
// that many times.
const maxConcurrency = 1024

// ConsumerConfig configures a Consumer. Zero fields take the default named
// in their comment.
//
// The embedded options are every consumer's (see
// ferrybroker.ConsumerOptions), with what Watermill changes about them:
//
//   - Concurrency (at most 1024): the Consumer subscribes to Topic that
//     many times, and each subscription hands over its next message once
//     the last was acked or nacked. Set the subscriber to prefetch one
//     message per subscription (watermill-amqp's queue configs do), or a
//     held message holds back those prefetched behind it.
//   - Redelivery: Watermill keeps no delivery count: the Consumer counts
//     deliveries of each message id itself, so the count starts again in
//     a new process, and a message nacked after its delay may come back
//     to another consumer, which counts from one. A delivery to retry is
//     held for its delay and then nacked.
//   - Validate: a message with a JSON Content-Type metadata, or none, is
//     always checked to hold valid JSON.
//   - ParkTimeout bounds the publish of a parked copy; Name defaults to
//     Topic.
type ConsumerConfig struct {
	ferrybroker.ConsumerOptions
	// Topic is the Watermill topic consumed. Required.
	Topic string
	// Park and ParkTopic receive a copy, with the park headers, of poison
	// and malformed messages and of messages whose last delivery allowed
	// by Redelivery failed; only once Park.Publish returned nil is the
	// original acked. Required: a message is never acked and forgotten.
	// Park should be a publisher that stores before it returns (see
	// Stored).
	Park      message.Publisher
	ParkTopic string
	// Source names what is consumed in the park header
	// ferrybroker.HeaderParkSource. Default: Topic.
	Source string
}

// Consumer runs a ferry handler on the messages of any Watermill
// subscriber, as ferrybroker.Consumer describes: the handler commits its
// effect (ferry.InboxHandler: the inbox marker and the effect in one
// transaction), then the message is acked. A transient failure is held
// for the retry delay and nacked; a poison message, a malformed one, or
// one whose last allowed delivery failed is published to ParkTopic with
// the park headers, and only then acked. A delivery the consumer does not
// decide (stopping, a handler cut off) is nacked. An error at the fault
// point ferryfault.ConsumerAfterHandle (set in the context given to Start)
// acts as a crash of the handler's worker there: the message is neither
// acked nor nacked until Stop, which nacks it.
//
// Watermill's Ack is not confirmed by the broker: an ack lost on the way
// means one more delivery, which the inbox reports as a duplicate.
type Consumer struct {
	sub     message.Subscriber
	handler ferrybroker.Handler
	cfg     ConsumerConfig
	log     *slog.Logger
	settler *ferrybroker.Settler

	run       runner.Runner
	subCancel context.CancelFunc
	// busy counts the workers until each settled its last message: the
	// subscriptions are cancelled after, so that no ack races their end.
	busy      sync.WaitGroup
	cancelled chan struct{} // closed once the subscriptions are cancelled

	countMu sync.Mutex
	counts  map[string]int
}

var _ ferrybroker.Consumer = (*Consumer)(nil)

// NewConsumer returns a consumer of cfg.Topic on sub; Start or Run runs it.
func NewConsumer(sub message.Subscriber, handler ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if nilness.Nil(sub) || handler == nil || cfg == nil {
		return nil, fmt.Errorf("%w: ferrywatermill.NewConsumer needs a Watermill subscriber, a handler and a config", ferrytype.ErrInvalidConfig)
	}
	c := *cfg
	c.ConsumerOptions = c.ConsumerOptions.WithDefaults(c.Topic)
	if c.Source == "" {
		c.Source = c.Topic
	}
	switch {
	case c.Topic == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.Topic is required", ferrytype.ErrInvalidConfig)
	case nilness.Nil(c.Park) || c.ParkTopic == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.Park and ParkTopic are required: poison messages must go somewhere", ferrytype.ErrInvalidConfig)
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return nil, fmt.Errorf("%w: ConsumerConfig.Concurrency %d must be within 1..%d", ferrytype.ErrInvalidConfig, c.Concurrency, maxConcurrency)
	case c.Check() != nil:
		return nil, c.Check()
	}
	log := c.Logger.With("topic", c.Topic)
	return &Consumer{sub: sub, handler: handler, cfg: c, log: log,
		settler: ferrybroker.NewSettler(c.ConsumerOptions, log, slog.String("park_topic", c.ParkTopic)), counts: map[string]int{}}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ferrybroker.ConsumerStats { return c.settler.Observer.Stats() }

// Start subscribes to the topic Concurrency times and starts handling
// messages; ctx bounds the start only. The handlers' contexts keep ctx's
// values.
func (c *Consumer) Start(ctx context.Context) error {
	err := c.run.Start(ctx, func(work context.Context) error {
		subCtx, subCancel := context.WithCancel(context.WithoutCancel(ctx))
		chans := make([]<-chan *message.Message, 0, c.cfg.Concurrency)
		for range c.cfg.Concurrency {
			var ch <-chan *message.Message
			err := safely("subscriber", func() (err error) {
				ch, err = c.sub.Subscribe(subCtx, c.cfg.Topic)
				return err
			})
			if err != nil {
				subCancel()
				for _, ch := range chans {
					go drainNack(ch)
				}
				return fmt.Errorf("ferrywatermill: subscribe to %q: %w", c.cfg.Topic, err)
			}
			chans = append(chans, ch)
		}
		c.subCancel, c.cancelled = subCancel, make(chan struct{})
		c.busy.Add(len(chans))
		for _, ch := range chans {
			c.run.Go(func() { c.work(work, ch) })
		}
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferrywatermill: consumer %w", err)
	}
	return err
}

// drainNack nacks every message of ch until it closes.
func drainNack(ch <-chan *message.Message) {
	for msg := range ch {
		msg.Nack()
	}
}

// work handles the messages of one subscription, with the handlers'
// context ctx, until Stop; then, once the subscriptions are cancelled,
// nacks what it still hands over until its channel closes.
func (c *Consumer) work(ctx context.Context, ch <-chan *message.Message) {
	idle := sync.OnceFunc(c.busy.Done)
	defer idle()
	for {
		select {
		case <-c.run.Stopping():
			idle()
			<-c.cancelled
			drainNack(ch)
			return
		case msg, ok := <-ch:
			if !ok {
				c.log.Warn("the Watermill subscription closed its channel; this worker stops")
				return
			}
			// A message handed over after Stop is left (handle sees
			// Stopping).
			if held := c.handle(ctx, msg); held != nil {
				// A fault point fired: as after a crash of this worker,
				// the message stays unsettled until the consumer stops.
				<-c.run.Stopping()
				held.Nack()
				idle()
				<-c.cancelled
				drainNack(ch)
				return
			}
		}
	}
}

// Stop stops taking messages and lets the handlers in flight finish,
// acking those that returned nil; then it cancels the subscriptions and
// nacks what they still hand over. If ctx ends first, the handlers'
// context is cancelled, their messages are nacked, and Stop returns
// ctx's error without waiting further. Stopping twice is safe.
func (c *Consumer) Stop(ctx context.Context) error {
	_, err := c.run.Stop(ctx, func() {
		go func() {
			c.busy.Wait()
			c.subCancel()
			close(c.cancelled)
		}()
	})
	if err != nil {
		return fmt.Errorf("stop: handlers still running: %w", err)
	}
	return nil
}

// Run starts the consumer and runs it until ctx ends, then stops it,
// giving handlers in flight up to ShutdownTimeout to finish.
func (c *Consumer) Run(ctx context.Context) error {
	return ferrybroker.RunUntilDone(ctx, c.Start, c.Stop, c.cfg.ShutdownTimeout)
}

// countKey is what deliveries of one message are counted by: its id, or
// for a message without one, a hash of its payload (so that a message
// without an id still reaches RedeliveryPolicy.MaxDeliveries and is parked,
// rather than retried for ever).
func countKey(d *ferrybroker.Delivery) string {
	if d.MessageID != "" {
		return "id:" + d.MessageID
	}
	h := fnv.New64a()
	h.Write(d.Payload)
	return "payload:" + strconv.FormatUint(h.Sum64(), 16)
}

// count records one more delivery of d's message and sets its count.
func (c *Consumer) count(d *ferrybroker.Delivery) {
	k := countKey(d)
	c.countMu.Lock()
	if len(c.counts) >= maxCounted {
		clear(c.counts)
	}
	c.counts[k]++
	d.DeliveryCount = c.counts[k]
	c.countMu.Unlock()
	d.Redelivered = d.DeliveryCount > 1 || d.Headers[MetadataRedelivered] == "true"
}

// forget drops the count of a message settled for good.
func (c *Consumer) forget(d *ferrybroker.Delivery) {
	c.countMu.Lock()
	delete(c.counts, countKey(d))
	c.countMu.Unlock()
}

// handle runs the handler on msg and settles it; it returns msg when a
// fault point left it unsettled.
func (c *Consumer) handle(ctx context.Context, msg *message.Message) *message.Message {
	d, contentType, derr := delivery(c.cfg.Topic, msg)
	c.count(d)
	c.settler.Observer.Delivered(d)
	a := &acker{c: c, msg: msg, d: d}
	select {
	case <-c.run.Stopping():
		c.settler.Settle(ctx, d, a, ferrybroker.StepStopping, nil)
		return nil
	default:
	}
	if derr == nil {
		derr = ferrybroker.CheckDelivery(contentType, d, c.cfg.Validate)
	}
	c.settler.Handle(ctx, d, a, c.handler, derr)
	if a.held {
		return msg
	}
	return nil
}

// acker settles one Watermill message (see ferrybroker.Acknowledger).
type acker struct {
	c    *Consumer
	msg  *message.Message
	d    *ferrybroker.Delivery
	held bool // abandoned: the worker holds it until Stop
}

// errAckRefused is the cause of a delivery left because its message
// refused the ack (it was nacked).
var errAckRefused = errors.New("ack refused")

// Ack acks the message. Watermill's Ack is not confirmed by the broker.
func (a *acker) Ack() error {
	if !a.msg.Ack() {
		return errAckRefused
	}
	a.c.forget(a.d)
	return nil
}

// Retry holds the message for the delay, then nacks it; a Stop ends the
// hold at once.
func (a *acker) Retry(delay time.Duration, _ error) error {
	t := time.NewTimer(delay)
	select {
	case <-t.C:
	case <-a.c.run.Stopping():
		t.Stop()
	}
	a.msg.Nack()
	return nil
}

// Leave nacks the message: the broker delivers it again.
func (a *acker) Leave() { a.msg.Nack() }

// Abandon leaves the message neither acked nor nacked, as after a crash of
// its worker: the worker holds it until the consumer stops, then nacks it.
func (a *acker) Abandon() { a.held = true }

// Park publishes a copy of the message to the park topic, then acks the
// message.
func (a *acker) Park(reason error) error {
	c, msg, d := a.c, a.msg, a.d
	cp := parkCopy(msg, reason, d, c.cfg.Topic, c.cfg.Source)
	pctx, cancel := context.WithTimeout(context.Background(), c.cfg.ParkTimeout)
	defer cancel()
	cp.SetContext(pctx)
	done := make(chan error, 1)
	go func() { done <- publishSafely(c.cfg.Park, c.cfg.ParkTopic, cp) }()
	var err error
	select {
	case err = <-done:
	case <-pctx.Done():
		err = fmt.Errorf("park publish not done within %s", c.cfg.ParkTimeout)
	}
	if err != nil {
		return err
	}
	if !msg.Ack() {
		c.log.Warn("ack after park refused; the message may be parked twice", "message_id", d.MessageID)
	}
	c.forget(d)
	return nil
}

// parkCopy returns the copy of msg to park: its UUID, payload and metadata
// with the park headers.
func parkCopy(msg *message.Message, reason error, d *ferrybroker.Delivery, route, source string) *message.Message {
	cp := message.NewMessage(msg.UUID, msg.Payload)
	cp.Metadata = maps.Clone(msg.Metadata)
	if cp.Metadata == nil {
		cp.Metadata = message.Metadata{}
	}
	delete(cp.Metadata, MetadataRedelivered)
	for _, kv := range ferrybroker.ParkHeaders(reason, d, route, source) {
		cp.Metadata.Set(kv[0], kv[1])
	}
	return cp
}
