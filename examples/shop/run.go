package shop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryfault"
)

// Stream is the JetStream stream of the shop's events (subjects shop.>).
const Stream = "SHOP"

// ParkSubject is where a consumer group parks messages.
func ParkSubject(group string) string { return "shop.parked." + group }

// Stats is what a process reports on its STATS lines.
type Stats struct {
	Role      string `json:"role"`
	Applied   int64  `json:"applied,omitempty"`
	Duplicate int64  `json:"duplicate,omitempty"`
	Conflict  int64  `json:"conflict,omitempty"`
	Stale     int64  `json:"stale,omitempty"`
	Acked     int64  `json:"acked,omitempty"`
	Parked    int64  `json:"parked,omitempty"`
	Retried   int64  `json:"retried,omitempty"`
	// Task worker (sms) or relay counters.
	Confirmed int64 `json:"confirmed,omitempty"`
	Unknown   int64 `json:"unknown,omitempty"`
	Fenced    int64 `json:"fenced,omitempty"`
	Swept     int64 `json:"swept,omitempty"`
	Dupes     int64 `json:"broker_duplicates,omitempty"`
	// Log relay: events read from the database's log, gaps found in it.
	LogEvents int64 `json:"log_events,omitempty"`
	LogGaps   int64 `json:"log_gaps,omitempty"`
	// Order service: payments committed, commits cut off by the fault.
	Paid           int64 `json:"paid,omitempty"`
	UnknownCommits int64 `json:"unknown_commits,omitempty"`
	// Its payments client: attempts beyond the first, replayed answers,
	// 409s (a request with the key still running).
	PayRetries    int64 `json:"pay_retries,omitempty"`
	PayReplays    int64 `json:"pay_replays,omitempty"`
	PayInProgress int64 `json:"pay_in_progress,omitempty"`
}

// ReportStats writes a STATS line to w every interval until ctx ends, and
// once more at the end.
func ReportStats(ctx context.Context, w io.Writer, interval time.Duration, get func() Stats) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		b, _ := json.Marshal(get())
		fmt.Fprintf(w, "STATS %s\n", b)
		select {
		case <-ctx.Done():
			b, _ := json.Marshal(get())
			fmt.Fprintf(w, "STATS %s\n", b)
			return
		case <-t.C:
		}
	}
}

// ParseStats parses a STATS line.
func ParseStats(line string) (Stats, bool) {
	rest, ok := strings.CutPrefix(line, "STATS ")
	if !ok {
		return Stats{}, false
	}
	var s Stats
	return s, json.Unmarshal([]byte(rest), &s) == nil
}

// inboxCounts counts inbox outcomes (a ferry.HookInbox).
type inboxCounts struct{ applied, duplicate, conflict, stale atomic.Int64 }

func (c *inboxCounts) OnInbox(_ string, o ferry.InboxOutcome, _ time.Duration) {
	switch o {
	case ferry.InboxApplied:
		c.applied.Add(1)
	case ferry.InboxDuplicate:
		c.duplicate.Add(1)
	case ferry.InboxConflict:
		c.conflict.Add(1)
	case ferry.InboxStale:
		c.stale.Add(1)
	}
}

// ConsumerOptions configure a consumer process.
type ConsumerOptions struct {
	Role       string // "points" or "sms"
	DB         string // the points database
	BrokerURL  string
	GatewayURL string // sms only
	// Concurrency of handlers. Default 4.
	Concurrency int
	// FaultPoint, when set, is reached at the fault points of the inbox,
	// the SMS task worker and the consumer (ferryfault), through the
	// context each starts with.
	FaultPoint func(ctx context.Context, point string) error
	Out        io.Writer // STATS lines
}

