package ferrynats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// Headers a parked message carries, next to the original's own.
const (
	HeaderParkReason     = "Ferry-Park-Reason"
	HeaderParkSubject    = "Ferry-Park-Subject"
	HeaderParkStreamSeq  = "Ferry-Park-Stream-Seq"
	HeaderParkDeliveries = "Ferry-Park-Deliveries"
	HeaderParkedAt       = "Ferry-Parked-At"
)

// ConsumerConfig configures a Consumer. Zero fields take the default named
// in their comment.
type ConsumerConfig struct {
	// Stream and Durable name the JetStream stream and durable consumer.
	// Required.
	Stream, Durable string
	// FilterSubjects restricts the consumer to these subjects. Default:
	// the whole stream.
	FilterSubjects []string
	// Declare creates or updates the durable consumer at start; otherwise
	// it must exist (with explicit acks).
	Declare bool
	// ParkSubject receives poison messages and messages that failed
	// MaxDeliver times, with the reason in headers. Required: a message is
	// never acked and forgotten. A stream must capture the subject, or
	// parking fails and the message is retried instead.
	ParkSubject string
	// Concurrency is the number of handlers running at once. Default 4.
	Concurrency int
	// MaxDeliver is how many deliveries a transient failure gets before
	// the message is parked. Default 10.
	MaxDeliver int
	// AckWait is how long JetStream waits for an ack before redelivering.
	// A handler running longer keeps its message with progress signals.
	// Default 30s.
	AckWait time.Duration
	// RetryInitial and RetryMax bound the delay before a message that
	// failed is delivered again; it doubles per delivery. Defaults 1s, 1m.
	RetryInitial, RetryMax time.Duration
	// Logger receives the consumer's logs. Default: discarded.
	Logger *slog.Logger
	// FaultPoint, when set, is called at ferrybroker.FaultConsumerAfterHandle;
	// a non-nil error acts as a crash there: the delivery is left unacked.
	// For fault-injection tests only.
	FaultPoint func(ctx context.Context, point string) error
}

// ConsumerStats counts what a consumer did.
type ConsumerStats struct {
	Handled, Acked, Retried, Parked, ParkFailed int64
}

// Consumer runs a handler on the messages of a durable JetStream consumer.
// The order of work is R1.6's: the handler commits its effect, then the
// message is acked. A transient failure is negatively acknowledged with a
// growing delay; a poison message (an error wrapping ferrytype.ErrPoison)
// or one that failed MaxDeliver times is copied to ParkSubject with its
// reason, and only once the copy is stored is the original terminated.
type Consumer struct {
	js      jetstream.JetStream
	handler ferrybroker.Handler
	cfg     ConsumerConfig
	log     *slog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	iter    jetstream.MessagesContext
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stats   struct {
		sync.Mutex
		ConsumerStats
	}
}

// NewConsumer returns a consumer; Start runs it.
func NewConsumer(js jetstream.JetStream, handler ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if js == nil || handler == nil || cfg == nil {
		return nil, fmt.Errorf("%w: ferrynats.NewConsumer needs JetStream, a handler and a config", ferrytype.ErrInvalidConfig)
	}
	c := *cfg
	switch {
	case c.Stream == "" || c.Durable == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.Stream and Durable are required", ferrytype.ErrInvalidConfig)
	case c.ParkSubject == "":
		return nil, fmt.Errorf("%w: ConsumerConfig.ParkSubject is required: poison messages must go somewhere", ferrytype.ErrInvalidConfig)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 10
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{js: js, handler: handler, cfg: c, log: c.Logger.With("stream", c.Stream, "consumer", c.Durable)}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	c.stats.Lock()
	defer c.stats.Unlock()
	return c.stats.ConsumerStats
}

func (c *Consumer) count(f func(*ConsumerStats)) {
	c.stats.Lock()
	f(&c.stats.ConsumerStats)
	c.stats.Unlock()
}

// Start binds to (or declares) the durable consumer and starts handling
// messages.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ferrytype.ErrClosed
	}
	if c.started {
		return errors.New("ferrynats: consumer already started")
	}
	var (
		cons jetstream.Consumer
		err  error
	)
	if c.cfg.Declare {
		cc := jetstream.ConsumerConfig{
			Durable: c.cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.cfg.AckWait,
			// Parking is this consumer's job: the server never gives up on
			// a message by itself.
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
	iter, err := cons.Messages(jetstream.PullMaxMessages(c.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.cfg.Durable, err)
	}
	c.iter = iter
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.started = true
	work := make(chan jetstream.Msg)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(work)
		for {
			msg, err := iter.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					c.log.Error("receive failed; consumer stops", "error", err)
				}
				return
			}
			work <- msg
		}
	}()
	for i := 0; i < c.cfg.Concurrency; i++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for msg := range work {
				c.handle(msg)
			}
		}()
	}
	return nil
}

