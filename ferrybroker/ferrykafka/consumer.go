package ferrykafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/runner"
)

// Headers of a parked copy that only Kafka has, next to the park headers
// every consumer sets (ferrybroker.HeaderParkReason, HeaderParkedAt,
// HeaderParkRoute: the original's topic, HeaderParkSource: the original's
// topic/partition, HeaderParkDeliveryCount).
const (
	// HeaderParkPartition is the partition of the original, in decimal.
	HeaderParkPartition = "Ferry-Park-Partition"
	// HeaderParkOffset is the offset of the original, in decimal.
	HeaderParkOffset = "Ferry-Park-Offset"
	// HeaderParkGroup is the consumer group that parked it.
	HeaderParkGroup = "Ferry-Park-Group"
)

// HeaderDebeziumID is the header in which Debezium's outbox event router
// (io.debezium.transforms.outbox.EventRouter) puts the event id: a
// Delivery's MessageID when the record has no Ferry-Event-Id.
const HeaderDebeziumID = "id"

// Defaults of ConsumerConfig (those of its ConsumerOptions are
// ferrybroker's: ferrybroker.DefaultConcurrency, ...).
const (
	DefaultCommitInterval   = time.Second
	DefaultRevokeTimeout    = 5 * time.Second
	DefaultRebalanceTimeout = 10 * time.Second
	DefaultSessionTimeout   = 10 * time.Second
)

// commitTimeout bounds one offset commit (periodic, on revoke, at stop).
const commitTimeout = 10 * time.Second

// partitionBuffer is how many polled records a partition holds before the
// consumer stops fetching it (kgo.Client.PauseFetchPartitions) until its
// handler catches up: a partition waiting on retries does not fill memory
// nor starve the others.
const partitionBuffer = 256

// ConsumerConfig configures a Consumer. Zero fields take the default named
// in their comment.
//
// The embedded options are every consumer's (see
// ferrybroker.ConsumerOptions), with what Kafka changes about them:
//
//   - Concurrency handlers run at once across partitions; within a
//     partition records are handled one at a time, in offset order (so
//     one aggregate's events, which share a key and so a partition, are
//     handled in the order they were published).
//   - Kafka has no redelivery: a record whose handler failed transiently
//     is handed to the handler again in place after Redelivery's delay,
//     and its partition waits meanwhile. The delivery count is the
//     consumer's own; a record that comes again after a rebalance or a
//     restart starts counting at 1.
//   - ParkTimeout bounds the produce of a parked copy; Name defaults to
//     Group.
type ConsumerConfig struct {
	ferrybroker.ConsumerOptions
	// Group is the Kafka consumer group. Required.
	Group string
	// Topics are the topics consumed. Required; they must exist when the
	// consumer starts.
	Topics []string
	// ParkTopic receives poison and malformed records, tombstones, and
	// records whose last delivery allowed by Redelivery failed, with the
	// park headers; only then does the partition move on. Required: a
	// record is never skipped. It must exist when the consumer starts.
	ParkTopic string
	// CommitInterval is how often the offsets of handled records are
	// committed. Offsets are also committed when partitions are revoked
	// and at Stop. Each commit waits at most 10s. Default 1s.
	CommitInterval time.Duration
	// RevokeTimeout bounds how long a rebalance that takes partitions away
	// waits for their handlers in flight before committing what they
	// finished; a handler still running then is cancelled and its record
	// left to the partition's next owner. Keep it below the rebalance
	// timeout (10s, see Dial). Default 5s.
	RevokeTimeout time.Duration
	// ClientOpts are further franz-go options for the consumer's client,
	// applied after ferry's defaults (client id ferry-consumer, a 10s
	// session timeout and a 10s rebalance timeout) and the connection's,
	// so that they override them. The options the consumer's guarantees
	// rest on come last and cannot be overridden: kgo.ConsumerGroup,
	// kgo.ConsumeTopics, kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll
	// and the OnPartitions callbacks.
	ClientOpts []kgo.Opt
}

