package ferryamqp

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/runner"
)

// HeaderParkExchange is the exchange the original of a parked copy was
// published to, next to the park headers every consumer sets
// (ferrybroker.HeaderParkReason, HeaderParkedAt, HeaderParkRoute: its
// routing key, HeaderParkSource: the queue, HeaderParkDeliveryCount).
const HeaderParkExchange = "Ferry-Park-Exchange"

// ConsumerConfig configures a Consumer. A nil config uses the defaults;
// zero fields take the default named in their comment.
//
// The embedded options are every consumer's (see
// ferrybroker.ConsumerOptions); on RabbitMQ, a delivery to retry after
// Redelivery's delay waits that delay keeping its prefetch slot, then goes
// back to the queue (basic.nack with requeue). Quorum queues count
// deliveries (x-delivery-count) across consumers and restarts; on classic
// queues the count is kept in memory, per message id, and lost on restart.
// ParkTimeout bounds the publish and confirm of a parked copy; Name
// defaults to the queue.
type ConsumerConfig struct {
	ferrybroker.ConsumerOptions
	// Prefetch is how many unacked deliveries RabbitMQ sends ahead
	// (basic.qos), at least Concurrency. Default 4×Concurrency. Keep it
	// small: on RabbitMQ 3.x every delivery returned to the queue, also by
	// a clean stop, counts as a delivery attempt.
	Prefetch int
	// Queue holds the settings of the consumed queue for Declare and names
	// its parking queue, which must exist: a Consumer never acks a message
	// it could not handle unless a confirmed copy sits in the parking
	// queue. Its Name is ignored (it is the queue consumed), and so is
	// NoParking. Default: a quorum queue, parking queue queue+".parking".
	Queue Queue
	// Declare declares the queue and its parking queue (and Topology)
	// instead of checking that they exist. Default false.
	Declare bool
	// Topology lists further topology to declare or check (bindings of
	// the queue, say).
	Topology Topology
	// Tag is the consumer tag prefix. Default "ferry".
	Tag string
	// Connection configures the connection DialConsumer opens.
	Connection ConnectionConfig
}

// ConsumerStats counts what a consumer did (see ferrybroker.ConsumerStats).
type ConsumerStats = ferrybroker.ConsumerStats

// Consumer consumes one queue with manual acks and runs a Handler for each
// delivery, acking only after the handler returned nil, on the channel the
// delivery came on. See the package documentation for the order of work,
// retries and parking. An error at the fault point
// ferryfault.ConsumerAfterHandle (set in the context given to Start) acts
// as a crash there: the delivery is left unacked until its channel closes.
type Consumer struct {
	queue string
	h     ferrybroker.Handler
	cfg   ConsumerConfig
	park  string // the parking queue
	log   *slog.Logger
	link  *link[*consSession]
	conn  *amqp.Connection // borrowed
	dial  dialFunc         // owned
	fails *failCounts
	run   runner.Runner

	mu       sync.Mutex // the retry timers
	timers   map[uint64]*retryTimer
	timerSeq uint64

	settler *ferrybroker.Settler
}

var _ ferrybroker.Consumer = (*Consumer)(nil)

// retryTimer is a failed delivery waiting to be requeued.
type retryTimer struct {
	t  *time.Timer
	fd *ferrybroker.Delivery
}

// NewConsumer returns a consumer of queue on conn, a connection the caller
// opened and keeps owning: when it closes, the consumer stops consuming
// and does not reconnect (use DialConsumer for that). Call Start or Run.
// conn must not have amqp091-go's automatic recovery enabled.
func NewConsumer(conn *amqp.Connection, queue string, h ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if err := checkBorrowed(conn); err != nil {
		return nil, fmt.Errorf("ferryamqp.NewConsumer: %w", err)
	}
	c, err := newConsumer(queue, h, cfg)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return c, nil
}

// DialConsumer returns a consumer of queue that connects to the RabbitMQ
// server at url when started, and reconnects with backoff after a loss.
// Deliveries in progress when a connection is lost are never acked on the
// new one: RabbitMQ redelivers them. url may list the nodes of a cluster,
// comma-separated, as Dial takes them: the consumer connects to one node
// at a time, each reconnection starting at the node after the one last
// connected to.
func DialConsumer(url, queue string, h ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	c, err := newConsumer(queue, h, cfg)
	if err != nil {
		return nil, err
	}
	n, err := parseNodes(url)
	if err != nil {
		return nil, err
	}
	c.dial = n.dialer(c.cfg.Connection)
	return c, nil
}