// RunConsumer runs a points or SMS consumer until ctx ends.
func RunConsumer(ctx context.Context, o ConsumerOptions) error {
	// The fault points of the inbox, the task worker and the consumer
	// fire through the context each is started with.
	ctx = ferryfault.With(ctx, o.FaultPoint)
	// A consumer restarted during an outage waits for its database and
	// broker, as a supervised service would, rather than exit.
	var db *DB
	err := retryStart(ctx, func() (err error) {
		db, err = Open(ctx, o.DB)
		return err
	})
	if err != nil {
		return err
	}
	defer db.Close()
	ib, err := db.Inbox()
	if err != nil {
		return err
	}
	counts := &inboxCounts{}
	consumer := PointsConsumer
	if o.Role == "sms" {
		consumer = SMSConsumer
	}
	inbox, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: consumer, Hooks: []ferry.Hook{counts}, Logger: EnvLogger()})
	if err != nil {
		return err
	}
	var (
		handler ferrybroker.Handler
		worker  *ferry.TaskWorker
	)
	switch o.Role {
	case "points":
		handler = PointsHandler(db, inbox)
	case "sms":
		taskStore, err := db.Outbox(TaskTable)
		if err != nil {
			return err
		}
		tasks, err := ferry.NewOutbox(taskStore, nil)
		if err != nil {
			return err
		}
		handler = SMSHandler(inbox, tasks)
		client := &http.Client{Timeout: 5 * time.Second}
		worker, err = ferry.NewTaskWorker(taskStore, map[string]ferry.TaskHandler{"SendSMS": SendSMS(client, o.GatewayURL)},
			&ferry.TaskWorkerConfig{Relay: ferry.RelayConfig{
				PollInterval: 100 * time.Millisecond, Lease: 5 * time.Second, PublishTimeout: 4 * time.Second,
				SweepInterval: 500 * time.Millisecond, Logger: EnvLogger(),
				// The workers of the task table elect the one that sweeps
				// from their heartbeats: a crashed leader's tasks are swept
				// within about 4 s (3 beats, then the next sweep), near
				// their 5 s lease.
				Heartbeat: ferry.HeartbeatConfig{Interval: time.Second},
				Retry:     ferry.ExponentialBackoff{Initial: 50 * time.Millisecond, Max: time.Second, MaxAttempts: 1000},
			}})
		if err != nil {
			return err
		}
		if err := worker.Start(ctx); err != nil {
			return err
		}
		defer worker.Stop(context.Background())
	default:
		return fmt.Errorf("shop: unknown consumer role %q", o.Role)
	}
	var (
		stop  func(context.Context) error
		stats func() Stats
	)
	err = retryStart(ctx, func() (err error) {
		stop, stats, err = consume(ctx, o, handler)
		return err
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	statsCtx, stopStats := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		ReportStats(statsCtx, o.Out, 200*time.Millisecond, func() Stats {
			s := stats()
			s.Role, s.Applied, s.Duplicate, s.Conflict, s.Stale = o.Role, counts.applied.Load(), counts.duplicate.Load(),
				counts.conflict.Load(), counts.stale.Load()
			if worker != nil {
				ws := worker.Stats()
				s.Confirmed, s.Unknown, s.Fenced, s.Swept = ws.Confirmed, ws.Unknown, ws.Fenced, ws.Swept
			}
			return s
		})
	}()
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = stop(stopCtx)
	stopStats()
	wg.Wait()
	return err
}

// consume starts a broker consumer of OrderPaid events for the role's
// group and returns how to stop it and read its counters.
func consume(ctx context.Context, o ConsumerOptions, h ferrybroker.Handler) (func(context.Context) error, func() Stats, error) {
	conc := o.Concurrency
	if conc == 0 {
		conc = 4
	}
	switch {
	case strings.HasPrefix(o.BrokerURL, "nats:"):
		nc, err := nats.Connect(o.BrokerURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		c, err := ferrynats.NewConsumer(js, h, &ferrynats.ConsumerConfig{
			Stream: Stream, Durable: o.Role, FilterSubjects: []string{RoutePaid}, Declare: true,
			ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: conc, Logger: EnvLogger(),
				Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 50, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 2 * time.Second}},
			ParkSubject: ParkSubject(o.Role), AckWait: 5 * time.Second,
		})
		if err == nil {
			err = c.Start(ctx)
		}
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return func(ctx context.Context) error {
				defer nc.Close()
				return c.Stop(ctx)
			}, func() Stats {
				s := c.Stats()
				return Stats{Acked: s.Acked, Parked: s.Parked, Retried: s.Retried}
			}, nil
	case strings.HasPrefix(o.BrokerURL, "amqp:") || strings.HasPrefix(o.BrokerURL, "amqps:"):
		topo := AMQPTopology()
		c, err := ferryamqp.DialConsumer(o.BrokerURL, o.Role, OnlyPaid(h), &ferryamqp.ConsumerConfig{
			ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: conc, Logger: EnvLogger(),
				Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 15, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 2 * time.Second}},
			Prefetch: conc, Declare: true, Topology: topo,
			Queue:      ferryamqp.Queue{DeliveryLimit: amqpDeliveryLimit},
			Connection: ferryamqp.ConnectionConfig{Name: "shop-" + o.Role},
		})
		if err == nil {
			err = c.Start(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
		return c.Stop, func() Stats {
			s := c.Stats()
			return Stats{Acked: s.Acked, Parked: s.Parked, Retried: s.Retried}
		}, nil
	case strings.HasPrefix(o.BrokerURL, "kafka:") || strings.HasPrefix(o.BrokerURL, "kafkas:"):
		// The check at start is bounded: a broker that does not answer
		// fails this try, and retryStart tries again.
		startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := consumeKafka(startCtx, o, h, conc)
		if err != nil {
			return nil, nil, err
		}
		return c.Stop, func() Stats {
			s := c.Stats()
			return Stats{Acked: s.Acked, Parked: s.Parked, Retried: s.Retried}
		}, nil
	}
	return nil, nil, fmt.Errorf("shop: unsupported broker URL %q", o.BrokerURL)
}