func (cfg *ConsumerConfig) withDefaults() (ConsumerConfig, error) {
	if cfg == nil {
		return ConsumerConfig{}, fmt.Errorf("%w: ferrykafka: a ConsumerConfig is required (Group, Topics, ParkTopic)", ferrytype.ErrInvalidConfig)
	}
	c := *cfg
	c.ConsumerOptions = c.ConsumerOptions.WithDefaults(c.Group)
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = DefaultRevokeTimeout
	}
	c.Topics = append([]string(nil), c.Topics...)
	switch {
	case c.Group == "":
		return c, fmt.Errorf("%w: ConsumerConfig.Group is required", ferrytype.ErrInvalidConfig)
	case len(c.Topics) == 0:
		return c, fmt.Errorf("%w: ConsumerConfig.Topics is required", ferrytype.ErrInvalidConfig)
	case c.ParkTopic == "":
		return c, fmt.Errorf("%w: ConsumerConfig.ParkTopic is required: poison records must go somewhere", ferrytype.ErrInvalidConfig)
	case c.Check() != nil:
		return c, c.Check()
	case c.CommitInterval < 10*time.Millisecond:
		return c, fmt.Errorf("%w: ConsumerConfig.CommitInterval %s is below 10ms", ferrytype.ErrInvalidConfig, c.CommitInterval)
	case c.RevokeTimeout < 0:
		return c, fmt.Errorf("%w: ConsumerConfig.RevokeTimeout %s must not be negative", ferrytype.ErrInvalidConfig, c.RevokeTimeout)
	}
	for _, t := range append([]string{c.ParkTopic}, c.Topics...) {
		if err := validTopic(t); err != nil {
			return c, fmt.Errorf("%w: ConsumerConfig.Topics/ParkTopic: %v", ferrytype.ErrInvalidConfig, err)
		}
	}
	for _, t := range c.Topics {
		if t == c.ParkTopic {
			return c, fmt.Errorf("%w: ConsumerConfig.ParkTopic %s is also consumed", ferrytype.ErrInvalidConfig, t)
		}
	}
	return c, nil
}

// ConsumerStats counts what a consumer did (see ferrybroker.ConsumerStats).
type ConsumerStats = ferrybroker.ConsumerStats

// Consumer runs a handler on the records of Kafka topics as a member of a
// consumer group, as ferrybroker.Consumer describes, with what Kafka
// changes about it (see the package doc, Consuming):
//
//   - A partition's records are handled one at a time, in offset order;
//     Concurrency handlers run at once across partitions.
//   - "Acked" means the offset after the record was committed for the
//     group, which happens only once every earlier record of the
//     partition was handled (its handler returned nil) or parked. Offsets
//     are committed every CommitInterval, when partitions are revoked and
//     at Stop; a delivery is reported settled (HookSettled, Stats) when
//     the commit that covers it succeeded.
//   - A transient failure is retried in place after the RedeliveryPolicy's
//     delay; the partition waits.
//   - A parked record is produced to ParkTopic, with the park headers,
//     and only once the brokers acknowledged the copy does the partition
//     move on.
//   - Left: a delivery whose offset was not committed (Stop cut its
//     handler off, its partition was lost or revoked first, a fault point
//     fired, a commit failed): the group reads it again from the last
//     committed offset.
type Consumer struct {
	conn    []kgo.Opt
	handler ferrybroker.Handler
	cfg     ConsumerConfig
	log     *slog.Logger
	settler *ferrybroker.Settler
	sem     chan struct{}

	// run's goroutines are the poll loop, the committer and one worker
	// per assigned partition; its context is the handlers'.
	run runner.Runner
	// unstart ends a Start still waiting for the brokers (Stop calls it
	// with ferrytype.ErrClosed).
	startMu  sync.Mutex
	unstart  context.CancelCauseFunc
	closing  atomic.Bool // Stop committed for the last time: callbacks only finalize
	cl       *kgo.Client
	bgCancel context.CancelFunc // ends the poll loop and the committer

	pmu      sync.Mutex // parts, draining
	parts    map[tp]*part
	draining bool // Stop waits for the workers: start no more

	commitMu sync.Mutex // one commit at a time
}

var _ ferrybroker.Consumer = (*Consumer)(nil)

type tp struct {
	topic     string
	partition int32
}

// part is one assignment of a partition to this consumer: a partition
// assigned again gets a new part.
type part struct {
	tp
	ctx    context.Context
	cancel context.CancelFunc
	quit   chan struct{} // closed when revoked or lost
	wake   chan struct{} // a record was queued
	done   chan struct{} // the worker returned

	mu        sync.Mutex
	queue     []*kgo.Record
	gone      bool // revoked, lost or stopped: take nothing more
	final     bool // no commit of it will be made any more
	halted    bool // a fault point fired: nothing later may be committed
	paused    bool
	next      kgo.EpochOffset // offset to commit, after the last record settled; -1: none
	committed int64           // -1: nothing committed by this part
	pending   []pendingSettle // settled in order, not yet covered by a commit
}

type pendingSettle struct {
	offset int64
	d      *ferrybroker.Delivery
	s      ferrybroker.Settlement
}