// Stop stops fetching, lets the handlers finish the messages already
// received (acking what committed) and returns. Messages not handled stay
// unacked and are delivered again. If ctx ends first, the handlers'
// context is cancelled. Stopping twice is safe.
func (c *Consumer) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.stopped {
		c.stopped = true
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	c.iter.Drain()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		c.cancel()
		<-done
	}
	c.cancel()
	return err
}

func (c *Consumer) handle(msg jetstream.Msg) {
	ctx := c.ctx
	d := &ferrybroker.Delivery{Route: msg.Subject(), Payload: msg.Data(), Headers: map[string]string{}}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			d.Headers[k] = v[0]
		}
	}
	d.MessageID = d.Headers[jetstream.MsgIDHeader]
	d.FillFromHeaders()
	meta, err := msg.Metadata()
	if err == nil {
		d.DeliveryCount = int(meta.NumDelivered)
		d.Redelivered = meta.NumDelivered > 1
	}

	// Keep the message while a long handler runs.
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(c.cfg.AckWait / 2)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	err = c.handler(ctx, d)
	close(stopProgress)
	c.count(func(s *ConsumerStats) { s.Handled++ })

	if err == nil {
		if c.cfg.FaultPoint != nil {
			if ferr := c.cfg.FaultPoint(ctx, ferrybroker.FaultConsumerAfterHandle); ferr != nil {
				c.log.Warn("fault after handle: delivery left unacked", "message_id", d.MessageID, "error", ferr)
				return
			}
		}
		if err := msg.Ack(); err != nil {
			// The effect is committed; the redelivery will be a duplicate.
			c.log.Warn("ack failed; the message will come again", "message_id", d.MessageID, "error", err)
			return
		}
		c.count(func(s *ConsumerStats) { s.Acked++ })
		return
	}
	if errors.Is(err, ferrytype.ErrPoison) || d.DeliveryCount >= c.cfg.MaxDeliver {
		reason := err.Error()
		if !errors.Is(err, ferrytype.ErrPoison) {
			reason = fmt.Sprintf("failed %d deliveries: %s", d.DeliveryCount, reason)
		}
		c.park(ctx, msg, d, meta, reason)
		return
	}
	delay := c.cfg.RetryInitial << min(max(d.DeliveryCount-1, 0), 20)
	if delay > c.cfg.RetryMax || delay <= 0 {
		delay = c.cfg.RetryMax
	}
	c.log.Info("handler failed; delivering again later", "message_id", d.MessageID, "delivery", d.DeliveryCount,
		"retry_in", delay, "error", err)
	if nerr := msg.NakWithDelay(delay); nerr != nil {
		c.log.Warn("nak failed; the message comes back after the ack wait", "message_id", d.MessageID, "error", nerr)
	}
	c.count(func(s *ConsumerStats) { s.Retried++ })
}

// park stores a copy of msg on the park subject, then terminates msg. If
// the copy cannot be stored, msg is delivered again later instead.
func (c *Consumer) park(ctx context.Context, msg jetstream.Msg, d *ferrybroker.Delivery, meta *jetstream.MsgMetadata, reason string) {
	h := nats.Header{}
	for k, v := range msg.Headers() {
		h[k] = v
	}
	var seq uint64
	if meta != nil {
		seq = meta.Sequence.Stream
	}
	h.Set(HeaderParkReason, reason)
	h.Set(HeaderParkSubject, msg.Subject())
	h.Set(HeaderParkStreamSeq, strconv.FormatUint(seq, 10))
	h.Set(HeaderParkDeliveries, strconv.Itoa(d.DeliveryCount))
	h.Set(HeaderParkedAt, time.Now().UTC().Format(time.RFC3339Nano))
	// The parked copy's id makes a repeated park a JetStream duplicate.
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("park:%s:%s:%d", c.cfg.Stream, c.cfg.Durable, seq))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(pctx, &nats.Msg{Subject: c.cfg.ParkSubject, Data: msg.Data(), Header: h}); err != nil {
		c.count(func(s *ConsumerStats) { s.ParkFailed++ })
		c.log.Error("park failed; the message will be delivered again", "message_id", d.MessageID,
			"park_subject", c.cfg.ParkSubject, "error", err)
		_ = msg.NakWithDelay(c.cfg.RetryMax)
		return
	}
	if err := msg.Term(); err != nil {
		c.log.Warn("terminate after park failed; the message may be parked twice", "message_id", d.MessageID, "error", err)
	}
	c.count(func(s *ConsumerStats) { s.Parked++ })
	c.log.Warn("message parked", "message_id", d.MessageID, "park_subject", c.cfg.ParkSubject, "reason", reason)
}