// amqpDeliveryLimit is the quorum queues' x-delivery-limit. RabbitMQ 3.x
// counts a delivery returned by a consumer that crashed or closed its
// channel, so a message waiting in the prefetch of consumers that keep
// crashing reaches the limit without ever failing, and the broker
// dead-letters a good message. The limit is the backstop for a message
// that kills its consumer; the consumer parks failing messages itself
// after Redelivery.MaxDeliveries (15). Keep the limit far above that, and the
// prefetch small.
const amqpDeliveryLimit = 200

// AMQPTopology is the shop's RabbitMQ topology: a quorum queue per consumer
// group (each with its parking queue, name+".parking"), bound to amq.topic.
// The points queue also takes OrderCreated events, which it acknowledges
// without effect: every event the relay publishes reaches a queue, so none
// comes back unroutable.
func AMQPTopology() ferryamqp.Topology {
	return ferryamqp.Topology{
		Queues: []ferryamqp.Queue{{Name: "points", DeliveryLimit: amqpDeliveryLimit}, {Name: "sms", DeliveryLimit: amqpDeliveryLimit}},
		Bindings: []ferryamqp.Binding{
			{Queue: "points", Exchange: "amq.topic", RoutingKey: RoutePaid},
			{Queue: "points", Exchange: "amq.topic", RoutingKey: RouteCreated},
			{Queue: "sms", Exchange: "amq.topic", RoutingKey: RoutePaid},
		},
	}
}

// SetupAMQP declares the shop's topology.
func SetupAMQP(ctx context.Context, url string) error {
	p, err := ferryamqp.Dial(ctx, url, &ferryamqp.Config{Topology: AMQPTopology(), Declare: true})
	if err != nil {
		return err
	}
	return p.Close()
}

// AMQPReady returns the messages ready in each of queues, by a passive
// declare: a message a consumer holds unacknowledged is not counted.
func AMQPReady(ctx context.Context, url string, queues ...string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := ferryamqp.Connect(ctx, url, &ferryamqp.ConnectionConfig{Name: "shop-demo"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	out := map[string]int{}
	for _, name := range queues {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", name, err)
		}
		out[name] = q.Messages
	}
	return out, nil
}

// AMQPParkedIDs returns the message ids in queue (a parking queue), each
// once: a consumer killed after it parked a message and before its ack
// parks it again on the redelivery. It reads the messages without
// acknowledging them, and closing its channel puts them back.
func AMQPParkedIDs(ctx context.Context, url, queue string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := ferryamqp.Connect(ctx, url, &ferryamqp.ConnectionConfig{Name: "shop-demo"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	ids := map[string]bool{}
	for ctx.Err() == nil {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", queue, err)
		}
		if !ok {
			return ids, nil
		}
		ids[d.MessageId] = true
	}
	return nil, fmt.Errorf("queue %s: %w", queue, ctx.Err())
}

// OnlyPaid acknowledges every event but OrderPaid without running h.
func OnlyPaid(h ferrybroker.Handler) ferrybroker.Handler {
	return func(ctx context.Context, d *ferrybroker.Delivery) error {
		if d.Type != OrderPaid {
			return nil
		}
		return h(ctx, d)
	}
}

// SetupNATS declares the shop's stream.
func SetupNATS(ctx context.Context, url string) error { return SetupNATSReplicas(ctx, url, 1) }

// SetupNATSReplicas is SetupNATS with the stream kept on replicas servers
// of a JetStream cluster (R3 on three servers).
func SetupNATSReplicas(ctx context.Context, url string, replicas int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{"shop.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: replicas})
	return err
}

// NATSQuiet reports whether both consumer groups have nothing pending, and
// how many messages each parked.
func NATSQuiet(ctx context.Context, url string) (quiet bool, parked map[string]uint64, err error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return false, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, nil, err
	}
	quiet, parked = true, map[string]uint64{}
	for _, group := range []string{"points", "sms"} {
		c, err := js.Consumer(ctx, Stream, group)
		if err != nil {
			return false, nil, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, nil, err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			quiet = false
		}
	}
	st, err := js.Stream(ctx, Stream)
	if err != nil {
		return false, nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("shop.parked.>"))
	if err != nil {
		return false, nil, err
	}
	for subj, n := range info.State.Subjects {
		parked[strings.TrimPrefix(subj, "shop.parked.")] = n
	}
	return quiet, parked, nil
}

// retryStart runs start until it succeeds, ctx ends or 30s pass, waiting
// 200ms, then twice as long each time up to 2s, between tries.
func retryStart(ctx context.Context, start func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	wait := 200 * time.Millisecond
	for {
		err := start()
		if err == nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}