// NewConsumer returns a consumer that connects with conn, franz-go options
// saying how to reach the brokers (ClientConfig.Opts of a parsed URL, or
// kgo.SeedBrokers and the like). The consumer builds its own client at
// Start, because a group consumer's options (the group, its topics, the
// rebalance callbacks) are fixed when a franz-go client is built; cfg's
// ClientOpts adjust it. Start or Run runs the consumer.
func NewConsumer(conn []kgo.Opt, handler ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if len(conn) == 0 || handler == nil {
		return nil, fmt.Errorf("%w: ferrykafka.NewConsumer needs connection options and a handler", ferrytype.ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := c.Logger.With("group", c.Group)
	return &Consumer{conn: append([]kgo.Opt(nil), conn...), handler: handler, cfg: c, log: log,
		settler: ferrybroker.NewSettler(c.ConsumerOptions, log, slog.String("park_topic", c.ParkTopic)),
		sem:     make(chan struct{}, c.Concurrency), parts: map[tp]*part{}}, nil
}

// DialConsumer parses rawURL (see ParseURL), checks that a broker answers
// within ctx, and returns a consumer of the brokers there (see
// NewConsumer). Errors never contain the password.
func DialConsumer(ctx context.Context, rawURL string, handler ferrybroker.Handler, cfg *ConsumerConfig) (*Consumer, error) {
	cc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := NewConsumer(cc.Opts(), handler, cfg)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(slices.Concat(c.conn, c.cfg.ClientOpts)...)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("kafka client for %s: %w", cc, err), rawURL)
	}
	defer cl.Close()
	if err := untilReachable(ctx, c.log, "dial", cl.Ping); err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("no Kafka broker at %s answers: %w", cc, err), rawURL)
	}
	return c, nil
}

// The waits of a start that meets an outage: the first, doubling up to the
// last.
const (
	startRetryFirst = 100 * time.Millisecond
	startRetryMax   = 5 * time.Second
	// startTryTimeout bounds one try, so that a black-holed connection
	// is logged and tried again rather than waited on until ctx ends.
	startTryTimeout = 10 * time.Second
)

// untilReachable runs try until it returns nil or an error no retry mends
// (permanentStartErr), or ctx ends; between transient failures it waits,
// doubling, and logs each. Its errors state franz-go's first-read EOF as
// what happened (see stated).
func untilReachable(ctx context.Context, log *slog.Logger, what string, try func(context.Context) error) error {
	wait := startRetryFirst
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, startTryTimeout)
		err := try(tctx)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				log.Info("kafka: "+what+": brokers reachable", "attempts", attempt)
			}
			return nil
		case permanentStartErr(err):
			return stated(err)
		case ctx.Err() != nil:
			if attempt == 1 {
				return stated(err)
			}
			return fmt.Errorf("%s: gave up after %d attempts when the context ended: %w", what, attempt, stated(err))
		}
		log.Warn("kafka: "+what+": brokers not reachable; trying again", "attempt", attempt, "retry_in", wait,
			"error", ferrytype.RedactURL(stated(err).Error()))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up after %d attempts when the context ended: %w", what, attempt, stated(err))
		case <-time.After(wait):
		}
		wait = min(2*wait, startRetryMax)
	}
}

// permanentStartErr reports whether err, met while starting, is one no
// retry mends: a configuration refused, a topic missing, a login, an
// access or a certificate refused, TLS spoken to a listener without it
// (tls.RecordHeaderError) or plaintext to a TLS listener (franz-go reads
// the TLS alert the broker answers with). A broker closing new
// connections at once (franz-go's ErrFirstReadEOF) is not one: a network
// cut or a broker restarting does that too, so it is retried and logged.
func permanentStartErr(err error) bool {
	for _, e := range []error{ferrytype.ErrInvalidConfig, kerr.UnknownTopicOrPartition, kerr.SaslAuthenticationFailed,
		kerr.IllegalSaslState, kerr.UnsupportedSaslMechanism, kerr.TopicAuthorizationFailed,
		kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed, kgo.ErrClientClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	// franz-go's error for a TLS alert read as a response size has no type.
	return strings.Contains(err.Error(), "appear to be a tls alert record")
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return c.settler.Observer.Stats() }

// Start checks that the topics and the park topic exist, joins the
// consumer group and starts handling records; ctx bounds the check only.
// While no broker can be reached (a connection refused, reset or closed
// by the broker, a timeout), Start waits out the outage: it tries again
// after 100ms, doubling up to 5s, logs each failure, and gives up only
// when ctx ends, with the last error. A cause no retry mends returns at
// once: a topic that does not exist, a login or an access refused, a TLS
// certificate refused, TLS spoken to a listener without it or the
// reverse. A Stop meanwhile ends the wait. Starting a stopped consumer
// returns ferrytype.ErrClosed.
func (c *Consumer) Start(ctx context.Context) error {
	c.startMu.Lock()
	if c.unstart != nil {
		c.startMu.Unlock()
		return fmt.Errorf("ferrykafka: consumer %w", runner.ErrStarted)
	}
	sctx, unstart := context.WithCancelCause(ctx)
	c.unstart = unstart
	c.startMu.Unlock()
	defer func() {
		c.startMu.Lock()
		c.unstart = nil
		c.startMu.Unlock()
		unstart(nil)
	}()
	err := c.run.Start(ctx, func(context.Context) error {
		err := untilReachable(sctx, c.log, "consumer start", c.checkTopics)
		if errors.Is(context.Cause(sctx), ferrytype.ErrClosed) {
			return ferrytype.ErrClosed
		}
		if err != nil {
			return err
		}
		opts := append([]kgo.Opt{
			kgo.ClientID("ferry-consumer"),
			kgo.SessionTimeout(DefaultSessionTimeout),
			kgo.RebalanceTimeout(DefaultRebalanceTimeout),
		}, c.conn...)
		opts = append(opts, c.cfg.ClientOpts...)
		opts = append(opts,
			kgo.ConsumerGroup(c.cfg.Group),
			kgo.ConsumeTopics(c.cfg.Topics...),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(c.assigned),
			kgo.OnPartitionsRevoked(c.revoked),
			kgo.OnPartitionsLost(c.lost),
		)
		if c.cl, err = kgo.NewClient(opts...); err != nil {
			return fmt.Errorf("ferrykafka: consumer client: %w", err)
		}
		bg, cancel := context.WithCancel(context.Background())
		c.bgCancel = cancel
		c.run.Go(func() { c.poll(bg) })
		c.run.Go(func() { c.commitLoop(bg) })
		return nil
	})
	if errors.Is(err, runner.ErrStarted) {
		return fmt.Errorf("ferrykafka: consumer %w", err)
	}
	return err
}

// checkTopics asks the brokers whether the topics and the park topic
// exist, on a client of its own (the group client joins the group as soon
// as it is built).
func (c *Consumer) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(slices.Concat(c.conn, c.cfg.ClientOpts)...)
	if err != nil {
		return fmt.Errorf("ferrykafka: consumer client: %w", err)
	}
	defer cl.Close()
	all := append([]string{c.cfg.ParkTopic}, c.cfg.Topics...)
	details, err := kadm.NewClient(cl).ListTopics(ctx, all...)
	if err != nil {
		return fmt.Errorf("ferrykafka: list topics: %w", err)
	}
	for _, t := range all {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("ferrykafka: topic %s does not exist: %w", t, kerr.UnknownTopicOrPartition)
		case d.Err != nil:
			return fmt.Errorf("ferrykafka: topic %s: %w", t, d.Err)
		}
	}
	return nil
}

