package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
)

// Publisher publishes outbox events to RabbitMQ with publisher confirms.
// It implements ferrybroker.Publisher and ferrybroker.Checker. It is safe
// for concurrent use; each Publish call goes to one of Config.Channels
// channels, the least busy.
type Publisher struct {
	cfg       Config
	log       *slog.Logger
	link      *link[*pubSession]
	published atomic.Int64
	addr      string // the broker's address without credentials: String
	vhost     string // the broker's virtual host: Durability
}

var (
	_ ferrybroker.Publisher    = (*Publisher)(nil)
	_ ferrybroker.Checker      = (*Publisher)(nil)
	_ ferrybroker.Connectivity = (*Publisher)(nil)
)

// New returns a publisher on conn, a connection the caller opened and
// keeps owning: Close leaves it open, and when it closes the publisher
// reports every later publish unknown without reconnecting (use Dial for
// that). The topology is declared or checked as cfg says before New
// returns. conn must not have amqp091-go's automatic recovery enabled.
func New(ctx context.Context, conn *amqp.Connection, cfg *Config) (*Publisher, error) {
	p, err := newPublisher(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkBorrowed(conn); err != nil {
		return nil, fmt.Errorf("ferryamqp.New: %w", err)
	}
	p.addr = connAddress(conn)
	if p.vhost = conn.Config.Vhost; p.vhost == "" {
		p.vhost = "/"
	}
	if err := p.link.start(ctx, conn, nil); err != nil {
		return nil, err
	}
	return p, nil
}

// Schemes returns the URL schemes Dial accepts: amqp and amqps.
func Schemes() []string { return []string{"amqp", "amqps"} }

// Dial connects to the RabbitMQ server at url
// (amqp://user:password@host:5672/vhost, or amqps:// for TLS; see
// ConnectionConfig.TLS) and returns a publisher that owns the connection:
// it reconnects with backoff after a loss, declaring or checking the
// topology again, and closes the connection on Close. Publishes made while
// the connection is down wait up to Config.ReconnectWait, then end as
// unknown outcomes that were not sent (ferrytype.ErrNotSent), which the
// relay gives back without spending an attempt. The first connection must
// succeed. Errors never contain the password.
//
// url may list the nodes of a cluster, comma-separated
// (amqp://u:p@host1:5672/,amqp://u:p@host2:5672/,amqp://u:p@host3:5672/),
// each a whole URL, all with the same virtual host. The publisher holds
// one connection, to one node at a time: the first connection tries the
// nodes in the order given, and each reconnection starts at the node
// after the one last connected to and tries each node once per attempt
// (then waits its backoff). A reconnection to another node than before is
// logged, once, with both nodes' addresses; an attempt that failed says
// why at each node. Use quorum queues on a cluster: a confirm then means
// a majority of the queue's members stored the message, whichever node
// the publisher is connected to.
func Dial(ctx context.Context, url string, cfg *Config) (*Publisher, error) {
	p, err := newPublisher(cfg)
	if err != nil {
		return nil, err
	}
	n, err := parseNodes(url)
	if err != nil {
		return nil, err
	}
	p.addr = ferrytype.RedactURL(url)
	p.vhost = n.vhost
	if err := p.link.start(ctx, nil, n.dialer(p.cfg.Connection)); err != nil {
		return nil, err
	}
	return p, nil
}

// String returns the address of the RabbitMQ server the publisher
// publishes to, without credentials: the URL Dial was given (every node
// of a list, not the one connected to), its password replaced by xxxxx,
// or, for New, amqp:// (amqps:// over TLS) with the connection's peer
// address and virtual host. A relay records it in its heartbeat row
// (ferry.HeartbeatConfig.Broker).
func (p *Publisher) String() string { return p.addr }

// connAddress describes the server conn is connected to, as a URL
// without credentials.
func connAddress(conn *amqp.Connection) string {
	scheme := "amqp"
	if conn.ConnectionState().HandshakeComplete {
		scheme = "amqps"
	}
	vhost := "/"
	if v := conn.Config.Vhost; v != "" && v != "/" {
		vhost += url.PathEscape(v)
	}
	return scheme + "://" + conn.RemoteAddr().String() + vhost
}

func newPublisher(cfg *Config) (*Publisher, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: c, log: c.Logger}
	p.link = newLink(c.Logger, c.Connection, p.openSession)
	return p, nil
}

