package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrytype"
)

// HeaderPublishTag is set on every message ferryamqp publishes: the
// publisher-confirm sequence number of that copy on its channel. A
// basic.return carries the message's headers but no sequence number; this
// header matches the return to the very publish it belongs to, even when
// the same event id is in flight twice. Consumers can ignore it; it
// differs between republished copies of one event.
const HeaderPublishTag = "Ferry-Publish-Tag"

// outgoing is one message ready to publish.
type outgoing struct {
	exchange, key string
	pub           amqp.Publishing
}

// job is one Publish call's messages and their results. Results are set
// once; finish reports the unset ones as unknown and makes later results
// no-ops, so a caller whose context ended returns at once while the
// channel goroutines finish the bookkeeping.
type job struct {
	ctx context.Context
	out []outgoing
	mu  sync.Mutex
	res []ferrytype.PublishResult
	set []bool
	// began marks the messages the writer started to write: only those
	// may have reached RabbitMQ.
	began []bool
	left  int
	done  chan struct{}
	// written is closed once the channel goroutine is through the job's
	// messages: each is published, or failed before it was.
	written     chan struct{}
	writtenOnce sync.Once
}

func newJob(ctx context.Context, n int) *job {
	return &job{ctx: ctx, out: make([]outgoing, n), res: make([]ferrytype.PublishResult, n),
		set: make([]bool, n), began: make([]bool, n), left: n, done: make(chan struct{}), written: make(chan struct{})}
}

func (j *job) markWritten() { j.writtenOnce.Do(func() { close(j.written) }) }

func (j *job) resolve(i int, r ferrytype.PublishResult) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.set[i] {
		return
	}
	j.set[i], j.res[i] = true, r
	j.left--
	if j.left == 0 {
		close(j.done)
	}
}

func (j *job) settled(i int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.set[i]
}

// begin records that message i is about to be written, unless it has its
// outcome already (finish gave up on it): then it must not be written.
func (j *job) begin(i int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.set[i] {
		return false
	}
	j.began[i] = true
	return true
}

// failFrom resolves every unset message from index i on with r.
func (j *job) failFrom(i int, r ferrytype.PublishResult) {
	for ; i < len(j.res); i++ {
		j.resolve(i, r)
	}
}

// finish reports every unset message as unknown because of err (as not
// sent when the writer never began it) and returns a copy of the results.
func (j *job) finish(err error) []ferrytype.PublishResult {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.res {
		switch {
		case j.set[i]:
		case j.began[i]:
			j.set[i], j.res[i] = true, ferrytype.Unknown(err)
		default:
			j.set[i], j.res[i] = true, ferrytype.NotSent(fmt.Errorf("not sent: %w", err))
		}
	}
	return append([]ferrytype.PublishResult(nil), j.res...)
}

// pending is a message published and awaiting its confirm.
type pending struct {
	dc       *amqp.DeferredConfirmation
	tag      uint64
	mismatch bool
	job      *job
	i        int
}

// blockState tracks connection.blocked: while RabbitMQ has a resource
// alarm it stops reading from connections that publish, and a publish
// would hang in a socket write that no context can interrupt.
type blockState struct {
	mu        sync.Mutex
	reason    string
	unblocked chan struct{} // nil when not blocked
}

func watchBlocked(conn *amqp.Connection, stop <-chan struct{}, log *slog.Logger) *blockState {
	b := &blockState{}
	events := conn.NotifyBlocked(make(chan amqp.Blocking, 16))
	go func() {
		defer b.set(amqp.Blocking{Active: false})
		for {
			select {
			case <-stop:
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Active {
					log.Warn("RabbitMQ blocked the connection: publishing waits until the alarm clears", "reason", ev.Reason)
				} else {
					log.Info("RabbitMQ unblocked the connection")
				}
				b.set(ev)
			}
		}
	}()
	return b
}

func (b *blockState) set(ev amqp.Blocking) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case ev.Active && b.unblocked == nil:
		b.unblocked, b.reason = make(chan struct{}), ev.Reason
	case !ev.Active && b.unblocked != nil:
		close(b.unblocked)
		b.unblocked, b.reason = nil, ""
	}
}

// wait returns a channel closed when the connection is unblocked, or nil
// when it is not blocked.
func (b *blockState) wait() (<-chan struct{}, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unblocked, b.reason
}

