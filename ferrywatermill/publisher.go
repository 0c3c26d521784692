package ferrywatermill

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Guarantee says what a nil error from a Watermill publisher's Publish
// means. Watermill's interface returns one error and nothing else, so the
// publisher's user must say it: ferry cannot find out.
type Guarantee int

const (
	// Stored: Publish returns nil only once the broker stored the message.
	// watermill-amqp with Publish.ConfirmDelivery set; watermill-redisstream
	// (XADD answered: as durable as the Redis server's persistence
	// settings); watermill-kafka's synchronous publisher with acks=all;
	// watermill-sql; watermill-googlecloud.
	Stored Guarantee = iota + 1
	// HandedOff: nil means the message was handed to a client library or
	// written to a socket, without a confirmation: GoChannel,
	// watermill-amqp without ConfirmDelivery, core NATS. Events are marked
	// sent when Publish returns nil, and a message lost after that is lost
	// without ferry knowing. NewPublisher logs a warning naming it.
	HandedOff
)

// String returns the guarantee's name.
func (g Guarantee) String() string {
	switch g {
	case Stored:
		return "stored"
	case HandedOff:
		return "handed-off"
	}
	return fmt.Sprintf("guarantee(%d)", int(g))
}

// DefaultConcurrency is the default number of Publish calls a Publisher
// makes at once.
const DefaultConcurrency = 64

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Guarantee says what a nil error from the Watermill publisher means.
	// Required: Stored or HandedOff.
	Guarantee Guarantee
	// Concurrency is the number of Watermill Publish calls made at once,
	// one message each, so that every message gets its own outcome.
	// Messages of one aggregate are published one after another, in
	// order. Default 64.
	Concurrency int
	// Connected, when set, tells whether a publish made now could reach
	// the broker; nil means it could not be known (see
	// ferrybroker.Connectivity). While it returns an error, messages are
	// not handed to the Watermill publisher and come back not sent, and
	// the relay stops claiming. Default none: always connected. (Not
	// watermill-amqp's IsConnected by default: in v3.0.2 it reads a field
	// its reconnect loop writes without a lock, a data race.)
	Connected func() error
	// NotSent, when set, reports the errors of the Watermill publisher that
	// prove the message never left the process (a failed dial by a client
	// that does not resend a failed command, say): those messages come
	// back not sent, spending no attempt, instead of unknown. Default: no
	// error proves it.
	NotSent func(err error) bool
	// Logger receives the publisher's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Publisher publishes a relay's events through any Watermill publisher:
// ferry relay delivering to every broker Watermill has. It implements
// ferrybroker.Publisher and ferrybroker.Connectivity.
//
// Outcomes: a message whose Publish call returned nil is confirmed (what
// that vouches for is PublisherConfig.Guarantee); one whose call returned
// an error is unknown, since a Watermill publisher may fail after the
// broker took the message — it is published again, with the same id, and
// the inbox downstream absorbs the duplicate. A message never handed to
// the Watermill publisher (the context ended first, the connectivity
// probe said the broker is unreachable, an earlier event of its aggregate
// failed, PublisherConfig.NotSent recognised the error) is unknown and not
// sent. Watermill cannot report an unroutable
// message: a publisher that drops them (an AMQP exchange without a bound
// queue) loses them while reporting success, so the destination must
// exist before events are relayed to it.
//
// A Watermill Publish cannot be interrupted: when ctx ends while calls are
// running, their messages are reported unknown at once and the calls go
// on in the background; Close waits for them.
type Publisher struct {
	pub       message.Publisher
	cfg       PublisherConfig
	sem       chan struct{}
	inflight  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var (
	_ ferrybroker.Publisher    = (*Publisher)(nil)
	_ ferrybroker.Connectivity = (*Publisher)(nil)
)

// NewPublisher returns a ferry publisher that publishes through pub.
func NewPublisher(pub message.Publisher, cfg *PublisherConfig) (*Publisher, error) {
	if nilness.Nil(pub) {
		return nil, fmt.Errorf("%w: ferrywatermill.NewPublisher: the Watermill publisher is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: ferrywatermill.NewPublisher needs a config saying what a nil error from %T means (Guarantee)",
			ferrytype.ErrInvalidConfig, pub)
	}
	c := *cfg
	switch c.Guarantee {
	case Stored, HandedOff:
	default:
		return nil, fmt.Errorf("%w: PublisherConfig.Guarantee must be Stored or HandedOff: say what a nil error from %T means",
			ferrytype.ErrInvalidConfig, pub)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		return nil, fmt.Errorf("%w: PublisherConfig.Concurrency %d must be within 1..4096", ferrytype.ErrInvalidConfig, c.Concurrency)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Guarantee == HandedOff {
		c.Logger.Warn("ferrywatermill: events are marked sent when the Watermill publisher takes them, without a broker confirmation: a message lost after that is lost unseen",
			"publisher", fmt.Sprintf("%T", pub))
	}
	return &Publisher{pub: pub, cfg: c, sem: make(chan struct{}, c.Concurrency)}, nil
}

// Connected reports whether the connectivity probe (PublisherConfig.Connected)
// finds the broker reachable; true when there is no probe.
func (p *Publisher) Connected() bool { return p.Disconnected() == nil }

// Disconnected returns the probe's error, nil while it finds the broker
// reachable or when there is no probe.
func (p *Publisher) Disconnected() error {
	if p.cfg.Connected == nil {
		return nil
	}
	return p.cfg.Connected()
}

// Publish publishes msgs, each in a Watermill Publish call of its own to
// the topic that is its route (its destination, else its type), at
// most Concurrency at once, an aggregate's events in order; see Publisher
// for the outcomes.
func (p *Publisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	if err := ctx.Err(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("publish: %w", err))
	}
	if err := p.Disconnected(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("publish: broker unreachable: %w", err))
	}
	var wg sync.WaitGroup
	for _, run := range runs(msgs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.publishRun(ctx, msgs, run, res)
		}()
	}
	wg.Wait()
	return res
}

