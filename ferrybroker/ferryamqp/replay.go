package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// ReplayOptions configures ReplayParked. Zero fields take the default
// named in their comment.
type ReplayOptions struct {
	// Queue is the queue the parked messages go back to: the queue the
	// Consumer that parked them consumes. Required; it must exist.
	Queue string
	// ParkingQueue is the queue the messages are taken from. Default
	// Queue+".parking", the default of Queue.ParkingQueue.
	ParkingQueue string
	// Max is the most messages one run moves (with DryRun, counts).
	// Default 0: every message the parking queue held when the run began.
	Max int
	// Batch is how many parked messages are taken before the confirms of
	// their copies are awaited. Default 100; at most 10000.
	Batch int
	// DryRun moves nothing: the messages are taken, counted and returned
	// to the parking queue (basic.nack with requeue) at the end of the run.
	DryRun bool
	// Preview is how many messages ReplayResult.Preview holds. Default 10;
	// negative: none.
	Preview int
	// ConfirmTimeout bounds the wait for one batch's confirms. Default 30s.
	ConfirmTimeout time.Duration
	// Progress, when set, is called after each batch with the totals so
	// far (Preview not filled in).
	Progress func(ReplayResult)
	// Logger receives a line per batch at debug level. Default: discarded.
	Logger *slog.Logger
}