// Stop stops fetching and lets the handlers in flight finish, then
// commits the offsets of every record handled or parked, and leaves the
// group so that its partitions go to the other members at once. Records
// fetched but not started are not handled: the group reads them again. If
// ctx ends first, the handlers' context is cancelled and their records
// left; the offsets of what finished are still committed, and Stop returns
// ctx's error. Stopping twice, or before Start, is safe.
func (c *Consumer) Stop(ctx context.Context) error {
	c.startMu.Lock()
	if c.unstart != nil {
		c.unstart(ferrytype.ErrClosed) // a Start waiting for the brokers returns ErrClosed
	}
	c.startMu.Unlock()
	first, err := c.run.Stop(ctx, func() {
		c.pmu.Lock()
		c.draining = true
		c.pmu.Unlock()
		c.bgCancel()
	})
	if !first {
		return nil
	}
	if err != nil {
		err = fmt.Errorf("stop: handlers still running: %w", err)
	}
	parts := c.snapshot()
	cctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	c.commit(cctx, parts)
	cancel()
	c.closing.Store(true)
	for _, p := range parts {
		c.finalize(p, errors.New("consumer stopped before the offset was committed"))
	}
	// Leave the group now, so that the other members get the partitions
	// without waiting for the session timeout.
	lctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	if lerr := c.cl.LeaveGroupContext(lctx); lerr != nil {
		c.log.Warn("leave group", "error", lerr)
	}
	cancel()
	c.cl.Close()
	return err
}

// Run starts the consumer and runs it until ctx ends, then stops it,
// giving handlers in flight up to ShutdownTimeout to finish.
func (c *Consumer) Run(ctx context.Context) error {
	return ferrybroker.RunUntilDone(ctx, c.Start, c.Stop, c.cfg.ShutdownTimeout)
}

// poll fetches records and queues each on its partition. Under
// kgo.BlockRebalanceOnPoll no rebalance callback runs between a poll and
// AllowRebalance, so a record is never queued on a partition already
// revoked.
func (c *Consumer) poll(ctx context.Context) {
	for {
		fetches := c.cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			c.cl.AllowRebalance()
			return
		}
		failed := false
		fetches.EachError(func(topic string, partition int32, err error) {
			if dl, ok := errors.AsType[*kgo.ErrDataLoss](err); ok {
				// franz-go found the log diverged and already moved
				// the partition: not a failed fetch, but a rewind.
				c.rewound(dl)
				return
			}
			failed = true
			c.log.Warn("fetch failed", "topic", topic, "partition", partition, "error", err)
		})
		c.pmu.Lock()
		fetches.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) == 0 {
				return
			}
			p := c.parts[tp{f.Topic, f.Partition}]
			if p == nil {
				c.log.Debug("records of a partition not assigned dropped", "topic", f.Topic, "partition", f.Partition)
				return
			}
			c.push(p, f.Records)
		})
		c.pmu.Unlock()
		c.cl.AllowRebalance()
		if failed && fetches.NumRecords() == 0 {
			// An error repeats until its cause goes: no hot loop.
			pause := time.NewTimer(100 * time.Millisecond)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
			}
		}
	}
}

