package ferrykafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
)

// TopicFrom names what the topic of a message without a destination is
// derived from.
type TopicFrom string

// The ways a topic is derived.
const (
	// TopicFromEventType publishes to the event's type ("OrderPaid").
	TopicFromEventType TopicFrom = "event-type"
	// TopicFromAggregateType publishes to the event's aggregate type
	// ("order"), so that every event of an aggregate shares one topic and,
	// keyed by the aggregate id, one partition. An event without an
	// aggregate type is unroutable.
	TopicFromAggregateType TopicFrom = "aggregate-type"
)

// Config configures a Publisher. A nil config uses the defaults; zero
// fields take the default named in their comment.
type Config struct {
	// Encoding writes each event as a record in place of ferry's form
	// (ferrybroker.Encoding; ferrycloudevents.Encoding writes CloudEvents
	// in the Kafka binding's ce_ headers). Default nil: ferry's form. The
	// record key stays the aggregate id either way.
	Encoding ferrybroker.Encoding
	// TopicFrom derives the topic of a message whose event has no
	// Destination: TopicFromEventType or TopicFromAggregateType. Default
	// TopicFromEventType. A Destination is always the topic itself.
	TopicFrom TopicFrom
	// TopicPrefix is put before every derived topic ("orders." makes
	// OrderPaid's topic orders.OrderPaid); never before a Destination.
	// Default none.
	TopicPrefix string
	// Topics are checked at start: each must exist, or, with Declare, is
	// created; a missing one fails Dial and New with an error wrapping
	// kerr.UnknownTopicOrPartition. Default none: no check; a message to a topic that does not
	// exist is unroutable (OutcomeReturned).
	Topics []string
	// Declare creates the Topics that do not exist at start, with
	// Partitions partitions and ReplicationFactor replicas. Default
	// false.
	Declare bool
	// Partitions of a declared topic. Default -1: the brokers' default
	// (num.partitions).
	Partitions int32
	// ReplicationFactor of a declared topic. Default -1: the brokers'
	// default (default.replication.factor).
	ReplicationFactor int16
	// MinInsyncReplicas is the min.insync.replicas of a declared topic:
	// how many replicas must hold a record before the brokers acknowledge
	// it (with acks all, the client's default). Default -1: the brokers'
	// default, usually 1, with which a confirmed record may be on one
	// broker only (Durability says so). 2 with ReplicationFactor 3 keeps
	// every confirmed record on two brokers and writes going with one down.
	MinInsyncReplicas int
	// MaxBufferedRecords caps the records the publisher has handed to
	// the client and not seen finished; a Publish beyond it waits for
	// room, or for its context (the messages still waiting are then not
	// sent). Dial's client buffers as many (kgo.MaxBufferedRecords); a
	// client given to New that has less room refuses the rest, which are
	// not sent either. Default 10000.
	MaxBufferedRecords int
	// ClientOpts are further franz-go options for the client Dial builds,
	// applied after ferry's and the URL's, so that they override both. New
	// ignores them.
	ClientOpts []kgo.Opt
	// PingInterval is how often the publisher asks the brokers for
	// metadata to know whether it is connected (see Connected). Default
	// 1s.
	PingInterval time.Duration
	// Logger receives the publisher's logs: a lost or regained
	// connection, a client rebuilt after a fatal producer error. Default:
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.TopicFrom == "" {
		out.TopicFrom = TopicFromEventType
	}
	if out.Partitions == 0 {
		out.Partitions = -1
	}
	if out.ReplicationFactor == 0 {
		out.ReplicationFactor = -1
	}
	if out.MinInsyncReplicas == 0 {
		out.MinInsyncReplicas = -1
	}
	if out.MaxBufferedRecords == 0 {
		out.MaxBufferedRecords = 10000
	}
	if out.PingInterval == 0 {
		out.PingInterval = time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	switch {
	case out.TopicFrom != TopicFromEventType && out.TopicFrom != TopicFromAggregateType:
		return out, fmt.Errorf("%w: Config.TopicFrom %q must be %q or %q", ferrytype.ErrInvalidConfig,
			out.TopicFrom, TopicFromEventType, TopicFromAggregateType)
	case out.Partitions < -1:
		return out, fmt.Errorf("%w: Config.Partitions %d must be positive, or -1 for the brokers' default", ferrytype.ErrInvalidConfig, out.Partitions)
	case out.ReplicationFactor < -1:
		return out, fmt.Errorf("%w: Config.ReplicationFactor %d must be positive, or -1 for the brokers' default",
			ferrytype.ErrInvalidConfig, out.ReplicationFactor)
	case out.MinInsyncReplicas < -1:
		return out, fmt.Errorf("%w: Config.MinInsyncReplicas %d must be positive, or -1 for the brokers' default",
			ferrytype.ErrInvalidConfig, out.MinInsyncReplicas)
	case out.MinInsyncReplicas > 0 && out.ReplicationFactor > 0 && out.MinInsyncReplicas > int(out.ReplicationFactor):
		return out, fmt.Errorf("%w: Config.MinInsyncReplicas %d is above ReplicationFactor %d: the brokers would refuse every write",
			ferrytype.ErrInvalidConfig, out.MinInsyncReplicas, out.ReplicationFactor)
	case out.MaxBufferedRecords < 1:
		return out, fmt.Errorf("%w: Config.MaxBufferedRecords %d must be positive", ferrytype.ErrInvalidConfig, out.MaxBufferedRecords)
	case out.PingInterval < 10*time.Millisecond:
		return out, fmt.Errorf("%w: Config.PingInterval %s is below 10ms", ferrytype.ErrInvalidConfig, out.PingInterval)
	case out.Declare && len(out.Topics) == 0:
		return out, fmt.Errorf("%w: Config.Declare needs Topics", ferrytype.ErrInvalidConfig)
	}
	if out.TopicPrefix != "" {
		if err := validTopic(out.TopicPrefix + "x"); err != nil {
			return out, fmt.Errorf("%w: Config.TopicPrefix: %v", ferrytype.ErrInvalidConfig, err)
		}
	}
	for _, t := range out.Topics {
		if err := validTopic(t); err != nil {
			return out, fmt.Errorf("%w: Config.Topics: %v", ferrytype.ErrInvalidConfig, err)
		}
	}
	return out, nil
}

// Publisher publishes to Kafka through a franz-go client. It implements
// ferrybroker.Publisher, ferrybroker.Checker and
// ferrybroker.Connectivity.
type Publisher struct {
	cfg        Config
	owned      bool      // Dial built the client
	opts       []kgo.Opt // the options Dial built the client with
	secrets    []string  // URLs whose passwords no error may show
	autoCreate bool      // the client asks the brokers to create missing topics

	mu      sync.Mutex
	cur     *clientGen
	closed  bool
	closing sync.WaitGroup // clients replaced after a fatal error, being closed

	slots chan struct{}             // one per record handed to the client and not finished
	known sync.Map                  // topic name → struct{}: topics the brokers said exist
	conn  atomic.Pointer[connState] // nil while the last ping succeeded

	stopWatch context.CancelFunc
	watching  chan struct{}
}

var (
	_ ferrybroker.Publisher    = (*Publisher)(nil)
	_ ferrybroker.Checker      = (*Publisher)(nil)
	_ ferrybroker.Connectivity = (*Publisher)(nil)
)

// clientGen is one client and the fatal producer error that ended it.
type clientGen struct {
	cl     *kgo.Client
	ours   bool // the publisher built it: it closes it
	poison atomic.Pointer[error]
}

func (g *clientGen) poisoned() error {
	if e := g.poison.Load(); e != nil {
		return *e
	}
	return nil
}

// notePoison records err if it is a fatal producer error: one after which
// franz-go fails every later record of the client (its producer id
// stays failed).
func (g *clientGen) notePoison(err error) {
	if err == nil || !fatalProducerErr(err) {
		return
	}
	g.poison.CompareAndSwap(nil, &err)
}

func fatalProducerErr(err error) bool {
	for _, e := range []error{kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID, kerr.InvalidProducerEpoch,
		kerr.InvalidProducerIDMapping, kerr.ProducerFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

type connState struct{ err error }

// copyable reports whether a client built from cl's options would only
// produce, as cl does: not consume in a group or from topics, not fence
// cl's transactions.
func copyable(cl *kgo.Client) bool {
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		return false
	}
	if ts, _ := cl.OptValue(kgo.ConsumeTopics).([]string); len(ts) > 0 {
		return false
	}
	if ps, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset); len(ps) > 0 {
		return false
	}
	if txn, _ := cl.OptValue(kgo.TransactionalID).(string); txn != "" {
		return false
	}
	return true
}

// New returns a publisher on cl, a client the caller built and keeps
// owning: Close does not close it. When a fatal producer error ends cl's
// producer (see Disconnected), the publisher builds a client of its own
// from cl's options (cl.Opts()) and produces on it from the next batch on,
// as a Dial'd publisher does; Close closes that one, and cl is left as it
// is. A cl that also consumes (kgo.ConsumerGroup, kgo.ConsumeTopics) or is
// transactional is not copied — a copy would join the group or fence the
// transactions — and the publisher stays disconnected, saying so, until
// the caller builds a new client and publisher. Build the client with
// kgo.StopProducerOnDataLossDetected() to learn of such errors rather
// than have franz-go produce on under a bumped producer epoch. New checks
// that a broker answers, then checks or declares cfg.Topics.
//
// cl must produce with acks from the brokers: the default
// kgo.RequiredAcks(kgo.AllISRAcks()), or kgo.LeaderAck() at the cost of
// losing a confirmed record when its leader dies before a follower copied
// it; kgo.NoAck() is refused. Keep franz-go's idempotent producer on (the
// default): it is what keeps one aggregate's records in order when a
// produce request is retried.
func New(ctx context.Context, cl *kgo.Client, cfg *Config) (*Publisher, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: ferrykafka.New: client is nil", ferrytype.ErrInvalidConfig)
	}
	return newPublisher(ctx, cl, cfg, nil, "")
}