func (o ReplayOptions) withDefaults() (ReplayOptions, error) {
	if o.ParkingQueue == "" {
		o.ParkingQueue = o.Queue + ParkingSuffix
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.Preview == 0 {
		o.Preview = 10
	}
	if o.ConfirmTimeout == 0 {
		o.ConfirmTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Queue == "":
		return o, fmt.Errorf("%w: ReplayOptions.Queue is empty: name the queue the messages were parked from", ferrytype.ErrInvalidConfig)
	case len(o.Queue) > 255 || len(o.ParkingQueue) > 255:
		return o, fmt.Errorf("%w: ReplayOptions: queue names are at most 255 bytes", ferrytype.ErrInvalidConfig)
	case o.ParkingQueue == o.Queue:
		return o, fmt.Errorf("%w: ReplayOptions.ParkingQueue must differ from Queue %s", ferrytype.ErrInvalidConfig, o.Queue)
	case o.Max < 0:
		return o, fmt.Errorf("%w: ReplayOptions.Max %d is negative", ferrytype.ErrInvalidConfig, o.Max)
	case o.Batch < 1 || o.Batch > 10000:
		return o, fmt.Errorf("%w: ReplayOptions.Batch %d must be within 1..10000", ferrytype.ErrInvalidConfig, o.Batch)
	case o.ConfirmTimeout < 0:
		return o, fmt.Errorf("%w: ReplayOptions.ConfirmTimeout is negative", ferrytype.ErrInvalidConfig)
	}
	return o, nil
}

// ReplayResult is what a ReplayParked run did. Its counts are exact: a
// message is counted once, by what happened to it.
type ReplayResult struct {
	// DryRun is set when nothing was moved.
	DryRun bool `json:"dry_run"`
	// Depth is the number of messages ready in the parking queue when the
	// run began. A run takes at most this many, so messages parked again
	// during the run (the handler still fails) wait for the next run.
	Depth int `json:"depth"`
	// Examined counts the messages taken from the parking queue.
	Examined int `json:"examined"`
	// Replayed counts the messages moved: their copy confirmed in Queue,
	// then the parked message acked. With DryRun, those that would be.
	Replayed int `json:"replayed"`
	// Skipped counts the messages left parked because they were parked
	// from another queue (a parking queue that several queues share).
	Skipped int `json:"skipped"`
	// Failed counts the messages whose copy RabbitMQ did not confirm
	// (returned, rejected, or no answer in time); they stay parked. After
	// an unknown outcome the copy may be in Queue as well: a duplicate,
	// which the consumer's inbox absorbs.
	Failed int `json:"failed"`
	// Preview holds the first messages moved (with DryRun, that would be).
	Preview []ParkedMessage `json:"preview,omitempty"`
}

// ParkedMessage describes a message in a parking queue, from its
// properties and headers: the park headers a Consumer set when it parked
// it, or, for a message RabbitMQ dead-lettered there itself (past the
// queue's delivery limit), x-death. When a message carries both, the later
// of the two parkings is described.
type ParkedMessage struct {
	MessageID string `json:"message_id"`
	Type      string `json:"type,omitempty"`
	// Source is the queue it was parked from ("" when nothing records it).
	Source string `json:"source"`
	// Exchange and RoutingKey are those the original was published with.
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	// Reason is why it was parked: the consumer's reason, or
	// "dead-lettered by RabbitMQ: " and x-death's reason (delivery_limit,
	// rejected, expired).
	Reason string `json:"reason"`
	// ParkedAt is when it was parked (zero when unknown).
	ParkedAt time.Time `json:"parked_at"`
	// DeliveryCount is its delivery count when it was parked (0: unknown).
	DeliveryCount int `json:"delivery_count"`
	// DeadLettered is set when RabbitMQ, not a consumer, put it there.
	DeadLettered bool `json:"dead_lettered"`
	// Replays is how many times it was replayed before (HeaderReplayCount).
	Replays int `json:"replays"`
	// Returns is how many times it went back to the parking queue itself
	// (its x-delivery-count there: looks with ListParked or DryRun, stopped
	// runs). See ListParked about delivery limits on parking queues.
	Returns int `json:"returns"`
	// Headers holds its string headers.
	Headers map[string]string `json:"headers"`
	// Payload is its body.
	Payload []byte `json:"-"`
}

// ParkedList is what ListParked saw.
type ParkedList struct {
	// Depth is the number of messages ready in the parking queue.
	Depth int `json:"depth"`
	// Messages are the first of them, oldest first.
	Messages []ParkedMessage `json:"messages"`
}

// ReplayParked moves the messages a Consumer parked in opts.ParkingQueue
// back to opts.Queue, once the cause is fixed (a handler bug, a missing
// row, a configuration), so that the consumer handles them again. It
// uses conn, a connection the caller opened and keeps owning.
//
// Each parked message is taken with basic.get and published again with
// its body, message id, type, timestamp, persistence and headers, through
// the default exchange straight to opts.Queue, with a publisher confirm;
// only once RabbitMQ confirmed the copy is the parked message acked. A
// crash in between leaves the message in both queues: the consumer sees a
// duplicate, which its inbox absorbs; a message is never lost. The copy
// gains HeaderReplayCount (one more than before) and HeaderReplayedAt,
// loses the parking queue's x-delivery-count, and records where the
// original was published (HeaderParkSource, HeaderParkRoute,
// HeaderParkExchange) also when RabbitMQ had dead-lettered it. A Consumer
// hands it to its handler with Delivery.Route set to that original routing
// key, and parks it there again if it fails again.
//
// Why not the original exchange and routing key: the exchange routes to
// every queue bound to the key, and the other queues' consumers handled
// their copy long ago. Publishing straight to the queue reaches only the
// consumer that could not handle it, even when the bindings changed since.
//
// A run takes at most as many messages as the parking queue held when it
// began, and at most opts.Max moved: messages parked again while it runs
// are left for the next run. A message parked from another queue (a
// shared parking queue) is skipped and stays parked. Batches of
// opts.Batch messages are published, then confirmed, then acked; a batch
// with a copy RabbitMQ did not confirm ends the run with an error, the
// messages not moved staying parked. The result counts what was done, also
// when an error or ctx ended the run early.
//
// With opts.DryRun nothing moves: messages are taken, counted and returned
// to the parking queue at the end of the run, which counts as a delivery
// there (see ListParked).
func ReplayParked(ctx context.Context, conn *amqp.Connection, opts ReplayOptions) (ReplayResult, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return ReplayResult{}, err
	}
	if err := checkBorrowed(conn); err != nil {
		return ReplayResult{}, fmt.Errorf("ferryamqp.ReplayParked: %w", err)
	}
	res := ReplayResult{DryRun: o.DryRun}
	g, err := openGetter(ctx, conn)
	if err != nil {
		return res, err
	}
	defer g.close(ctx)
	if _, err := g.depth(ctx, o.Queue); err != nil {
		return res, err
	}
	if res.Depth, err = g.depth(ctx, o.ParkingQueue); err != nil {
		return res, err
	}
	var pub *pubChannel
	if !o.DryRun {
		stop := make(chan struct{})
		defer close(stop)
		if pub, err = openPubChannel(conn, nil, o.Batch, watchBlocked(conn, stop, o.Logger), o.Logger, nil, nil); err != nil {
			return res, fmt.Errorf("open publishing channel: %w", err)
		}
		defer pub.close()
	}
	for res.Examined < res.Depth && (o.Max == 0 || res.Replayed < o.Max) {
		var batch []amqp.Delivery
		var infos []ParkedMessage
		empty := false
		for len(batch) < o.Batch && res.Examined < res.Depth && (o.Max == 0 || res.Replayed+len(batch) < o.Max) {
			d, ok, err := g.get(ctx, o.ParkingQueue)
			if err != nil {
				return res, err
			}
			if !ok {
				empty = true
				break
			}
			res.Examined++
			pm := parkedMessage(&d)
			if pm.Source != "" && pm.Source != o.Queue {
				res.Skipped++ // held until the end of the run, then returned
				continue
			}
			if o.DryRun {
				res.Replayed++
				res.Preview = appendPreview(res.Preview, pm, o.Preview)
				continue
			}
			batch = append(batch, d)
			infos = append(infos, pm)
		}
		if len(batch) > 0 {
			if err := replayBatch(ctx, g, pub, o, batch, infos, &res); err != nil {
				return res, err
			}
		}
		o.Logger.Debug("replay batch done", "parking_queue", o.ParkingQueue, "queue", o.Queue,
			"examined", res.Examined, "replayed", res.Replayed, "skipped", res.Skipped)
		if o.Progress != nil {
			p := res
			p.Preview = nil
			o.Progress(p)
		}
		if empty {
			break
		}
	}
	want := res.Depth
	if !o.DryRun {
		want -= res.Replayed // acked: gone from the parking queue
	}
	return res, g.returnHeld(ctx, o.ParkingQueue, want)
}

