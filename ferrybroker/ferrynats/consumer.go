package ferrynats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
	"github.com/ferrydev/ferry/internal/runner"
)

// Headers of a parked copy that only JetStream has, next to the park
// headers every consumer sets (ferrybroker.HeaderParkReason,
// HeaderParkedAt, HeaderParkRoute: the original's subject,
// HeaderParkSource: the stream, HeaderParkDeliveryCount).
const (
	// HeaderParkStreamSeq is the stream sequence of the original.
	HeaderParkStreamSeq = "Ferry-Park-Stream-Seq"
	// HeaderParkMsgID is the original's Nats-Msg-Id: the copy has an id
	// of its own, which makes a repeated park a duplicate.
	HeaderParkMsgID = "Ferry-Park-Msg-Id"
)

// ConsumerConfig configures a Consumer. Zero fields take the default named
// in their comment.
//
// The embedded options are every consumer's (see
// ferrybroker.ConsumerOptions); on JetStream, a delivery to retry after
// Redelivery's delay is negatively acknowledged with that delay
// (NakWithDelay), and JetStream counts deliveries across consumers and
// restarts. ParkTimeout bounds the publish of a parked copy; Name defaults
// to Durable.
type ConsumerConfig struct {
	ferrybroker.ConsumerOptions
	// Stream and Durable name the JetStream stream and durable consumer.
	// Required.
	Stream, Durable string
	// FilterSubjects restricts the consumer to these subjects. Default:
	// the whole stream.
	FilterSubjects []string
	// Declare creates or updates the durable consumer at start; otherwise
	// it must exist (with explicit acks).
	Declare bool
	// ParkSubject receives poison and malformed messages and messages
	// whose last delivery allowed by Redelivery failed, with the park
	// headers. Required: a message is never acked and forgotten. A stream
	// must capture the subject, or parking fails and the message is
	// retried instead.
	ParkSubject string
	// AckWait is how long JetStream waits for an ack before redelivering.
	// A handler running longer keeps its message with progress signals.
	// Default 30s.
	AckWait time.Duration
}

// ConsumerStats counts what a consumer did (see ferrybroker.ConsumerStats).
type ConsumerStats = ferrybroker.ConsumerStats

// Consumer runs a handler on the messages of a durable JetStream consumer,
// as ferrybroker.Consumer describes: the handler commits its effect, then
// the message is acked (and the ack confirmed by the server). A transient
// failure is negatively acknowledged with the delay of
// ConsumerConfig.Redelivery; a poison message (an error wrapping
// ferrytype.ErrPoison), a malformed one, or one whose last allowed
// delivery failed is copied to ParkSubject with the park headers, and only
// once the copy is stored is the original terminated. A delivery left by
// the consumer (stopping, a handler cut off) is negatively acknowledged
// without delay: JetStream delivers it again at once. An error at the
// fault point ferryfault.ConsumerAfterHandle (set in the context given to
// Start) acts as a crash there: the message is left unacked, not even
// negatively acknowledged, and JetStream delivers it again after AckWait.
//
// Delivery counts come from JetStream, which counts across consumers and
// restarts, but takes back a delivery it made to a consumer no longer
// listening (one that was stopping): a message left at a stop may come
// back with the same count, and Redelivered false.
type Consumer struct {
	js      jetstream.JetStream
	handler ferrybroker.Handler
	cfg     ConsumerConfig
	log     *slog.Logger
	settler *ferrybroker.Settler

	run  runner.Runner
	iter jetstream.MessagesContext
}

var _ ferrybroker.Consumer = (*Consumer)(nil)