func newPublisher(ctx context.Context, cl *kgo.Client, cfg *Config, opts []kgo.Opt, rawURL string) (*Publisher, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && acks == kgo.NoAck() {
		return nil, fmt.Errorf("%w: ferrykafka: the client produces with kgo.NoAck(): nothing the brokers "+
			"acknowledge could be told from what they lost; use kgo.AllISRAcks()", ferrytype.ErrInvalidConfig)
	}
	p := &Publisher{cfg: c, owned: opts != nil, opts: opts, cur: &clientGen{cl: cl, ours: opts != nil},
		slots: make(chan struct{}, c.MaxBufferedRecords)}
	if rawURL != "" {
		p.secrets = []string{rawURL}
	}
	p.autoCreate, _ = cl.OptValue(kgo.AllowAutoTopicCreation).(bool)
	if !p.owned && copyable(cl) {
		p.opts = cl.Opts()
	}
	if err := cl.Ping(ctx); err != nil {
		if connectionSetupErr(err) {
			// At start, a wrong setup is the likely cause: say where to look.
			err = fmt.Errorf("%w; when every connection ends so, compare the URL's TLS (kafkas://) and SASL "+
				"settings with the broker's listener", stated(err))
		}
		return nil, p.redact(fmt.Errorf("no Kafka broker answers: %w", stated(err)))
	}
	if err := p.setupTopics(ctx, cl); err != nil {
		return nil, p.redact(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	p.stopWatch, p.watching = cancel, make(chan struct{})
	go p.watch(wctx)
	return p, nil
}

// String returns the Kafka brokers the publisher produces to, as a URL
// without credentials: the URL Dial was given, its password replaced by
// xxxxx, or, for New, kafka:// (kafkas:// over TLS) with the client's seed
// brokers. A relay records it in its heartbeat row
// (ferry.HeartbeatConfig.Broker).
func (p *Publisher) String() string {
	if len(p.secrets) > 0 {
		if cc, err := ParseURL(p.secrets[0]); err == nil {
			return cc.String()
		}
		return ferrytype.RedactURL(p.secrets[0])
	}
	p.mu.Lock()
	cl := p.cur.cl
	p.mu.Unlock()
	scheme := "kafka://"
	if tc, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); tc != nil {
		scheme = "kafkas://"
	}
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	return scheme + strings.Join(seeds, ",")
}

// Schemes returns the URL schemes Dial accepts: kafka and kafkas.
func Schemes() []string { return []string{"kafka", "kafkas"} }

// Dial builds a franz-go client for the brokers at rawURL (see ParseURL)
// and returns a publisher that owns it: Close closes it, and when a fatal
// producer error ends it (an out-of-order sequence number, an unknown
// producer id or a fenced epoch: franz-go fails every later record of
// such a client), the publisher builds a new one, reporting the records
// of the old one unknown. The client produces with acks from every
// in-sync replica and franz-go's idempotent producer, with no linger (a
// batch is sent as it is handed over, and the next one pipelines behind
// it), 10s produce request timeouts, a 1 minute delivery timeout for
// records no request carried yet, and
// kgo.StopProducerOnDataLossDetected(); cfg.ClientOpts come last and
// override any of these. Dial checks that a broker answers and checks or
// declares cfg.Topics. Errors never contain the password.
func Dial(ctx context.Context, rawURL string, cfg *Config) (*Publisher, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	cc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &Config{}
	}
	maxBuffered := cfg.MaxBufferedRecords
	if maxBuffered == 0 {
		maxBuffered = 10000
	}
	opts := append([]kgo.Opt{
		kgo.ClientID("ferry-relay"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProduceRequestTimeout(10 * time.Second),
		kgo.RecordDeliveryTimeout(time.Minute),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.StopProducerOnDataLossDetected(),
		kgo.MetadataMinAge(time.Second),
	}, cc.Opts()...)
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("kafka client for %s: %w", cc, err), rawURL)
	}
	p, err := newPublisher(ctx, cl, cfg, opts, rawURL)
	if err != nil {
		cl.Close()
		return nil, ferrytype.RedactError(fmt.Errorf("connect to %s: %w", cc, err), rawURL)
	}
	return p, nil
}