// replayBatch publishes a copy of each message of batch to o.Queue, waits
// for the confirms, and acks the parked message of each confirmed copy;
// the others go back to the parking queue.
func replayBatch(ctx context.Context, g *getter, pub *pubChannel, o ReplayOptions, batch []amqp.Delivery,
	infos []ParkedMessage, res *ReplayResult) error {
	cctx, cancel := context.WithTimeout(ctx, o.ConfirmTimeout)
	defer cancel()
	j := newJob(cctx, len(batch))
	now := time.Now()
	for i := range batch {
		j.out[i] = outgoing{exchange: "", key: o.Queue, pub: replayCopy(&batch[i], &infos[i], now)}
	}
	var results []ferrytype.PublishResult
	if err := pub.submit(j); err != nil {
		if errors.Is(err, errChannelClosed) {
			err = pub.err()
		}
		results = j.finish(fmt.Errorf("copies not sent: %w", err))
	} else {
		select {
		case <-j.done:
		case <-cctx.Done():
		}
		results = j.finish(fmt.Errorf("waiting for the confirms: %w", cctx.Err()))
	}
	var firstErr error
	for i, r := range results {
		tag := batch[i].DeliveryTag
		if r.Outcome == ferrytype.OutcomeConfirmed {
			// The copy is RabbitMQ's now: only now may the parked one go.
			if err := g.settle(func() error { return g.ch.Ack(tag, false) }); err != nil {
				// The parked message comes back when the channel closes: a
				// duplicate of the confirmed copy, nothing lost.
				return fmt.Errorf("ack parked message %s after its copy was confirmed (it stays parked as well): %w",
					batch[i].MessageId, err)
			}
			res.Replayed++
			res.Preview = appendPreview(res.Preview, infos[i], o.Preview)
			continue
		}
		res.Failed++
		if firstErr == nil {
			firstErr = fmt.Errorf("copy of parked message %s to queue %s %s: %w", batch[i].MessageId, o.Queue, r.Outcome, r.Err)
		}
		if err := g.settle(func() error { return g.ch.Nack(tag, false, true) }); err != nil {
			return errors.Join(firstErr, fmt.Errorf("return parked message %s: %w", batch[i].MessageId, err))
		}
	}
	if firstErr != nil {
		return fmt.Errorf("%w (%d of %d copies not confirmed; those messages stay parked)", firstErr, res.Failed, len(batch))
	}
	return nil
}