func newConsumer(queue string, h ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	var c ConsumerConfig
	if cfg != nil {
		c = *cfg
	}
	c.ConsumerOptions = c.ConsumerOptions.WithDefaults(queue)
	if c.Prefetch == 0 {
		c.Prefetch = 4 * c.Concurrency
	}
	if c.Tag == "" {
		c.Tag = "ferry"
	}
	c.Queue.Name = queue
	c.Queue.NoParking = false
	q := c.Queue.withDefaults()
	var err error
	if c.Connection, err = c.Connection.withDefaults("ferry-consumer"); err != nil {
		return nil, err
	}
	switch {
	case h == nil:
		return nil, fmt.Errorf("%w: NewConsumer: handler is nil", ferrytype.ErrInvalidConfig)
	case c.Check() != nil:
		return nil, c.Check()
	case c.Prefetch < c.Concurrency || c.Prefetch > 65535:
		return nil, fmt.Errorf("%w: ConsumerConfig.Prefetch %d must be within Concurrency (%d)..65535",
			ferrytype.ErrInvalidConfig, c.Prefetch, c.Concurrency)
	case c.Declare && q.Type == QueueQuorum && q.DeliveryLimit > 0 && c.Redelivery.MaxDeliveries > q.DeliveryLimit:
		return nil, fmt.Errorf("%w: ConsumerConfig.Redelivery.MaxDeliveries %d exceeds the queue's DeliveryLimit %d: "+
			"RabbitMQ would dead-letter failing messages before the consumer parks them with their reason",
			ferrytype.ErrInvalidConfig, c.Redelivery.MaxDeliveries, q.DeliveryLimit)
	}
	if err := q.validate(); err != nil {
		return nil, err
	}
	if err := c.Topology.validate(""); err != nil {
		return nil, err
	}
	log := c.Logger.With("queue", queue)
	co := &Consumer{queue: queue, h: h, cfg: c, park: q.ParkingQueue, log: log,
		fails: newFailCounts(10000), timers: map[uint64]*retryTimer{},
		settler: ferrybroker.NewSettler(c.ConsumerOptions, log, slog.String("parking_queue", q.ParkingQueue))}
	co.link = newLink(co.log, c.Connection, co.openSession)
	return co, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return c.settler.Observer.Stats() }

// ParkingQueue returns the name of the queue the consumer parks messages
// in.
func (c *Consumer) ParkingQueue() string { return c.park }

// consSession is the consumer's state on one connection: the consuming
// channel and a confirm-mode channel for parked copies.
type consSession struct {
	c          *Consumer
	ch         *amqp.Channel
	park       *pubChannel
	tag        string
	deliveries <-chan amqp.Delivery
	dead       chan struct{}
	stop       chan struct{}
	closeOnce  sync.Once

	// settleMu orders acks and nacks before the channel's close: a frame
	// sent on a channel RabbitMQ already closed is a connection error
	// (CHANNEL_ERROR, expected 'channel.open'), which would end every
	// channel of a connection the caller may share.
	settleMu sync.RWMutex
	closed   bool
}

// settle runs fn, an ack or nack on the session's channel, unless the
// channel is closing: then the delivery goes back with the channel.
func (s *consSession) settle(fn func() error) error {
	s.settleMu.RLock()
	defer s.settleMu.RUnlock()
	if s.closed {
		return errChannelClosed
	}
	return fn()
}