// pubSession is the publisher's state on one connection.
type pubSession struct {
	p     *Publisher
	conn  *amqp.Connection
	batch *batchConn // nil on a borrowed connection
	block *blockState
	stop  chan struct{}

	mu    sync.Mutex
	chans []*pubChannel
	known map[string]bool // exchanges known to exist

	checkMu sync.Mutex // one exchange check at a time
}

func (p *Publisher) openSession(ctx context.Context, conn *amqp.Connection, batch *batchConn) (*pubSession, error) {
	known, err := setup(ctx, conn, p.cfg.Topology, p.cfg.Declare, p.cfg.Exchange, p.cfg.ExchangeKind, p.log)
	if err != nil {
		return nil, err
	}
	s := &pubSession{p: p, conn: conn, batch: batch, stop: make(chan struct{}), known: known, chans: make([]*pubChannel, p.cfg.Channels)}
	s.block = watchBlocked(conn, s.stop, p.log)
	for i := range s.chans {
		if s.chans[i], err = s.openChannel(); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// done is never closed: the link watches the connection itself, and a
// closed channel is reopened by pick.
func (s *pubSession) done() <-chan struct{} { return nil }

func (s *pubSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	for _, pc := range s.chans {
		if pc != nil {
			pc.close()
		}
	}
}

func (s *pubSession) openChannel() (*pubChannel, error) {
	onPub := func() {
		n := s.p.published.Add(1)
		if s.p.cfg.testAfterPublish != nil {
			s.p.cfg.testAfterPublish(n)
		}
	}
	onClose := func(e *amqp.Error) {
		if e.Code == amqp.NotFound {
			// Most likely an exchange deleted since it was checked.
			s.mu.Lock()
			s.known = map[string]bool{"": true}
			s.mu.Unlock()
		}
	}
	return openPubChannel(s.conn, s.batch, s.p.cfg.Window, s.block, s.p.log, onPub, onClose)
}

// pick returns the least busy live channel, reopening closed ones and
// replacing those RabbitMQ nacked a publish on (pubChannel.nacked; the
// replaced one closes once its publishes in flight are settled).
func (s *pubSession) pick() (*pubChannel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return nil, fmt.Errorf("%w: publisher closed", ErrNotConnected)
	default:
	}
	var best *pubChannel
	var openErr error
	blocked, _ := s.block.wait()
	for i, pc := range s.chans {
		if pc != nil && !pc.isDead() && pc.nacked.Load() && blocked == nil {
			npc, err := s.openChannel()
			if err != nil {
				openErr = err
				continue
			}
			s.p.log.Warn("RabbitMQ nacked a publish: the channel is replaced by a new one " +
				"(on RabbitMQ 3.10 a channel that published to a quorum queue without a leader nacks every later publish to it)")
			go pc.closeWhenIdle()
			s.chans[i], pc = npc, npc
		}
		if pc == nil || pc.isDead() {
			if blocked != nil {
				// Opening a channel is a call RabbitMQ would not answer
				// before the alarm clears.
				openErr = errors.New("RabbitMQ blocked the connection")
				continue
			}
			npc, err := s.openChannel()
			if err != nil {
				openErr = err
				continue
			}
			s.chans[i], pc = npc, npc
		}
		if best == nil || pc.load() < best.load() {
			best = pc
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, openErr)
	}
	return best, nil
}

// exchangeExists reports whether the exchange exists, checking it with a
// passive declare on a throwaway channel the first time: publishing to a
// missing exchange would make RabbitMQ close the channel, turning every
// publish in flight on it into an unknown outcome.
func (s *pubSession) exchangeExists(ctx context.Context, name string) (bool, error) {
	s.mu.Lock()
	ok := s.known[name]
	s.mu.Unlock()
	if ok {
		return true, nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	s.mu.Lock()
	ok = s.known[name]
	s.mu.Unlock()
	if ok {
		return true, nil
	}
	if blocked, reason := s.block.wait(); blocked != nil {
		return false, fmt.Errorf("cannot check exchange %s: RabbitMQ blocked the connection (%s)", name, reason)
	}
	err := rpc(ctx, func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		err = ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil)
		_ = ch.Close()
		return err
	})
	switch code(err) {
	case 0:
		s.mu.Lock()
		s.known[name] = true
		s.mu.Unlock()
		return true, nil
	case amqp.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("check exchange %s: %w", name, err)
}

// Publish publishes msgs as persistent, mandatory messages and waits for
// each one's own confirm. Outcomes:
//
//   - confirmed: RabbitMQ acked that very message (basic.ack) and did not
//     return it.
//   - returned: RabbitMQ returned it as unroutable (basic.return; it acks
//     such a message too), or its exchange does not exist.
//   - rejected: RabbitMQ nacked it on a live channel (basic.nack: e.g. a
//     quorum queue at its length limit with overflow=reject-publish), or
//     it breaks an AMQP limit and was never sent.
//   - unknown: everything else that may have reached RabbitMQ: the
//     context ended first, the channel or connection closed with the
//     confirm pending.
//   - unknown and not sent (ferrytype.ErrNotSent): the message never left
//     the process: the connection was down or blocked, or the context
//     ended or the channel closed before it was written.
//
// Once the batch is written, and before its confirms are awaited, Publish
// reaches the fault point ferryfault.PublishBeforeConfirm of ctx: an error
// there makes every message not yet confirmed unknown, as a crash there
// would.
func (p *Publisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	if len(msgs) == 0 {
		return []ferrytype.PublishResult{}
	}
	if err := ctx.Err(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("not sent: %w", err))
	}
	s, err := p.link.current(ctx, p.cfg.ReconnectWait)
	if err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("not sent: %w", err))
	}
	j := newJob(ctx, len(msgs))
	checked := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		ex := m.Exchange
		if ex == "" {
			ex = p.cfg.Exchange
		}
		if err := validate(m, ex); err != nil {
			j.resolve(i, ferrytype.Rejected(fmt.Errorf("not sent: %w", err)))
			continue
		}
		exists, seen := checked[ex]
		if !seen {
			exists, err = s.exchangeExists(ctx, ex)
			if err != nil {
				j.resolve(i, ferrytype.NotSent(fmt.Errorf("not sent: %w", err)))
				continue
			}
			checked[ex] = exists
		}
		if !exists {
			j.resolve(i, ferrytype.Returned(fmt.Errorf("unroutable: exchange %s does not exist", ex)))
			continue
		}
		pub, err := publishing(m, p.cfg.Encoding)
		if err != nil {
			j.resolve(i, ferrytype.Rejected(fmt.Errorf("not sent: %w", err)))
			continue
		}
		j.out[i] = outgoing{exchange: ex, key: m.Route(), pub: pub}
	}
	p.dispatch(s, j)
	select {
	case <-j.written:
	case <-j.done:
	case <-ctx.Done():
	}
	if err := ferryfault.At(ctx, ferryfault.PublishBeforeConfirm); err != nil {
		return j.finish(fmt.Errorf("fault before confirm: %w", err))
	}
	select {
	case <-j.done:
	case <-ctx.Done():
	}
	return j.finish(fmt.Errorf("waiting for the confirm: %w", ctx.Err()))
}