func appendPreview(p []ParkedMessage, m ParkedMessage, limit int) []ParkedMessage {
	if len(p) < limit {
		p = append(p, m)
	}
	return p
}

// ListParked returns the first n messages of parkingQueue, oldest first,
// and its depth, without removing any: each is taken with basic.get and
// returned (basic.nack with requeue) once all n were seen. It uses conn, a
// connection the caller opened and keeps owning.
//
// A look is a delivery: on RabbitMQ 3.x and 4.0 to 4.2 each message looked
// at counts in its x-delivery-count (ParkedMessage.Returns). ferryamqp
// declares parking queues without a delivery limit, but RabbitMQ 4.x gives
// quorum queues a default limit of 20, past which a message with nowhere
// to be dead-lettered is dropped: on 4.x, set the parking queues'
// delivery-limit to -1 (a policy), or look sparingly.
func ListParked(ctx context.Context, conn *amqp.Connection, parkingQueue string, n int) (ParkedList, error) {
	var out ParkedList
	switch {
	case parkingQueue == "" || len(parkingQueue) > 255:
		return out, fmt.Errorf("%w: ListParked: parking queue name must be 1..255 bytes", ferrytype.ErrInvalidConfig)
	case n < 1 || n > 10000:
		return out, fmt.Errorf("%w: ListParked: n %d must be within 1..10000", ferrytype.ErrInvalidConfig, n)
	}
	if err := checkBorrowed(conn); err != nil {
		return out, fmt.Errorf("ferryamqp.ListParked: %w", err)
	}
	g, err := openGetter(ctx, conn)
	if err != nil {
		return out, err
	}
	defer g.close(ctx)
	if out.Depth, err = g.depth(ctx, parkingQueue); err != nil {
		return out, err
	}
	for len(out.Messages) < min(n, out.Depth) {
		d, ok, err := g.get(ctx, parkingQueue)
		if err != nil {
			return out, err
		}
		if !ok {
			break
		}
		out.Messages = append(out.Messages, parkedMessage(&d))
	}
	return out, g.returnHeld(ctx, parkingQueue, out.Depth)
}

// getter takes messages from a queue with basic.get on one channel and
// returns those it holds at the end.
type getter struct {
	ch      *amqp.Channel
	lastTag uint64 // the last delivery taken
	held    bool   // deliveries taken and not settled
	// settled counts deliveries acked or nacked one by one.
	settled, taken int
}

func openGetter(ctx context.Context, conn *amqp.Connection) (*getter, error) {
	var ch *amqp.Channel
	err := rpc(ctx, func() (err error) { ch, err = conn.Channel(); return err })
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return &getter{ch: ch}, nil
}