// setupTopics checks, or with Declare creates, the configured topics.
func (p *Publisher) setupTopics(ctx context.Context, cl *kgo.Client) error {
	if len(p.cfg.Topics) == 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, p.cfg.Topics...)
	if err != nil {
		return fmt.Errorf("list topics %v: %w", p.cfg.Topics, err)
	}
	var missing []string
	for _, t := range p.cfg.Topics {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case d.Err != nil:
			return fmt.Errorf("topic %s: %w", t, d.Err)
		default:
			p.known.Store(t, struct{}{})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !p.cfg.Declare {
		return fmt.Errorf("topic %s does not exist: create it, or let ferry declare it (Declare, --declare): %w",
			strings.Join(missing, ", "), kerr.UnknownTopicOrPartition)
	}
	var configs map[string]*string
	if p.cfg.MinInsyncReplicas > 0 {
		configs = map[string]*string{"min.insync.replicas": kadm.StringPtr(strconv.Itoa(p.cfg.MinInsyncReplicas))}
	}
	created, err := adm.CreateTopics(ctx, p.cfg.Partitions, p.cfg.ReplicationFactor, configs, missing...)
	if err != nil {
		return fmt.Errorf("declare topics %v: %w", missing, err)
	}
	for _, t := range missing {
		r, ok := created[t]
		switch {
		case !ok:
			return fmt.Errorf("declare topic %s: no answer for it", t)
		case r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists):
			return fmt.Errorf("declare topic %s (partitions %d, replication factor %d): %w", t,
				p.cfg.Partitions, p.cfg.ReplicationFactor, r.Err)
		}
		p.known.Store(t, struct{}{})
	}
	return nil
}