func (c *Consumer) openSession(ctx context.Context, conn *amqp.Connection, _ *batchConn) (*consSession, error) {
	topo := c.cfg.Topology
	q := c.cfg.Queue
	q.ParkingQueue = c.park // named: checked as well as declared
	topo.Queues = append([]Queue{q}, topo.Queues...)
	if _, err := setup(ctx, conn, topo, c.cfg.Declare, "", "", c.log); err != nil {
		return nil, err
	}
	s := &consSession{c: c, tag: c.cfg.Tag + "-" + randomHex(), dead: make(chan struct{}), stop: make(chan struct{})}
	var err error
	if s.ch, err = conn.Channel(); err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := s.ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		closeChannel(s.ch)
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	block := watchBlocked(conn, s.stop, c.log)
	if s.park, err = openPubChannel(conn, nil, c.cfg.Concurrency+1, block, c.log, nil, nil); err != nil {
		s.close()
		return nil, fmt.Errorf("parking channel: %w", err)
	}
	closes := s.ch.NotifyClose(make(chan *amqp.Error, 1))
	cancels := s.ch.NotifyCancel(make(chan string, 1))
	if s.deliveries, err = s.ch.Consume(c.queue, s.tag, false, false, false, false, nil); err != nil {
		s.close()
		return nil, fmt.Errorf("consume queue %s: %w", c.queue, err)
	}
	go func() {
		select {
		case e := <-closes:
			if e != nil {
				c.log.Warn("consuming channel closed", "error", e)
			}
		case tag := <-cancels:
			c.log.Warn("RabbitMQ cancelled the consumer (queue deleted?)", "consumer_tag", tag)
		case <-s.park.dead:
		case <-s.stop:
		}
		close(s.dead)
	}()
	c.log.Info("consuming", "consumer_tag", s.tag, "prefetch", c.cfg.Prefetch, "concurrency", c.cfg.Concurrency)
	return s, nil
}

func (s *consSession) done() <-chan struct{} { return s.dead }

// cancel stops RabbitMQ sending deliveries (basic.cancel); the channel
// stays open so that deliveries in progress can still be acked.
func (s *consSession) cancel(ctx context.Context) {
	if ctx.Err() != nil {
		return // closing the channel cancels as well
	}
	// Under settleMu: basic.cancel must not follow channel.close.
	if err := rpc(ctx, func() error { return s.settle(func() error { return s.ch.Cancel(s.tag, false) }) }); err != nil {
		s.c.log.Warn("cancel consumer", "error", err)
	}
}

func (s *consSession) close() {
	s.closeOnce.Do(func() {
		// Wait for acks being sent, but no longer than a channel close
		// may take: on a connection RabbitMQ blocked, a send can hang.
		marked := make(chan struct{})
		go func() {
			s.settleMu.Lock()
			s.closed = true
			s.settleMu.Unlock()
			close(marked)
		}()
		t := time.NewTimer(closeTimeout)
		select {
		case <-marked:
		case <-t.C:
		}
		t.Stop()
		close(s.stop)
		closeChannel(s.ch)
		if s.park != nil {
			s.park.close()
		}
	})
}

// Start connects (DialConsumer), declares or checks the queues and starts
// consuming; ctx bounds the start only. A consumer runs until Stop. The
// handlers' contexts keep ctx's values.
func (c *Consumer) Start(ctx context.Context) error {
	err := c.run.Start(ctx, func(work context.Context) error {
		if err := c.link.start(ctx, c.conn, c.dial); err != nil {
			return err
		}
		for range c.cfg.Concurrency {
			c.run.Go(func() { c.work(work) })
		}
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferryamqp: consumer %w", err)
	}
	return err
}

// Stop stops taking deliveries (basic.cancel), lets the handlers in
// progress finish and acks those that succeed, then closes the channels:
// every delivery not acked by then (prefetched but not started, waiting
// for a retry, still running) goes back to the queue. If ctx ends before
// the handlers finish, their contexts are cancelled and the channels
// closed at once; a handler that ignores its context may still run when
// Stop returns, and its ack fails. Stopping twice is safe.
func (c *Consumer) Stop(ctx context.Context) error {
	first, err := c.run.Stop(ctx, func() {
		c.mu.Lock()
		timers := c.timers
		c.timers = map[uint64]*retryTimer{}
		c.mu.Unlock()
		for _, rt := range timers {
			if rt.t.Stop() {
				c.settler.Observer.Settled(rt.fd, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: ferrybroker.ErrStopping})
			}
		}
		if s, err := c.link.current(ctx, -1); err == nil {
			s.cancel(ctx)
		}
		c.log.Info("consumer cancelled; finishing the handlers in progress", "in_flight", c.settler.Observer.Stats().InFlight)
	})
	if !first {
		return nil
	}
	if err != nil {
		err = fmt.Errorf("stop: handlers still running: %w", err)
	}
	c.link.shutdown()
	st := c.settler.Observer.Stats()
	c.log.Info("consumer stopped", "acked", st.Acked, "parked", st.Parked)
	return err
}

// Run starts the consumer and runs it until ctx ends, then stops it,
// giving handlers in progress up to ShutdownTimeout to finish.
func (c *Consumer) Run(ctx context.Context) error {
	return ferrybroker.RunUntilDone(ctx, c.Start, c.Stop, c.cfg.ShutdownTimeout)
}