// rewound reports a partition franz-go reset to an earlier offset after
// finding records lost: logged, counted and given to the hooks.
func (c *Consumer) rewound(dl *kgo.ErrDataLoss) {
	r := ferrybroker.Rewind{Route: dl.Topic, Partition: dl.Partition, From: dl.ConsumedTo, To: dl.ResetTo}
	// The records read again commit offsets at or below what was
	// committed: the commit follows the partition back, so that they
	// settle, and a group that resumes from it reads them again too. The
	// offset to commit goes back with it: a commit before the first of
	// them is handled would otherwise commit the old position again, and
	// they would mark offsets never above it, never settling.
	c.pmu.Lock()
	if p := c.parts[tp{dl.Topic, dl.Partition}]; p != nil {
		p.mu.Lock()
		p.committed = min(p.committed, dl.ResetTo)
		if p.next.Offset > dl.ResetTo {
			p.next = kgo.EpochOffset{Epoch: dl.ResetToEpoch, Offset: dl.ResetTo}
		}
		// Records queued from the old log at or past the reset are
		// fetched again from the new one.
		p.queue = slices.DeleteFunc(p.queue, func(r *kgo.Record) bool { return r.Offset >= dl.ResetTo })
		if p.paused && len(p.queue) <= partitionBuffer/2 {
			p.paused = false
			c.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
		p.mu.Unlock()
	}
	c.pmu.Unlock()
	c.settler.Observer.Rewound(r)
	if r.Records() == 0 {
		c.log.Warn("kafka: the brokers lost records of a partition; it resumed where it was, and records below "+
			"may have been replaced without being read again", "topic", dl.Topic, "partition", dl.Partition,
			"offset", dl.ConsumedTo, "epoch", dl.ConsumedToEpoch)
		return
	}
	c.log.Warn("kafka: the brokers lost records of a partition; it was reset to an earlier offset and its records "+
		"from there are read again (the inbox absorbs those it applied as duplicates)",
		"topic", dl.Topic, "partition", dl.Partition, "consumed_to", dl.ConsumedTo, "consumed_epoch", dl.ConsumedToEpoch,
		"reset_to", dl.ResetTo, "reset_epoch", dl.ResetToEpoch, "records_again", r.Records())
}

// push queues records on p, and stops fetching p while its queue is full.
func (c *Consumer) push(p *part, recs []*kgo.Record) {
	p.mu.Lock()
	if p.gone || p.halted {
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, recs...)
	if len(p.queue) >= partitionBuffer && !p.paused {
		// Under p.mu, so that the worker's resume cannot come first.
		p.paused = true
		c.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		c.commit(cctx, c.snapshot())
		cancel()
	}
}

func (c *Consumer) snapshot() []*part {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	out := make([]*part, 0, len(c.parts))
	for _, p := range c.parts {
		out = append(out, p)
	}
	return out
}

// commit commits the offsets of parts that moved since their last commit,
// then settles the deliveries the commit covers.
func (c *Consumer) commit(ctx context.Context, parts []*part) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, p := range parts {
		p.mu.Lock()
		if !p.final && p.next.Offset > p.committed {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[p.topic][p.partition] = p.next
		}
		p.mu.Unlock()
	}
	if len(offsets) == 0 {
		return
	}
	ok := map[tp]bool{}
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			c.log.Warn("offset commit failed; trying again later", "error", err)
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if perr := kerr.ErrorForCode(pr.ErrorCode); perr != nil {
					c.log.Warn("offset commit failed; trying again later", "topic", t.Topic, "partition", pr.Partition, "error", perr)
					continue
				}
				ok[tp{t.Topic, pr.Partition}] = true
			}
		}
	})
	for _, p := range parts {
		eo, sent := offsets[p.topic][p.partition]
		if !sent || !ok[p.tp] {
			continue
		}
		p.mu.Lock()
		p.committed = max(p.committed, eo.Offset)
		var settled []pendingSettle
		for len(p.pending) > 0 && p.pending[0].offset < p.committed {
			settled = append(settled, p.pending[0])
			p.pending = p.pending[1:]
		}
		p.mu.Unlock()
		for _, s := range settled {
			c.settler.Observer.Settled(s.d, s.s)
		}
	}
}

// finalize ends p's commits: deliveries not covered by a commit yet are
// left.
func (c *Consumer) finalize(p *part, cause error) {
	p.mu.Lock()
	p.gone, p.final = true, true
	pending := p.pending
	p.pending = nil
	p.queue = nil
	p.mu.Unlock()
	for _, s := range pending {
		c.settler.Observer.Settled(s.d, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: cause})
	}
}