// NewConsumer returns a consumer; Start or Run runs it.
func NewConsumer(js jetstream.JetStream, handler ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if nilness.Nil(js) || handler == nil || cfg == nil {
		return nil, fmt.Errorf("%w: ferrynats.NewConsumer needs JetStream, a handler and a config", ferrytype.ErrInvalidConfig)
	}
	c := *cfg
	c.ConsumerOptions = c.ConsumerOptions.WithDefaults(c.Durable)
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	switch {
	case c.Stream == "" || c.Durable == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.Stream and Durable are required", ferrytype.ErrInvalidConfig)
	case c.ParkSubject == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.ParkSubject is required: poison messages must go somewhere", ferrytype.ErrInvalidConfig)
	case c.Check() != nil:
		return nil, c.Check()
	case c.AckWait < 0:
		return nil, fmt.Errorf("%w: ConsumerConfig.AckWait %s must not be negative", ferrytype.ErrInvalidConfig, c.AckWait)
	}
	log := c.Logger.With("stream", c.Stream, "consumer", c.Durable)
	return &Consumer{js: js, handler: handler, cfg: c, log: log,
		settler: ferrybroker.NewSettler(c.ConsumerOptions, log, slog.String("park_subject", c.ParkSubject))}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return c.settler.Observer.Stats() }

// Start binds to (or declares) the durable consumer and starts handling
// messages; ctx bounds the start only. The handlers' contexts keep ctx's
// values.
func (c *Consumer) Start(ctx context.Context) error {
	err := c.run.Start(ctx, func(work context.Context) error {
		var (
			cons jetstream.Consumer
			err  error
		)
		if c.cfg.Declare {
			cc := jetstream.ConsumerConfig{
				Durable: c.cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.cfg.AckWait,
				// Parking is this consumer's job: the server never gives
				// up on a message by itself.
				MaxDeliver: -1, MaxAckPending: max(c.cfg.Concurrency*4, 64),
			}
			if len(c.cfg.FilterSubjects) == 1 {
				cc.FilterSubject = c.cfg.FilterSubjects[0]
			} else {
				cc.FilterSubjects = c.cfg.FilterSubjects
			}
			cons, err = c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, cc)
		} else {
			cons, err = c.js.Consumer(ctx, c.cfg.Stream, c.cfg.Durable)
		}
		if err != nil {
			return fmt.Errorf("consumer %s on stream %s: %w", c.cfg.Durable, c.cfg.Stream, err)
		}
		if c.iter, err = cons.Messages(jetstream.PullMaxMessages(c.cfg.Concurrency)); err != nil {
			return fmt.Errorf("consumer %s: %w", c.cfg.Durable, err)
		}
		msgs := make(chan jetstream.Msg)
		c.run.Go(func() { c.receive(msgs) })
		for range c.cfg.Concurrency {
			c.run.Go(func() {
				for msg := range msgs {
					c.handle(work, msg)
				}
			})
		}
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferrynats: consumer %w", err)
	}
	return err
}

// receive hands the iterator's messages to the handlers until it is
// closed (Stop drains it), then closes msgs.
func (c *Consumer) receive(msgs chan<- jetstream.Msg) {
	defer close(msgs)
	for {
		msg, err := c.iter.Next()
		switch {
		case err == nil:
			msgs <- msg
			continue
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			// Stop, or a terminal error (the consumer was deleted), which
			// Next reported before.
			return
		}
		// The iterator goes on after other errors: wait a moment, so that
		// a repeating one is no hot loop.
		c.log.Error("receive failed; receiving again", "error", err)
		if !c.run.Sleep(100 * time.Millisecond) {
			return
		}
	}
}

// Stop stops fetching and lets the handlers in flight finish, acking those
// that returned nil; messages received but not started are negatively
// acknowledged, so JetStream delivers them again at once. If ctx ends
// first, the handlers' context is cancelled, their messages are left, and
// Stop returns without waiting further. Stopping twice is safe.
func (c *Consumer) Stop(ctx context.Context) error {
	if _, err := c.run.Stop(ctx, func() { c.iter.Drain() }); err != nil {
		return fmt.Errorf("stop: handlers still running: %w", err)
	}
	return nil
}

// Run starts the consumer and runs it until ctx ends, then stops it,
// giving handlers in flight up to ShutdownTimeout to finish.
func (c *Consumer) Run(ctx context.Context) error {
	return ferrybroker.RunUntilDone(ctx, c.Start, c.Stop, c.cfg.ShutdownTimeout)
}