// depth returns the number of messages ready in queue (a passive
// declare), or an error naming a queue that does not exist.
func (g *getter) depth(ctx context.Context, queue string) (int, error) {
	var q amqp.Queue
	err := rpc(ctx, func() (err error) {
		q, err = g.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	switch code(err) {
	case 0:
		return q.Messages, nil
	case amqp.NotFound:
		return 0, notFound(fmt.Sprintf("queue %s does not exist: check its name (--queue, --parking-queue) and the virtual host", queue), err)
	}
	return 0, fmt.Errorf("check queue %s: %w", queue, err)
}

func (g *getter) get(ctx context.Context, queue string) (amqp.Delivery, bool, error) {
	type got struct {
		d   amqp.Delivery
		ok  bool
		err error
	}
	done := make(chan got, 1)
	go func() {
		d, ok, err := g.ch.Get(queue, false)
		done <- got{d, ok, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return r.d, false, fmt.Errorf("basic.get from %s: %w", queue, r.err)
		}
		if r.ok {
			g.lastTag, g.held = r.d.DeliveryTag, true
			g.taken++
		}
		return r.d, r.ok, nil
	case <-ctx.Done():
		// A message taken after this is returned when the channel closes.
		return amqp.Delivery{}, false, ctx.Err()
	}
}

// settle runs an ack or nack of one delivery.
func (g *getter) settle(fn func() error) error {
	if err := fn(); err != nil {
		return err
	}
	g.settled++
	return nil
}

// returnHeld returns every delivery taken and not settled one by one to
// the queue, in one basic.nack (multiple, requeue).
//
// The broker puts them back asynchronously (a quorum queue through its
// log): a passive declare right after the nack can still count them as
// taken, and a list or replay run at once would see a queue shorter than
// it is. So it then waits, up to returnWait, until queue holds at least
// want messages ready (the depth the caller expects once its messages are
// back); a queue that someone else is emptying only ends the wait early.
func (g *getter) returnHeld(ctx context.Context, queue string, want int) error {
	if !g.held || g.settled == g.taken {
		return nil
	}
	if err := g.ch.Nack(g.lastTag, true, true); err != nil {
		return fmt.Errorf("return the messages looked at to the parking queue (they come back when the channel closes): %w", err)
	}
	g.held = false
	wctx, cancel := context.WithTimeout(ctx, returnWait)
	defer cancel()
	for {
		n, err := g.depth(wctx, queue)
		if err != nil || n >= want {
			return nil // the messages are returned; only the count is unsure
		}
		select {
		case <-wctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// returnWait bounds how long returnHeld waits for returned messages to be
// counted as ready again.
const returnWait = 5 * time.Second

func (g *getter) close(ctx context.Context) {
	_ = rpc(ctx, g.ch.Close)
}

// replayCopy is the message to publish for parked message d.
func replayCopy(d *amqp.Delivery, pm *ParkedMessage, now time.Time) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+5)
	for k, v := range d.Headers {
		h[k] = v
	}
	// The parking queue's count: on a classic queue a Consumer would take
	// it for the number of deliveries there.
	delete(h, "x-delivery-count")
	if pm.Source != "" {
		h[ferrybroker.HeaderParkSource] = pm.Source
	}
	if pm.RoutingKey != "" || pm.Exchange != "" {
		h[ferrybroker.HeaderParkRoute] = pm.RoutingKey
		h[HeaderParkExchange] = pm.Exchange
	}
	h[ferrybroker.HeaderReplayCount] = strconv.Itoa(pm.Replays + 1)
	h[ferrybroker.HeaderReplayedAt] = now.UTC().Format(time.RFC3339Nano)
	// UserId is left out: RabbitMQ refuses a user-id other than the
	// publishing connection's own, closing the channel.
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
}

// parkedMessage describes parked message d.
func parkedMessage(d *amqp.Delivery) ParkedMessage {
	pm := ParkedMessage{MessageID: d.MessageId, Type: d.Type, Headers: map[string]string{}, Payload: d.Body}
	for k, v := range d.Headers {
		if s, ok := stringValue(v); ok {
			pm.Headers[k] = s
		}
	}
	if pm.MessageID == "" {
		pm.MessageID = pm.Headers[ferrybroker.HeaderEventID]
	}
	if pm.Type == "" {
		pm.Type = pm.Headers[ferrybroker.HeaderEventType]
	}
	pm.Replays, _ = strconv.Atoi(pm.Headers[ferrybroker.HeaderReplayCount])
	if n, ok := intValue(d.Headers["x-delivery-count"]); ok && n > 0 && n < 1<<31 {
		pm.Returns = int(n)
	}
	// What the consumer recorded when it parked the message.
	pm.Source = pm.Headers[ferrybroker.HeaderParkSource]
	pm.Exchange = pm.Headers[HeaderParkExchange]
	pm.RoutingKey = pm.Headers[ferrybroker.HeaderParkRoute]
	pm.Reason = pm.Headers[ferrybroker.HeaderParkReason]
	pm.DeliveryCount, _ = strconv.Atoi(pm.Headers[ferrybroker.HeaderParkDeliveryCount])
	if t, err := time.Parse(time.RFC3339Nano, pm.Headers[ferrybroker.HeaderParkedAt]); err == nil {
		pm.ParkedAt = t
	}
	// What RabbitMQ recorded when it dead-lettered it: the most recent
	// death comes first in x-death. It wins when the consumer recorded
	// nothing, or when it is the later event (a message parked, replayed,
	// then dead-lettered past the delivery limit).
	death, ok := lastDeath(d.Headers)
	if !ok || (pm.Source != "" && !death.at.After(pm.ParkedAt)) {
		return pm
	}
	pm.DeadLettered = true
	pm.Source, pm.Exchange, pm.RoutingKey = death.queue, death.exchange, death.routingKey
	pm.Reason = "dead-lettered by RabbitMQ: " + death.reason
	pm.ParkedAt = death.at
	pm.DeliveryCount = 0
	return pm
}

// death is one entry of x-death.
type death struct {
	queue, exchange, routingKey, reason string
	at                                  time.Time
}

// lastDeath reads the most recent dead-lettering from x-death, or else
// from x-first-death-*.
func lastDeath(h amqp.Table) (death, bool) {
	var dd death
	if list, ok := h["x-death"].([]any); ok && len(list) > 0 {
		if t, ok := list[0].(amqp.Table); ok {
			dd.queue, _ = stringValue(t["queue"])
			dd.exchange, _ = stringValue(t["exchange"])
			dd.reason, _ = stringValue(t["reason"])
			if keys, ok := t["routing-keys"].([]any); ok && len(keys) > 0 {
				dd.routingKey, _ = stringValue(keys[0])
			}
			if at, ok := t["time"].(time.Time); ok {
				dd.at = at
			}
			return dd, dd.queue != ""
		}
	}
	dd.queue, _ = stringValue(h["x-first-death-queue"])
	dd.exchange, _ = stringValue(h["x-first-death-exchange"])
	dd.reason, _ = stringValue(h["x-first-death-reason"])
	return dd, dd.queue != ""
}

func stringValue(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// replayedRoute returns the exchange and routing key a message replayed by
// ReplayParked into queue was first published with: a replayed message
// comes through the default exchange with the queue's name as routing key,
// and its park headers say where it came from.
func replayedRoute(d *amqp.Delivery, queue string) (exchange, key string, ok bool) {
	if d.Exchange != "" || d.RoutingKey != queue {
		return "", "", false
	}
	if _, replayed := stringValue(d.Headers[ferrybroker.HeaderReplayCount]); !replayed {
		return "", "", false
	}
	key, _ = stringValue(d.Headers[ferrybroker.HeaderParkRoute])
	exchange, _ = stringValue(d.Headers[HeaderParkExchange])
	if key == "" && exchange == "" {
		return "", "", false
	}
	return exchange, key, true
}

// Connect opens one connection to the RabbitMQ server at url, with cfg's
// settings (nil: the defaults), for the calls that take a connection the
// caller owns (NewConsumer, New, ReplayParked, ListParked). It does not
// reconnect. ctx bounds the dial as well as cfg.DialTimeout. url may list
// the nodes of a cluster, comma-separated, as Dial takes them: the first
// that accepts the connection, in the order given. Errors never contain
// the password.
func Connect(ctx context.Context, url string, cfg *ConnectionConfig) (*amqp.Connection, error) {
	var c ConnectionConfig
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults("ferry")
	if err != nil {
		return nil, err
	}
	n, err := parseNodes(url)
	if err != nil {
		return nil, err
	}
	type dialed struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan dialed, 1)
	dial := n.dialer(c)
	go func() {
		conn, _, _, err := dial()
		done <- dialed{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				closeConn(r.conn, c.DialTimeout)
			}
		}()
		return nil, ctx.Err()
	}
}