// assigned starts a worker for each partition assigned.
func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.draining {
		return
	}
	for topic, partitions := range assigned {
		for _, n := range partitions {
			key := tp{topic, n}
			if c.parts[key] != nil {
				continue
			}
			ctx, cancel := context.WithCancel(c.run.Context())
			p := &part{tp: key, ctx: ctx, cancel: cancel, quit: make(chan struct{}), wake: make(chan struct{}, 1),
				done: make(chan struct{}), next: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
			c.parts[key] = p
			// On the client's goroutine, yet safe to add to the runner:
			// the poll loop, a goroutine of the runner, runs until Stop
			// set draining (under pmu), so the runner's count is above
			// zero at each Go, and no Go follows Stop's wait.
			c.run.Go(func() {
				defer close(p.done)
				c.work(p)
			})
		}
	}
	c.log.Debug("partitions assigned", "partitions", fmt.Sprint(assigned))
}

// take removes the parts of the given partitions from the assignment.
func (c *Consumer) take(of map[string][]int32) []*part {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	var out []*part
	for topic, partitions := range of {
		for _, n := range partitions {
			key := tp{topic, n}
			if p := c.parts[key]; p != nil {
				out = append(out, p)
				delete(c.parts, key)
			}
		}
	}
	return out
}

// revoked runs when a rebalance takes partitions away (or the group is
// left): the consumer takes no more of their records, waits up to
// RevokeTimeout for their handlers in flight, commits what was handled,
// and leaves the rest to the partitions' next owner.
func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	parts := c.take(revoked)
	if len(parts) == 0 {
		return
	}
	for _, p := range parts {
		c.quit(p)
	}
	if !c.closing.Load() {
		c.log.Debug("partitions revoking: waiting for their handlers in flight", "partitions", fmt.Sprint(revoked))
		wait, cancel := context.WithTimeout(ctx, c.cfg.RevokeTimeout)
		for _, p := range parts {
			select {
			case <-p.done:
			case <-wait.Done():
			}
		}
		cancel()
		for _, p := range parts {
			select {
			case <-p.done:
			default:
				c.log.Warn("handler still running when its partition was revoked; its record is left to the next owner",
					"topic", p.topic, "partition", p.partition)
				p.cancel()
			}
		}
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		c.commit(cctx, parts)
		cancel()
	}
	for _, p := range parts {
		c.finalize(p, errors.New("partition revoked before the offset was committed"))
		p.cancel()
	}
	c.resume(cl, parts)
	c.log.Debug("partitions revoked", "partitions", fmt.Sprint(revoked))
}

// lost runs when the group says this member no longer owns partitions (a
// missed session timeout, a fenced generation): nothing of them is
// committed any more, their handlers are cancelled, and what they did
// comes again to the next owner.
func (c *Consumer) lost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	parts := c.take(lost)
	for _, p := range parts {
		c.quit(p)
		c.finalize(p, errors.New("partition lost before the offset was committed"))
		p.cancel()
	}
	c.resume(cl, parts)
	if len(parts) > 0 {
		c.log.Warn("partitions lost; their records in flight will be handled again", "partitions", fmt.Sprint(lost))
	}
}

func (c *Consumer) quit(p *part) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		p.queue = nil
	}
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
}