// pubChannel is one confirm-mode channel with a window of outstanding
// publishes. One writer goroutine publishes (so a publish stuck in a
// socket write never holds a caller past its context), one watcher
// goroutine resolves confirms in publish order.
type pubChannel struct {
	ch       *amqp.Channel
	log      *slog.Logger
	block    *blockState
	jobs     chan *job      // unbuffered: a job handed over is the writer's
	inflight chan []pending // capacity window: never blocks (slots bound it)
	slots    chan struct{}  // capacity window
	returns  <-chan amqp.Return
	batch    *batchConn    // nil on a borrowed connection
	dead     chan struct{} // closed once the channel closed
	queued   atomic.Int64  // jobs handed over and not yet written
	onPub    func()
	// nacked is set once RabbitMQ nacked a publish of the channel. The
	// Publisher then replaces the channel (pubSession.pick): on
	// RabbitMQ 3.10 a channel whose first publish to a quorum queue
	// came while the queue had no leader (just after its leader's node
	// died) nacks every later publish to that queue, for good, while a
	// new channel publishes once the queue elected a leader.
	nacked atomic.Bool

	errMu    sync.Mutex
	closeErr error
}

// openPubChannel opens a confirm-mode channel on conn. onClose, if set, is
// called with the broker's reason when the broker closes the channel.
func openPubChannel(conn *amqp.Connection, batch *batchConn, window int, block *blockState, log *slog.Logger,
	onPub func(), onClose func(*amqp.Error)) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		closeChannel(ch)
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	pc := &pubChannel{
		ch: ch, batch: batch, log: log, block: block, onPub: onPub,
		jobs:     make(chan *job),
		inflight: make(chan []pending, window),
		slots:    make(chan struct{}, window),
		dead:     make(chan struct{}),
	}
	// Every return precedes the confirm of its message, and returns wait
	// here only for messages holding a slot: window+1 never fills, so
	// amqp091-go never drops a return for a slow listener.
	pc.returns = ch.NotifyReturn(make(chan amqp.Return, window+1))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		e, ok := <-closes
		err := error(errors.New("channel closed"))
		if ok && e != nil {
			err = e
			log.Warn("publishing channel closed", "error", e)
			if onClose != nil {
				onClose(e)
			}
		}
		pc.errMu.Lock()
		pc.closeErr = err
		pc.errMu.Unlock()
		close(pc.dead)
	}()
	go pc.writer()
	go pc.watcher()
	return pc, nil
}

func (pc *pubChannel) isDead() bool {
	select {
	case <-pc.dead:
		return true
	default:
		return false
	}
}

func (pc *pubChannel) err() error {
	pc.errMu.Lock()
	defer pc.errMu.Unlock()
	if pc.closeErr == nil {
		return errors.New("channel closed")
	}
	return pc.closeErr
}

// load ranks channels for a new job: fewer queued jobs, then fewer
// messages in flight.
func (pc *pubChannel) load() int64 {
	return pc.queued.Load()*100000 + int64(len(pc.slots))
}

// errChannelClosed is returned by submit when the channel closed before
// the writer took the job.
var errChannelClosed = errors.New("channel closed")

// submit hands j to the writer. Once it returns nil the writer owns j and
// resolves every message; on an error j is untouched.
func (pc *pubChannel) submit(j *job) error {
	pc.queued.Add(1)
	select {
	case pc.jobs <- j:
		return nil
	case <-pc.dead:
		pc.queued.Add(-1)
		return errChannelClosed
	case <-j.ctx.Done():
		pc.queued.Add(-1)
		return j.ctx.Err()
	}
}

func (pc *pubChannel) close() { closeChannel(pc.ch) }

// closeWhenIdle closes the channel once no job waits for its writer and
// no publish awaits its confirm (so that their outcomes are RabbitMQ's,
// not unknown), or after closeTimeout, for a channel taken out of use.
func (pc *pubChannel) closeWhenIdle() {
	deadline := time.Now().Add(closeTimeout)
	for (pc.queued.Load() > 0 || len(pc.slots) > 0) && time.Now().Before(deadline) && !pc.isDead() {
		time.Sleep(10 * time.Millisecond)
	}
	pc.close()
}

func (pc *pubChannel) writer() {
	defer close(pc.inflight)
	for {
		select {
		case j := <-pc.jobs:
			pc.write(j)
			pc.queued.Add(-1)
		case <-pc.dead:
			return
		}
	}
}