// Client returns the franz-go client the publisher produces on now: after
// a fatal producer error, the publisher replaces it (see New).
func (p *Publisher) Client() *kgo.Client { return p.gen().cl }

func (p *Publisher) gen() *clientGen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// renew replaces a client that a fatal producer error ended, when the
// publisher built it.
func (p *Publisher) renew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur
	perr := old.poisoned()
	if perr == nil || p.opts == nil || p.closed {
		return
	}
	cl, err := kgo.NewClient(p.opts...)
	if err != nil {
		p.cfg.Logger.Error("kafka: cannot build a new client after a fatal producer error", "error", p.redact(err))
		return
	}
	p.cur = &clientGen{cl: cl, ours: true}
	if old.ours {
		p.closing.Add(1)
		go func() {
			defer p.closing.Done()
			old.cl.Close()
		}()
	}
	p.cfg.Logger.Warn("kafka: a fatal producer error ended the client; producing on a new one",
		"error", p.redact(perr))
}

// Publish hands every message to the client as a record, asynchronously,
// so that the batch pipelines, then waits for every record's ack or for
// ctx. A record the brokers acknowledged is confirmed; one whose topic
// does not exist is returned (unroutable); one the brokers refused
// (too large, not authorized, invalid or corrupt) is rejected; anything
// else (no ack before ctx ended, a connection lost with the request in
// flight, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a delivery timeout, a fatal
// producer error) is unknown. While the publisher is not connected it
// hands nothing over: every message is not sent (ferrytype.ErrNotSent).
// Errors name what happened: franz-go's guess at the cause of a broker
// closing a new connection ("is TLS missing?") is replaced by the fact
// (see stated). Once the records are handed over, and before their acks
// are awaited, Publish reaches the fault point
// ferryfault.PublishBeforeConfirm of ctx: an error there makes every
// record not yet acknowledged unknown, as a crash there would.
func (p *Publisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	if len(msgs) == 0 {
		return res
	}
	p.renew()
	if err := p.Disconnected(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("not sent: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("not sent: %w", err))
	}
	g := p.gen()
	topics := make([]string, len(msgs))
	handled := make([]bool, len(msgs))
	for i := range msgs {
		t, bad := p.topicOf(&msgs[i])
		if bad != nil {
			res[i], handled[i] = *bad, true
			continue
		}
		topics[i] = t
	}
	missing := p.missingTopics(ctx, g.cl, topics, handled)

	w := newAcks(len(msgs))
	for i := range msgs {
		if handled[i] {
			continue
		}
		if missing[topics[i]] {
			res[i] = ferrytype.Returned(unroutable(topics[i], kerr.UnknownTopicOrPartition))
			continue
		}
		rec, err := p.record(&msgs[i], topics[i])
		if err != nil {
			res[i] = ferrytype.Rejected(fmt.Errorf("not sent: %w", err))
			continue
		}
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			res[i] = ferrytype.NotSent(fmt.Errorf("not sent: waiting for room among the client's buffered records: %w", ctx.Err()))
			continue
		}
		w.add(i)
		// The record's context keeps ctx's values (for hooks) but not its
		// end: franz-go fails every record buffered in a partition when
		// the first one's context ends, so that a Publish that gave up
		// would fail the records of later Publishes with its
		// context.Canceled. A record of a Publish that gave up stays
		// with the client and is produced when it can (RecordDelivery
		// Timeout bounds that for Dial's client).
		rec.Context = context.WithoutCancel(ctx)
		g.cl.TryProduce(rec.Context, rec, func(_ *kgo.Record, err error) {
			<-p.slots
			g.notePoison(err)
			w.finish(i, err)
		})
	}
	w.seal()
	var waitErr error
	if err := ferryfault.At(ctx, ferryfault.PublishBeforeConfirm); err != nil {
		waitErr = fmt.Errorf("fault before the acks: %w", err)
	}
	if waitErr == nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			// franz-go's idempotent producer does not give up a record
			// in flight when ctx ends (it cannot tell whether the
			// broker wrote it): stop waiting for it.
			waitErr = fmt.Errorf("no ack from Kafka before the context ended; the record may be stored: %w", ctx.Err())
		}
	}
	w.collect(func(i int, finished bool, err error) {
		switch {
		case !finished:
			res[i] = ferrytype.Unknown(waitErr)
		default:
			res[i] = p.classify(err, topics[i])
		}
	})
	return res
}