// work is one of the Concurrency handler slots: it takes deliveries of the
// live session, one at a time, with the handlers' context ctx, until
// Stop; after a reconnect, of the new session.
func (c *Consumer) work(ctx context.Context) {
	var s *consSession
	for {
		var ok bool
		if s, ok = c.link.next(c.run.Stopping(), s); !ok {
			return
		}
		c.consume(ctx, s)
	}
}

// consume takes deliveries of session s until it ends or the consumer
// stops.
func (c *Consumer) consume(ctx context.Context, s *consSession) {
	for {
		var (
			d  amqp.Delivery
			ok bool
		)
		select {
		case d, ok = <-s.deliveries:
		case <-c.run.Stopping():
		case <-s.dead:
		}
		if !ok {
			return
		}
		fd, ct, bad := c.delivery(&d)
		c.settler.Observer.Delivered(fd)
		a := &acker{c: c, s: s, d: d, fd: fd}
		if c.stopping() {
			// Not started: it goes back to the queue with the channel.
			c.settler.Settle(ctx, fd, a, ferrybroker.StepStopping, nil)
			return
		}
		if bad == nil {
			bad = ferrybroker.CheckDelivery(ct, fd, c.cfg.Validate)
		}
		c.settler.Handle(ctx, fd, a, c.h, bad)
	}
}

// stopping reports whether Stop began.
func (c *Consumer) stopping() bool {
	select {
	case <-c.run.Stopping():
		return true
	default:
		return false
	}
}

// delivery converts d and decodes it with the consumer's Decoding. It
// returns the payload's content type once decoded (the message's
// content_type property with ferry's form), and the decoding's error,
// which makes the delivery malformed.
func (c *Consumer) delivery(d *amqp.Delivery) (*ferrybroker.Delivery, string, error) {
	fd := &ferrybroker.Delivery{MessageID: d.MessageId, Type: d.Type, Route: d.RoutingKey, Payload: d.Body,
		Headers: make(map[string]string, len(d.Headers)), Redelivered: d.Redelivered}
	if _, key, ok := replayedRoute(d, c.queue); ok {
		// Replayed from the parking queue straight to this queue: the
		// handler sees the routing key the event was published with.
		fd.Route = key
	}
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			fd.Headers[k] = v
		case []byte:
			fd.Headers[k] = string(v)
		}
	}
	ct, bad := ferrybroker.Decode(c.cfg.Decoding, fd, d.ContentType, ferrybroker.ProtocolAMQP)
	if fd.MessageID == "" {
		fd.MessageID = d.MessageId
	}
	// A publisher can set x-delivery-count itself on a classic queue: a
	// value out of range is ignored.
	switch n, ok := intValue(d.Headers["x-delivery-count"]); {
	case ok && n >= 0 && n < math.MaxInt32:
		// Quorum queues: the number of earlier deliveries.
		fd.DeliveryCount = int(n) + 1
	case !d.Redelivered:
		fd.DeliveryCount = 1
	case fd.MessageID != "":
		fd.DeliveryCount = c.fails.get(fd.MessageID) + 1
	}
	return fd, ct, bad
}

func intValue(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case int:
		return int64(v), true
	case uint64:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint8:
		return int64(v), true
	}
	return 0, false
}

// acker settles one delivery on the channel it came on (see
// ferrybroker.Acknowledger).
type acker struct {
	c  *Consumer
	s  *consSession
	d  amqp.Delivery
	fd *ferrybroker.Delivery
}

// Ack acks the delivery: a single ack (multiple=false) on the delivery's
// own channel, which covers this delivery and nothing else.
func (a *acker) Ack() error {
	if err := a.s.settle(func() error { return a.d.Ack(false) }); err != nil {
		return err
	}
	a.c.forget(a.fd)
	return nil
}