func (p *Publisher) dispatch(s *pubSession, j *job) {
	select {
	case <-j.done:
		return // every message already has its outcome
	default:
	}
	for attempt := 0; attempt < 3; attempt++ {
		pc, err := s.pick()
		if err != nil {
			j.failFrom(0, ferrytype.NotSent(fmt.Errorf("not sent: %w", err)))
			return
		}
		switch err := pc.submit(j); {
		case err == nil:
			return
		case !errors.Is(err, errChannelClosed):
			j.failFrom(0, ferrytype.NotSent(fmt.Errorf("not sent: %w", err)))
			return
		}
	}
	j.failFrom(0, ferrytype.NotSent(errors.New("not sent: RabbitMQ keeps closing the channels")))
}

func validate(m *ferrytype.Message, exchange string) error {
	const limit = 255 // AMQP short strings
	switch {
	case len(m.Route()) > limit:
		return fmt.Errorf("routing key is longer than %d bytes", limit)
	case len(exchange) > limit:
		return fmt.Errorf("exchange name is longer than %d bytes", limit)
	case len(m.ID) > limit:
		return fmt.Errorf("event id is longer than %d bytes", limit)
	case len(m.Type) > limit:
		return fmt.Errorf("event type is longer than %d bytes", limit)
	}
	for k := range m.Headers {
		if len(k) > limit {
			return fmt.Errorf("header name %.20q... is longer than %d bytes", k, limit)
		}
	}
	return nil
}