// delivery converts msg and decodes it with the consumer's Decoding. It
// returns the payload's content type once decoded (the Content-Type header
// with ferry's form), and the decoding's error, which makes the delivery
// malformed.
func (c *Consumer) delivery(msg jetstream.Msg) (*ferrybroker.Delivery, *jetstream.MsgMetadata, string, error) {
	d := &ferrybroker.Delivery{Route: msg.Subject(), Payload: msg.Data(), Headers: map[string]string{}}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			d.Headers[k] = v[0]
		}
	}
	d.MessageID = d.Headers[jetstream.MsgIDHeader]
	ct, bad := ferrybroker.Decode(c.cfg.Decoding, d, d.Headers["Content-Type"], ferrybroker.ProtocolNATS)
	meta, err := msg.Metadata()
	if err != nil {
		return d, nil, ct, bad
	}
	d.DeliveryCount = int(meta.NumDelivered)
	d.Redelivered = meta.NumDelivered > 1
	return d, meta, ct, bad
}

// handle runs the order of work on msg with the handlers' context ctx.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	d, meta, ct, bad := c.delivery(msg)
	if bad == nil {
		bad = ferrybroker.CheckDelivery(ct, d, c.cfg.Validate)
	}
	c.settler.Observer.Delivered(d)
	a := &acker{ctx: ctx, msg: msg, d: d, meta: meta, c: c}
	select {
	case <-c.run.Stopping():
		// Received, not started: back to the stream at once.
		c.settler.Settle(ctx, d, a, ferrybroker.StepStopping, nil)
		return
	default:
	}
	c.settler.Handle(ctx, d, a, func(ctx context.Context, d *ferrybroker.Delivery) error {
		// Keep the message while a long handler runs.
		t := time.NewTicker(c.cfg.AckWait / 2)
		defer t.Stop()
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case <-t.C:
					_ = msg.InProgress()
				}
			}
		}()
		return c.handler(ctx, d)
	}, bad)
}

// acker settles one message on JetStream (see ferrybroker.Acknowledger).
type acker struct {
	c    *Consumer
	ctx  context.Context // the handlers'
	msg  jetstream.Msg
	d    *ferrybroker.Delivery
	meta *jetstream.MsgMetadata
}

// Ack acks the message, and returns once the server confirmed the ack. It
// covers this message only (AckExplicit); past AckWait the server
// redelivers anyway.
func (a *acker) Ack() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.c.cfg.AckWait)
	defer cancel()
	return a.msg.DoubleAck(ctx)
}

// Retry negatively acknowledges the message with the delay.
func (a *acker) Retry(delay time.Duration, _ error) error { return a.msg.NakWithDelay(delay) }

// Leave negatively acknowledges the message without delay: JetStream
// delivers it again at once (or after the ack wait, if even the nak fails).
func (a *acker) Leave() {
	if err := a.msg.Nak(); err != nil {
		a.c.log.Debug("nak failed; the message comes back after the ack wait", "message_id", a.d.MessageID, "error", err)
	}
}

// Abandon does nothing, as a crash would: no nak, JetStream delivers the
// message again after the ack wait.
func (a *acker) Abandon() {}

// Park stores a copy of the message on the park subject, then terminates
// the message.
func (a *acker) Park(reason error) error {
	c, msg := a.c, a.msg
	h := nats.Header{}
	for k, v := range msg.Headers() {
		h[k] = v
	}
	var seq uint64
	if a.meta != nil {
		seq = a.meta.Sequence.Stream
	}
	for _, kv := range ferrybroker.ParkHeaders(reason, a.d, msg.Subject(), c.cfg.Stream) {
		h.Set(kv[0], kv[1])
	}
	h.Set(HeaderParkStreamSeq, strconv.FormatUint(seq, 10))
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		h.Set(HeaderParkMsgID, id)
	}
	// The parked copy's id makes a repeated park a JetStream duplicate.
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("park:%s:%s:%d", c.cfg.Stream, c.cfg.Durable, seq))
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ParkTimeout)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: c.cfg.ParkSubject, Data: msg.Data(), Header: h}); err != nil {
		return err
	}
	if err := msg.Term(); err != nil {
		c.log.Warn("terminate after park failed; the message may be parked twice", "message_id", a.d.MessageID, "error", err)
	}
	return nil
}