// resume fetches again partitions paused by their parts, in case they are
// assigned again.
func (c *Consumer) resume(cl *kgo.Client, parts []*part) {
	for _, p := range parts {
		p.mu.Lock()
		if p.paused || p.halted {
			p.paused = false
			cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
		p.mu.Unlock()
	}
}

// work handles p's records one at a time until p is revoked, lost or
// halted, or the consumer stops.
func (c *Consumer) work(p *part) {
	for {
		rec := c.next(p)
		if rec == nil {
			return
		}
		c.process(p, rec)
	}
}

// next waits for p's next record; nil when the worker must return.
func (c *Consumer) next(p *part) *kgo.Record {
	for {
		p.mu.Lock()
		switch {
		case p.gone || p.halted:
			p.mu.Unlock()
			return nil
		case len(p.queue) > 0:
			rec := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			if p.paused && len(p.queue) <= partitionBuffer/2 {
				p.paused = false
				c.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
			}
			p.mu.Unlock()
			return rec
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.quit:
			return nil
		case <-c.run.Stopping():
			return nil
		}
	}
}

// process delivers rec to the handler until it is settled: handled,
// parked, or left; a transient failure delivers it again after the
// retry delay.
func (c *Consumer) process(p *part, rec *kgo.Record) {
	for count := 1; ; count++ {
		select {
		case c.sem <- struct{}{}:
		case <-p.quit:
			return
		case <-c.run.Stopping():
			return
		}
		select {
		case <-p.quit:
			<-c.sem
			return
		case <-c.run.Stopping():
			<-c.sem
			return
		default:
		}
		delay, again := c.deliver(p, rec, count)
		<-c.sem
		if !again {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.quit:
			t.Stop()
			return
		case <-c.run.Stopping():
			t.Stop()
			return
		}
	}
}

// deliver makes one delivery of rec and settles it; again reports a
// transient failure, to be delivered again after delay.
func (c *Consumer) deliver(p *part, rec *kgo.Record, count int) (delay time.Duration, again bool) {
	d := delivery(rec, count)
	bad := c.decode(rec, d)
	c.settler.Observer.Delivered(d)
	a := &acker{c: c, p: p, rec: rec, d: d}
	c.settler.Handle(p.ctx, d, a, c.handler, bad)
	return a.delay, a.again
}

// acker settles one delivery of a record (see ferrybroker.Acknowledger).
// Kafka acks by committing an offset: an acked or parked record is
// settled once a commit covers it (mark); a retry is made in place, by
// the partition's worker.
type acker struct {
	c     *Consumer
	p     *part
	rec   *kgo.Record
	d     *ferrybroker.Delivery
	again bool
	delay time.Duration
}

// Ack moves the partition's offset to commit past the record; the
// delivery is settled when a commit covers it.
func (a *acker) Ack() error {
	a.c.mark(a.p, a.rec, a.d, ferrybroker.Settlement{Action: ferrybroker.ActionAcked})
	return ferrybroker.ErrSettlesItself
}

// Retry has the partition's worker deliver the record again after delay;
// the partition waits meanwhile.
func (a *acker) Retry(delay time.Duration, _ error) error {
	a.again, a.delay = true, delay
	return nil
}

// Leave does nothing: the record's offset is not committed, and the group
// reads it again from the last committed offset.
func (a *acker) Leave() {}

// Abandon acts as a crash of the partition after its handler committed:
// nothing later of it is handled or committed, and it is not fetched
// until it is assigned again.
func (a *acker) Abandon() { a.c.halt(a.p) }

// Park produces a copy of the record with the park headers to ParkTopic,
// then moves the partition's offset to commit past the record.
func (a *acker) Park(reason error) error {
	c, rec := a.c, a.rec
	park := append(ferrybroker.ParkHeaders(reason, a.d, rec.Topic, rec.Topic+"/"+strconv.Itoa(int(rec.Partition))),
		[2]string{HeaderParkPartition, strconv.Itoa(int(rec.Partition))},
		[2]string{HeaderParkOffset, strconv.FormatInt(rec.Offset, 10)},
		[2]string{HeaderParkGroup, c.cfg.Group})
	cp := &kgo.Record{Topic: c.cfg.ParkTopic, Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		if !slices.ContainsFunc(park, func(kv [2]string) bool { return kv[0] == h.Key }) {
			cp.Headers = append(cp.Headers, h)
		}
	}
	for _, kv := range park {
		cp.Headers = append(cp.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	ctx, cancel := context.WithTimeout(a.p.ctx, c.cfg.ParkTimeout)
	defer cancel()
	if err := c.cl.ProduceSync(ctx, cp).FirstErr(); err != nil {
		return err
	}
	c.mark(a.p, rec, a.d, ferrybroker.Settlement{Action: ferrybroker.ActionParked, Err: reason})
	return ferrybroker.ErrSettlesItself
}

// halt stops p after a fault point fired: nothing later of it is handled
// or committed, and it is not fetched until it is assigned again.
func (c *Consumer) halt(p *part) {
	c.log.Debug("partition halted until it is assigned again", "topic", p.topic, "partition", p.partition)
	p.mu.Lock()
	p.halted = true
	p.queue = nil
	c.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	p.mu.Unlock()
}

// mark moves p's offset to commit past rec, whose delivery d is settled as
// s once a commit covers it.
func (c *Consumer) mark(p *part, rec *kgo.Record, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
	p.mu.Lock()
	if p.final {
		p.mu.Unlock()
		c.settler.Observer.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionLeft,
			Err: errors.New("partition revoked, lost or stopped before the offset was committed")})
		return
	}
	p.next = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	p.pending = append(p.pending, pendingSettle{offset: rec.Offset, d: d, s: s})
	p.mu.Unlock()
}

// decode decodes d, read from rec by delivery, with the consumer's
// Decoding when it has one, and checks it: a tombstone, a record the
// Decoding cannot read or whose payload does not hold to its content type
// (the Content-Type header with ferry's form) is malformed. The aggregate
// the record itself names (its key, Debezium's outbox.event. topic) stays
// the delivery's where the Decoding finds none, as without a Decoding.
func (c *Consumer) decode(rec *kgo.Record, d *ferrybroker.Delivery) error {
	if rec.Value == nil {
		return fmt.Errorf("%w: tombstone (a record with no value, key %q)", ferrybroker.ErrMalformed, rec.Key)
	}
	ct := d.Headers["Content-Type"]
	if c.cfg.Decoding != nil {
		aggType, aggID := d.AggregateType, d.AggregateID
		var err error
		if ct, err = ferrybroker.Decode(c.cfg.Decoding, d, headerFold(d.Headers, "content-type"), ferrybroker.ProtocolKafka); err != nil {
			return err
		}
		if d.AggregateType == "" {
			d.AggregateType = aggType
		}
		if d.AggregateID == "" {
			d.AggregateID = aggID
		}
	}
	return ferrybroker.CheckDelivery(ct, d, c.cfg.Validate)
}

// headerFold returns the value of the header named name in any case.
func headerFold(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// delivery returns the Delivery of rec's delivery number count (1 for the
// first). Its MessageID is the Ferry-Event-Id header, else Debezium's id
// header, else topic/partition/offset. A Debezium record (an id header and
// no Ferry-Event-Id) whose value is a JSON string holding JSON, as
// Kafka Connect's JsonConverter writes a string column, gets that JSON as
// its payload; its aggregate type, when no header says it, is the topic's
// suffix after outbox.event. (Debezium's default route).
func delivery(rec *kgo.Record, count int) *ferrybroker.Delivery {
	d := &ferrybroker.Delivery{Route: rec.Topic, Payload: rec.Value, Headers: map[string]string{},
		DeliveryCount: count, Redelivered: count > 1}
	// Debezium's records (those with its id header) carry headers as
	// Kafka Connect's header converter wrote them; ferry's own headers
	// are decoded so in any record: the relay writes them plain, and a
	// plain value never reads as a JSON string or a schema envelope.
	debezium := slices.ContainsFunc(rec.Headers, func(h kgo.RecordHeader) bool { return h.Key == HeaderDebeziumID })
	for _, h := range rec.Headers {
		if _, dup := d.Headers[h.Key]; !dup {
			v := string(h.Value)
			if debezium || strings.HasPrefix(h.Key, "Ferry-") {
				v = connectValue(v)
			}
			d.Headers[h.Key] = v
		}
	}
	d.FillFromHeaders()
	if d.MessageID == "" {
		if id := d.Headers[HeaderDebeziumID]; id != "" {
			d.MessageID = id
			d.Payload = unwrapJSONString(d.Payload)
			if d.AggregateType == "" {
				d.AggregateType, _ = strings.CutPrefix(rec.Topic, "outbox.event.")
				if d.AggregateType == rec.Topic {
					d.AggregateType = ""
				}
			}
		}
	}
	if d.MessageID == "" {
		d.MessageID = rec.Topic + "/" + strconv.Itoa(int(rec.Partition)) + "/" + strconv.FormatInt(rec.Offset, 10)
	}
	if d.AggregateID == "" && len(rec.Key) > 0 {
		if debezium {
			d.AggregateID = connectValue(string(rec.Key))
		} else {
			d.AggregateID = unquote(string(rec.Key))
		}
	}
	return d
}

// unquote returns s without JSON string quotes, if it is a JSON string (as
// Kafka Connect's JsonConverter writes a string key or header).
func unquote(s string) string {
	if out, ok := jsonString(s); ok {
		return out
	}
	return s
}

// connectValue decodes a header value as Kafka Connect's converters write
// it: plain (SimpleHeaderConverter, StringConverter), a JSON value
// (JsonConverter with schemas off: a string in quotes, a number as it
// is), or a JSON envelope {"schema":…,"payload":…} (JsonConverter with
// schemas on). A string comes back without its quotes, a number or any
// other JSON value as its JSON text, a null as "". A value that is none of
// these stays as it is.
func connectValue(v string) string {
	t := strings.TrimSpace(v)
	if t == "" {
		return v
	}
	switch t[0] {
	case '"':
		if s, ok := jsonString(t); ok {
			return s
		}
	case '{':
		var env struct {
			Schema  json.RawMessage `json:"schema"`
			Payload json.RawMessage `json:"payload"`
		}
		dec := json.NewDecoder(strings.NewReader(t))
		dec.DisallowUnknownFields()
		if dec.Decode(&env) != nil || dec.More() || len(env.Schema) == 0 || env.Schema[0] != '{' || len(env.Payload) == 0 {
			return v
		}
		if s, ok := jsonString(string(env.Payload)); ok {
			return s
		}
		if string(env.Payload) == "null" {
			return ""
		}
		return string(env.Payload)
	}
	return v
}

// jsonString returns the string the JSON text t holds, if it is a string.
func jsonString(t string) (string, bool) {
	if len(t) < 2 || t[0] != '"' {
		return "", false
	}
	var out string
	if json.Unmarshal([]byte(t), &out) != nil {
		return "", false
	}
	return out, true
}

// unwrapJSONString returns the JSON inside b when b is a JSON string that
// holds JSON, else b.
func unwrapJSONString(b []byte) []byte {
	t := strings.TrimSpace(string(b))
	if len(t) < 2 || t[0] != '"' {
		return b
	}
	var inner string
	if json.Unmarshal([]byte(t), &inner) != nil || !json.Valid([]byte(inner)) {
		return b
	}
	return []byte(inner)
}