func (pc *pubChannel) write(j *job) {
	defer j.markWritten()
	// The job's messages go to the socket together (see batchConn), and
	// to the watcher together, and both before the writer waits: the
	// confirms that free a window slot come only for messages RabbitMQ
	// has.
	h := holder{c: pc.batch}
	var sent []pending
	handOver := func() {
		if len(sent) > 0 {
			pc.inflight <- sent
			sent = nil
		}
		h.release()
	}
	h.hold()
	defer handOver()
	for i := range j.out {
		if j.settled(i) {
			continue
		}
		if err := j.ctx.Err(); err != nil {
			j.failFrom(i, ferrytype.NotSent(fmt.Errorf("not sent: %w", err)))
			return
		}
		select {
		case pc.slots <- struct{}{}:
		default:
			handOver()
			select {
			case pc.slots <- struct{}{}:
			case <-j.ctx.Done():
				j.failFrom(i, ferrytype.NotSent(fmt.Errorf("not sent: waiting for a confirm window slot: %w", j.ctx.Err())))
				return
			case <-pc.dead:
				j.failFrom(i, ferrytype.NotSent(fmt.Errorf("not sent: %w", pc.err())))
				return
			}
			h.hold()
		}
		if unblocked, reason := pc.block.wait(); unblocked != nil {
			handOver()
			select {
			case <-unblocked:
			case <-j.ctx.Done():
				<-pc.slots
				j.failFrom(i, ferrytype.NotSent(fmt.Errorf("not sent: RabbitMQ blocked the connection (%s): %w", reason, j.ctx.Err())))
				return
			case <-pc.dead:
				<-pc.slots
				j.failFrom(i, ferrytype.NotSent(fmt.Errorf("not sent: %w", pc.err())))
				return
			}
			h.hold()
		}
		if !j.begin(i) {
			<-pc.slots
			continue
		}
		o := &j.out[i]
		// Only this goroutine publishes on the channel: the next sequence
		// number is the one the publish gets.
		tag := pc.ch.GetNextPublishSeqNo()
		o.pub.Headers[HeaderPublishTag] = int64(tag)
		dc, err := pc.ch.PublishWithDeferredConfirm(o.exchange, o.key, true, false, o.pub)
		if err != nil {
			<-pc.slots
			// The frames may have been partly written: unknown.
			j.resolve(i, ferrytype.Unknown(fmt.Errorf("publish: %w", err)))
			continue
		}
		if pc.onPub != nil {
			pc.onPub()
		}
		if sent == nil {
			sent = make([]pending, 0, len(j.out)-i)
		}
		sent = append(sent, pending{dc: dc, tag: tag, mismatch: dc == nil || dc.DeliveryTag != tag, job: j, i: i})
	}
}

// watcher resolves each publish, in publish order, once its confirm came
// or its channel closed.
func (pc *pubChannel) watcher() {
	returned := map[uint64]amqp.Return{}
	returns := pc.returns
	for ps := range pc.inflight {
		for i := range ps {
			pc.settle(&ps[i], &returns, returned)
		}
	}
}

// settle resolves p once its confirm came or its channel closed.
func (pc *pubChannel) settle(p *pending, returns *<-chan amqp.Return, returned map[uint64]amqp.Return) {
	var ack bool
	if p.dc != nil {
		<-p.dc.Done()
		ack = p.dc.Acked()
	}
	// The basic.return of a message precedes its basic.ack on the
	// channel, and amqp091-go hands the return over before it
	// processes the ack: it is in the buffer now.
	*returns = drainReturns(*returns, returned)
	var res ferrytype.PublishResult
	r, wasReturned := returned[p.tag]
	switch {
	case wasReturned:
		delete(returned, p.tag)
		res = ferrytype.Returned(fmt.Errorf("unroutable: RabbitMQ returned it (%d %s, exchange %q, routing key %q)",
			r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey))
	case p.mismatch:
		res = ferrytype.Unknown(errors.New("confirm sequence numbers out of step; outcome unknown"))
	case ack:
		res = ferrytype.Confirmed()
	case pc.ch.IsClosed():
		// amqp091-go nacks every pending confirm when the channel
		// closes (it marks the channel closed first): that is no
		// broker nack, the message may well be stored.
		<-pc.dead
		res = ferrytype.Unknown(fmt.Errorf("channel closed with the confirm pending: %w", pc.err()))
	default:
		pc.nacked.Store(true)
		res = ferrytype.Rejected(errors.New("RabbitMQ nacked the message (basic.nack): it did not store it"))
	}
	for t := range returned {
		if t < p.tag {
			pc.log.Warn("dropping a return that matches no pending publish", "publish_tag", t)
			delete(returned, t)
		}
	}
	<-pc.slots
	p.job.resolve(p.i, res)
}

func drainReturns(returns <-chan amqp.Return, into map[uint64]amqp.Return) <-chan amqp.Return {
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return nil
			}
			if tag, ok := publishTag(r.Headers); ok {
				into[tag] = r
			}
		default:
			return returns
		}
	}
}

func publishTag(h amqp.Table) (uint64, bool) {
	switch v := h[HeaderPublishTag].(type) {
	case int64:
		return uint64(v), v > 0
	case int32:
		return uint64(v), v > 0
	case uint64:
		return v, v > 0
	case uint32:
		return uint64(v), v > 0
	case int:
		return uint64(v), v > 0
	}
	return 0, false
}