// runs groups the indexes of msgs by aggregate, in order; a message
// without an aggregate is a run of its own.
func runs(msgs []ferrytype.Message) [][]int {
	var out [][]int
	byAgg := map[[2]string]int{}
	for i := range msgs {
		m := &msgs[i]
		if m.AggregateID == "" {
			out = append(out, []int{i})
			continue
		}
		k := [2]string{m.AggregateType, m.AggregateID}
		if j, ok := byAgg[k]; ok {
			out[j] = append(out[j], i)
			continue
		}
		byAgg[k] = len(out)
		out = append(out, []int{i})
	}
	return out
}

// publishRun publishes the messages of one run one after another; after
// one that is not confirmed, the rest are not sent, so that the
// aggregate's order holds on the broker.
func (p *Publisher) publishRun(ctx context.Context, msgs []ferrytype.Message, run []int, res []ferrytype.PublishResult) {
	for k, i := range run {
		r := p.publishOne(ctx, &msgs[i])
		res[i] = r
		if r.Outcome == ferrytype.OutcomeConfirmed {
			continue
		}
		for _, j := range run[k+1:] {
			res[j] = ferrytype.NotSent(fmt.Errorf("not published: event %s of aggregate %s/%s before it was not confirmed",
				msgs[i].ID, msgs[i].AggregateType, msgs[i].AggregateID))
		}
		return
	}
}

func (p *Publisher) publishOne(ctx context.Context, m *ferrytype.Message) ferrytype.PublishResult {
	topic := m.Route()
	msg, err := Message(m)
	if err != nil {
		return ferrytype.Rejected(err)
	}
	msg.SetContext(ctx)
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return ferrytype.NotSent(fmt.Errorf("publish: %w", ctx.Err()))
	}
	done := make(chan error, 1)
	p.inflight.Add(1)
	go func() {
		defer p.inflight.Done()
		defer func() { <-p.sem }()
		done <- publishSafely(p.pub, topic, msg)
	}()
	select {
	case err := <-done:
		if err != nil {
			err = fmt.Errorf("watermill publish to %q: %w", topic, err)
			if p.cfg.NotSent != nil && p.cfg.NotSent(err) {
				return ferrytype.NotSent(err)
			}
			return ferrytype.Unknown(err)
		}
		return ferrytype.Confirmed()
	case <-ctx.Done():
		return ferrytype.Unknown(fmt.Errorf("publish to %q: %w (the Watermill call goes on)", topic, ctx.Err()))
	}
}

// publishSafely publishes msg through pub, a panic being an error.
func publishSafely(pub message.Publisher, topic string, msg *message.Message) error {
	return safely("publisher", func() error { return pub.Publish(topic, msg) })
}

// safely runs call, a call into the Watermill publisher or subscriber
// that what names; a panic in it is an error of the call ("the Watermill
// publisher panicked: ..."), not a crash of the caller.
func safely(what string, call func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the Watermill %s panicked: %v", what, v)
		}
	}()
	return call()
}

// Close waits for the Watermill Publish calls still running, then closes
// the Watermill publisher; a panic in its Close is returned as an error,
// as one in Publish is (watermill-amqp v3.0.2 with a channel pool panics
// there once a pooled channel failed to reopen, after a reconnect).
// Closing twice is safe: the Watermill publisher is closed once, and
// every call returns that first result.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.inflight.Wait()
		p.closeErr = safely("publisher", p.pub.Close)
	})
	return p.closeErr
}