// Retry returns the delivery to the queue (basic.nack with requeue) after
// delay, keeping its prefetch slot meanwhile; it settles the delivery
// itself, when the delay passed or the consumer stopped.
func (a *acker) Retry(delay time.Duration, cause error) error {
	c, fd := a.c, a.fd
	if fd.MessageID != "" {
		c.fails.inc(fd.MessageID)
	}
	c.mu.Lock()
	if c.stopping() {
		c.mu.Unlock()
		// The channel closes soon and returns it to the queue.
		c.settler.Observer.Settled(fd, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: cause})
		return ferrybroker.ErrSettlesItself
	}
	c.timerSeq++
	id := c.timerSeq
	c.timers[id] = &retryTimer{fd: fd, t: time.AfterFunc(delay, func() {
		c.mu.Lock()
		_, mine := c.timers[id]
		delete(c.timers, id)
		c.mu.Unlock()
		if !mine {
			// Stop took it as it fired: left for the channel close.
			c.settler.Observer.Settled(fd, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: ferrybroker.ErrStopping})
			return
		}
		if err := a.s.settle(func() error { return a.d.Nack(false, true) }); err != nil {
			c.settler.Observer.Settled(fd, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: err})
			return
		}
		c.settler.Observer.Settled(fd, ferrybroker.Settlement{Action: ferrybroker.ActionRetried, Err: cause})
	})}
	c.mu.Unlock()
	return ferrybroker.ErrSettlesItself
}

// Leave does nothing: the delivery goes back to the queue with its
// channel's close.
func (a *acker) Leave() {}

// Abandon does nothing, as a crash would: the delivery stays unacked until
// its channel closes.
func (a *acker) Abandon() {}

// Park publishes a copy to the parking queue, waits for RabbitMQ's
// confirm, then acks the delivery. If that ack fails, the delivery is left
// (settled here): the copy is parked, and the original comes back and is
// parked again, a duplicate in the parking queue, nothing lost.
func (a *acker) Park(reason error) error {
	if err := a.c.parkCopy(a.s, &a.d, a.fd, reason); err != nil {
		return err
	}
	if err := a.s.settle(func() error { return a.d.Ack(false) }); err != nil {
		a.c.log.Warn("ack of a parked message failed; it will be delivered and parked again", "message_id", a.fd.MessageID, "error", err)
		a.c.settler.Observer.Settled(a.fd, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: err})
		return ferrybroker.ErrSettlesItself
	}
	a.c.forget(a.fd)
	return nil
}

// parkCopy publishes a copy of d to the parking queue, with the reason in
// its headers, and waits for RabbitMQ to confirm it.
func (c *Consumer) parkCopy(s *consSession, d *amqp.Delivery, fd *ferrybroker.Delivery, reason error) error {
	h := make(amqp.Table, len(d.Headers)+8)
	for k, v := range d.Headers {
		h[k] = v
	}
	delete(h, "x-delivery-count")
	exchange, key := d.Exchange, d.RoutingKey
	if ex, k, ok := replayedRoute(d, c.queue); ok {
		exchange, key = ex, k // where it came from before its replay
	}
	for _, kv := range ferrybroker.ParkHeaders(reason, fd, key, c.queue) {
		h[kv[0]] = kv[1]
	}
	h[HeaderParkExchange] = exchange
	pub := amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: amqp.Persistent,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ParkTimeout)
	defer cancel()
	j := newJob(ctx, 1)
	j.out[0] = outgoing{exchange: "", key: c.park, pub: pub}
	if err := s.park.submit(j); errors.Is(err, errChannelClosed) {
		return fmt.Errorf("parking channel closed: %w", s.park.err())
	} else if err != nil {
		return fmt.Errorf("parked copy not sent: %w", err)
	}
	select {
	case <-j.done:
	case <-ctx.Done():
	}
	r := j.finish(fmt.Errorf("waiting for the confirm: %w", ctx.Err()))[0]
	if r.Outcome != ferrytype.OutcomeConfirmed {
		return fmt.Errorf("parked copy %s: %w", r.Outcome, r.Err)
	}
	return nil
}

// forget drops the failure count of a delivery settled for good.
func (c *Consumer) forget(fd *ferrybroker.Delivery) {
	if fd.MessageID != "" {
		c.fails.forget(fd.MessageID)
	}
}

// failCounts counts transient failures per message id, for queues that
// keep no delivery count (classic queues). Bounded: when full it starts
// over, which only delays parking.
type failCounts struct {
	mu  sync.Mutex
	max int
	m   map[string]int
}

func newFailCounts(n int) *failCounts { return &failCounts{max: n, m: map[string]int{}} }

func (f *failCounts) get(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[id]
}

func (f *failCounts) inc(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.m) >= f.max {
		clear(f.m)
	}
	f.m[id]++
}

func (f *failCounts) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}

func randomHex() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