// publishing builds the AMQP message of m: persistent, message_id the
// event id, type the event type, timestamp its creation, app_id ferry;
// with enc nil, JSON, and in the headers the event's own headers (the
// trace context) overlaid with ferry's metadata headers; else the headers,
// content type and body enc writes.
func publishing(m *ferrytype.Message, enc ferrybroker.Encoding) (amqp.Publishing, error) {
	pub := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Type:         m.Type,
		Timestamp:    m.CreatedAt,
		AppId:        "ferry",
		Body:         m.Payload,
	}
	if enc != nil {
		e, err := enc.Encode(m, ferrybroker.ProtocolAMQP)
		if err != nil {
			return pub, err
		}
		pub.Headers = make(amqp.Table, len(e.Headers))
		for _, kv := range e.Headers {
			pub.Headers[kv[0]] = kv[1]
		}
		pub.ContentType, pub.Body = e.ContentType, e.Body
		return pub, nil
	}
	pub.Headers = make(amqp.Table, len(m.Headers)+8)
	for k, v := range m.Headers {
		pub.Headers[k] = v
	}
	for _, kv := range ferrybroker.MetadataHeaders(m) {
		pub.Headers[kv[0]] = kv[1]
	}
	return pub, nil
}

// Check reports whether the publisher is connected and RabbitMQ accepts
// publishes: it fails while the connection is down or blocked by a
// resource alarm.
func (p *Publisher) Check(ctx context.Context) error {
	s, err := p.link.current(ctx, -1)
	if err != nil {
		return err
	}
	if blocked, reason := s.block.wait(); blocked != nil {
		return fmt.Errorf("RabbitMQ blocked the connection (%s): publishes wait until the alarm clears", reason)
	}
	err = rpc(ctx, func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return err
		}
		return ch.Close()
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	return nil
}

// Connected reports whether the publisher has a connection to RabbitMQ
// and RabbitMQ does not block it (see ferrybroker.Connectivity). It makes
// no round trip.
func (p *Publisher) Connected() bool { return p.Disconnected() == nil }

// Disconnected says why the publisher cannot publish now: the connection
// is down (wrapping ErrNotConnected and the last connection error) or
// RabbitMQ blocked it. It returns nil when Connected is true.
func (p *Publisher) Disconnected() error {
	s, err := p.link.current(context.Background(), -1)
	if err != nil {
		return err
	}
	if blocked, reason := s.block.wait(); blocked != nil {
		return fmt.Errorf("RabbitMQ blocked the connection (%s)", reason)
	}
	return nil
}

// Published returns the number of messages the publisher handed to
// RabbitMQ since it was created, republished ones included.
func (p *Publisher) Published() int64 { return p.published.Load() }

// Close closes the publisher's channels, and its connection if Dial opened
// it. Publishes still waiting for confirms end as unknown. Closing twice
// is safe.
func (p *Publisher) Close() error {
	p.link.shutdown()
	return nil
}