// acks collects the promises of one Publish. A promise that fires after
// Publish stopped waiting changes nothing.
type acks struct {
	mu      sync.Mutex
	state   []uint8 // 0: not produced, 1: awaiting its promise, 2: finished
	errs    []error
	pending int
	sealed  bool
	over    bool
	done    chan struct{}
}

func newAcks(n int) *acks {
	return &acks{state: make([]uint8, n), errs: make([]error, n), done: make(chan struct{})}
}

func (a *acks) add(i int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state[i] = 1
	a.pending++
}

func (a *acks) finish(i int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.over || a.state[i] != 1 {
		return
	}
	a.state[i], a.errs[i] = 2, err
	a.pending--
	if a.sealed && a.pending == 0 {
		close(a.done)
	}
}

// seal marks the end of the records handed over.
func (a *acks) seal() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sealed = true
	if a.pending == 0 {
		close(a.done)
	}
}

// collect calls fn for each record handed over, finished or not, and
// ignores every promise after it.
func (a *acks) collect(fn func(i int, finished bool, err error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.over = true
	for i, s := range a.state {
		if s != 0 {
			fn(i, s == 2, a.errs[i])
		}
	}
}

// topicOf returns the topic of m, or the result of a message that has
// none it can be published to.
func (p *Publisher) topicOf(m *ferrytype.Message) (string, *ferrytype.PublishResult) {
	topic := m.Destination
	if topic == "" {
		switch p.cfg.TopicFrom {
		case TopicFromAggregateType:
			if m.AggregateType == "" {
				r := ferrytype.Returned(errors.New("unroutable: the event has no destination and no aggregate type " +
					"to derive its Kafka topic from (TopicFrom aggregate-type)"))
				return "", &r
			}
			topic = p.cfg.TopicPrefix + m.AggregateType
		default:
			topic = p.cfg.TopicPrefix + m.Type
		}
	}
	if err := validTopic(topic); err != nil {
		// Kafka refuses such a topic; nothing is sent.
		r := ferrytype.Rejected(err)
		return "", &r
	}
	return topic, nil
}

// validTopic checks a Kafka topic name: 1 to 249 of [a-zA-Z0-9._-], not
// "." nor "..".
func validTopic(t string) error {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return fmt.Errorf("%q is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -, not . or ..)", t)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -, not . or ..)", t)
		}
	}
	return nil
}

// missingTopics asks the brokers about the topics of the batch not known
// to exist yet, and returns those they say do not exist. A message to
// such a topic is unroutable at once, instead of after franz-go's
// UnknownTopicRetries metadata refreshes; nothing of it is sent. When the
// client lets the brokers create missing topics, or the question fails,
// it returns nil and the records go to the client, which decides.
func (p *Publisher) missingTopics(ctx context.Context, cl *kgo.Client, topics []string, skip []bool) map[string]bool {
	if p.autoCreate {
		return nil
	}
	var ask []string
	for i, t := range topics {
		if skip[i] || slices.Contains(ask, t) {
			continue
		}
		if _, ok := p.known.Load(t); !ok {
			ask = append(ask, t)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range ask {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil
	}
	missing := map[string]bool{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		switch t.ErrorCode {
		case 0:
			p.known.Store(*t.Topic, struct{}{})
		case kerr.UnknownTopicOrPartition.Code:
			missing[*t.Topic] = true
		}
	}
	return missing
}

// record builds the Kafka record of m: key the aggregate id (so that an
// aggregate's events share a partition); with no Encoding, value the
// payload, headers the event's own (sorted by name; any that would pass
// for ferry's are dropped) then ferry's metadata headers; with one, the
// headers and value it writes. The timestamp is the produce time, not the
// event's creation: an event published long after it was written must not
// fall to the topic's retention at once.
func (p *Publisher) record(m *ferrytype.Message, topic string) (*kgo.Record, error) {
	r := &kgo.Record{Topic: topic, Value: m.Payload}
	if m.AggregateID != "" {
		r.Key = []byte(m.AggregateID)
	}
	if p.cfg.Encoding != nil {
		e, err := p.cfg.Encoding.Encode(m, ferrybroker.ProtocolKafka)
		if err != nil {
			return nil, err
		}
		r.Value = e.Body
		r.Headers = make([]kgo.RecordHeader, len(e.Headers))
		for i, kv := range e.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])}
		}
		return r, nil
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if !ferrybroker.IsMetadataHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	meta := ferrybroker.MetadataHeaders(m)
	r.Headers = make([]kgo.RecordHeader, 0, len(keys)+len(meta))
	for _, k := range keys {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Headers[k])})
	}
	for _, kv := range meta {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	return r, nil
}

func unroutable(topic string, err error) error {
	return fmt.Errorf("unroutable: Kafka topic %q does not exist: %w", topic, err)
}

// rejectedErrs are the errors with which the brokers, or franz-go before
// sending, refuse a record for good: it is not stored.
var rejectedErrs = []error{
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
	kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
	kerr.InvalidTopicException, kerr.InvalidRequiredAcks, kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType, kerr.InvalidTimestamp, kerr.PolicyViolation,
}

// classify maps the promise error of a record for topic to an outcome.
// Only errors that prove the record was not stored are returned or
// rejected; everything else is unknown.
func (p *Publisher) classify(err error, topic string) ferrytype.PublishResult {
	switch {
	case err == nil:
		return ferrytype.Confirmed()
	case errors.Is(err, kgo.ErrMaxBuffered):
		// TryProduce refused it: the client's buffer is full.
		return ferrytype.NotSent(fmt.Errorf("not sent: %w", err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		p.known.Delete(topic)
		return ferrytype.Returned(unroutable(topic, err))
	case slices.ContainsFunc(rejectedErrs, func(e error) bool { return errors.Is(err, e) }):
		return ferrytype.Rejected(fmt.Errorf("kafka refused the record for topic %q: %w", topic, p.redact(err)))
	}
	return ferrytype.Unknown(p.redact(stated(err)))
}

// connectionSetupErr reports whether err is the failure of a connection
// before any request on it was answered: a dial refused or reset, or the
// broker closing a new connection (franz-go's ErrFirstReadEOF).
func connectionSetupErr(err error) bool {
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return true
	}
	ne, ok := errors.AsType[*net.OpError](err)
	return ok && ne.Op == "dial"
}

// stated returns err with the text of franz-go's ErrFirstReadEOF in it
// replaced by what happened — the broker closed a new connection before
// answering its first request — without the guess at a cause it makes
// ("is TLS missing?", "is SASL missing?"), which is wrong whenever the
// connection was simply cut. errors.Is and errors.As still see err. A
// setup that is wrong (TLS, SASL) fails Dial and Check with the same
// stated error on every connection.
func stated(err error) error {
	fe, ok := errors.AsType[*kgo.ErrFirstReadEOF](err)
	if !ok {
		return err
	}
	what := "the broker closed a new connection before answering its first request"
	if inner := fe.Unwrap(); inner != nil {
		what += " (" + inner.Error() + ")"
	}
	return &statedErr{text: strings.Replace(err.Error(), fe.Error(), what, 1), err: err}
}

type statedErr struct {
	text string
	err  error
}

func (e *statedErr) Error() string { return e.text }
func (e *statedErr) Unwrap() error { return e.err }

// Check asks the brokers for metadata: nil when one answers.
func (p *Publisher) Check(ctx context.Context) error {
	if err := p.gen().poisoned(); err != nil {
		return p.Disconnected()
	}
	return p.ping(ctx)
}

// ping asks the brokers for metadata and records whether one answered.
func (p *Publisher) ping(ctx context.Context) error {
	err := p.gen().cl.Ping(ctx)
	if err != nil {
		err = p.redact(fmt.Errorf("no Kafka broker answers: %w", stated(err)))
		if prev := p.conn.Swap(&connState{err: err}); prev == nil {
			p.cfg.Logger.Warn("kafka: brokers unreachable", "error", err)
		}
		return err
	}
	if prev := p.conn.Swap(nil); prev != nil {
		p.cfg.Logger.Info("kafka: brokers reachable again")
	}
	return nil
}

// watch pings the brokers every PingInterval, and replaces a client that
// a fatal producer error ended, until ctx ends.
func (p *Publisher) watch(ctx context.Context) {
	defer close(p.watching)
	t := time.NewTicker(p.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.renew()
		pctx, cancel := context.WithTimeout(ctx, max(2*p.cfg.PingInterval, 2*time.Second))
		err := p.ping(pctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return
		}
	}
}

// Connected reports whether the last metadata request, made at most
// PingInterval ago, got an answer and the client can still produce (see
// ferrybroker.Connectivity). It makes no round trip.
func (p *Publisher) Connected() bool { return p.Disconnected() == nil }

// Disconnected says why the publisher cannot publish now, nil when
// Connected is true: no broker answered the last ping, a fatal producer
// error ended a client the publisher cannot replace, or the publisher is
// closed. The error names no password.
func (p *Publisher) Disconnected() error {
	p.mu.Lock()
	closed, g := p.closed, p.cur
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka publisher: %w", ferrytype.ErrClosed)
	}
	if perr := g.poisoned(); perr != nil {
		if p.opts != nil {
			return p.redact(fmt.Errorf("the Kafka client ended after a fatal producer error, a new one is being built: %w", perr))
		}
		return p.redact(fmt.Errorf("the Kafka client can no longer produce after a fatal producer error, and "+
			"the publisher cannot copy it (it consumes or is transactional): build a new client and publisher: %w", perr))
	}
	if s := p.conn.Load(); s != nil {
		return s.err
	}
	return nil
}

// Close stops the pings and closes the client the publisher produces on
// if it built it (Dial's, or a replacement after a fatal producer error),
// never the caller's: records still awaiting their acks are failed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	g := p.cur
	p.mu.Unlock()
	p.stopWatch()
	<-p.watching
	if g.ours {
		g.cl.Close()
	}
	p.closing.Wait()
	return nil
}

func (p *Publisher) redact(err error) error {
	if err == nil {
		return nil
	}
	return ferrytype.RedactError(err, p.secrets...)
}
