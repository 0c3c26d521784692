package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// consumerBundle is a fresh queue (declared by the consumers, deleted when
// the test ends) bound to amq.topic, and a publisher feeding it.
type consumerBundle struct {
	ctx   context.Context
	conn  *amqp.Connection
	queue string
	rk    string
	pub   *Publisher
}

func setupConsumer(t *testing.T) *consumerBundle {
	t.Helper()
	b := &consumerBundle{ctx: testenv.Context(t, 5*time.Minute), conn: ferryamqptest.RabbitMQ(t),
		queue: testenv.Name("ferry_cq_"), rk: testenv.Name("ferry.rk.")}
	ferryamqptest.DeleteRabbitMQQueue(t, b.queue)
	ferryamqptest.DeleteRabbitMQQueue(t, b.queue+".parking")
	// Declare the queue now, as consumers will, so that publishes route.
	var err error
	b.pub, err = New(b.ctx, b.conn, &Config{Declare: true, Topology: Topology{
		Queues:   []Queue{{Name: b.queue}},
		Bindings: []Binding{{Queue: b.queue, RoutingKey: b.rk}},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { b.pub.Close() })
	return b
}

func (b *consumerBundle) config(cfg ConsumerConfig) *ConsumerConfig {
	cfg.Declare = true
	cfg.Topology = Topology{Bindings: []Binding{{Queue: b.queue, Exchange: "amq.topic", RoutingKey: b.rk}}}
	return &cfg
}

func (b *consumerBundle) publish(t *testing.T, n int) []ferrytype.Message {
	t.Helper()
	msgs := testMsgs(n, func(int) string { return b.rk })
	for i, r := range b.pub.Publish(b.ctx, msgs) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "message %d: %v", i, r.Err)
	}
	return msgs
}

func (b *consumerBundle) start(t *testing.T, conn *amqp.Connection, h ferrybroker.Handler, cfg *ConsumerConfig) *Consumer {
	t.Helper()
	c, err := NewConsumer(conn, b.queue, h, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func (b *consumerBundle) depth(t *testing.T, queue string) (messages, consumers int) {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages, q.Consumers
}

// signalHandler is a slog.Handler that calls fn when a record with
// message msg is logged.
type signalHandler struct {
	msg string
	fn  func()
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fn()
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// journal records commits and settlements in one global order.
type journal struct {
	mu     sync.Mutex
	seq    int
	commit map[*ferrybroker.Delivery]int // delivery -> sequence of its commit
	events []string
}

// With 8 concurrent handlers of random duration and random transient
// failures, no delivery is acked unless its handler committed first, a
// failed delivery is requeued and never acked, and in the end every
// message was committed and the queue is empty.
func TestConsumerAcksOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	msgs := b.publish(t, 1000)
	j := &journal{commit: map[*ferrybroker.Delivery]int{}}
	var committed sync.Map
	var distinct atomic.Int64
	var violations []string
	handler := func(ctx context.Context, d *ferrybroker.Delivery) error {
		// Simulated business work of random length.
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		if rand.IntN(100) < 15 {
			return errors.New("deadlock detected; transaction rolled back")
		}
		j.mu.Lock()
		j.seq++
		j.commit[d] = j.seq
		j.mu.Unlock()
		if _, dup := committed.LoadOrStore(d.MessageID, true); !dup {
			distinct.Add(1)
		}
		return nil
	}
	onSettle := func(_ string, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.seq++
		c, ok := j.commit[d]
		switch s.Action {
		case ferrybroker.ActionAcked:
			if !ok || c >= j.seq {
				violations = append(violations, fmt.Sprintf("%s acked without a prior commit", d.MessageID))
			}
		case ferrybroker.ActionRetried:
			if ok {
				violations = append(violations, fmt.Sprintf("%s requeued after its commit", d.MessageID))
			}
		default:
			violations = append(violations, fmt.Sprintf("%s: unexpected %s (%v)", d.MessageID, s.Action, s.Err))
		}
	}
	c := b.start(t, b.conn, handler, b.config(ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 8, Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 20, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond}, Hooks: []ferrybroker.Hook{ferrybroker.SettledFunc(onSettle)}}, Prefetch: 32}))
	waitUntil(t, 2*time.Minute, func() bool { return distinct.Load() == int64(len(msgs)) })
	require.NoError(t, c.Stop(b.ctx))
	j.mu.Lock()
	require.Empty(t, violations)
	j.mu.Unlock()
	st := c.Stats()
	require.Equal(t, int64(len(msgs)), st.Acked, "%+v", st)
	require.Positive(t, st.Retried)
	require.Zero(t, st.Parked)
	n, _ := b.depth(t, b.queue)
	require.Zero(t, n, "every message was acked")
}

// A consumer whose connection dies mid-batch (the socket is cut, as in a
// crash) with handlers in progress and prefetched deliveries waiting: a
// second consumer receives every message the first did not ack. Nothing is
// lost; the only duplicates are messages whose ack may not have reached
// RabbitMQ.
func TestConsumerKilledMidBatchRedeliversEveryUnacked(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	msgs := b.publish(t, 500)
	rc := dialRaw(t)
	gate := make(chan struct{})
	var openGate sync.Once
	release := func() { openGate.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var (
		mu       sync.Mutex
		acked1   = map[string]bool{}
		running  = map[string]bool{}
		inFlight atomic.Int64
		done1    atomic.Int64
	)
	const stuck = 6 // of 8 handlers: the others keep going
	h1 := func(ctx context.Context, d *ferrybroker.Delivery) error {
		if rand.IntN(4) == 0 && inFlight.Add(1) <= stuck {
			mu.Lock()
			running[d.MessageID] = true
			mu.Unlock()
			// Still running when the connection dies, while later
			// deliveries complete and are acked: a multiple ack of one
			// of those would take this one with it.
			<-gate
			return nil
		}
		done1.Add(1)
		return nil
	}
	c1 := b.start(t, rc.Connection, h1, b.config(ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 8, Hooks: []ferrybroker.Hook{ferrybroker.SettledFunc(func(_ string, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
		if s.Action == ferrybroker.ActionAcked {
			mu.Lock()
			acked1[d.MessageID] = true
			mu.Unlock()
		}
	})}}, Prefetch: 50,
	}))
	waitUntil(t, time.Minute, func() bool { return done1.Load() >= 100 && inFlight.Load() >= stuck })
	rc.cut()
	release()
	waitUntil(t, time.Minute, func() bool { return rc.IsClosed() })
	require.NoError(t, c1.Stop(b.ctx))

	var (
		mu2  sync.Mutex
		got2 = map[string]*ferrybroker.Delivery{}
	)
	c2 := b.start(t, b.conn, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu2.Lock()
		got2[d.MessageID] = d
		mu2.Unlock()
		return nil
	}, b.config(ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 8}}))
	mu.Lock()
	unacked := 0
	for _, m := range msgs {
		if !acked1[m.ID] {
			unacked++
		}
	}
	mu.Unlock()
	waitUntil(t, time.Minute, func() bool {
		mu2.Lock()
		defer mu2.Unlock()
		return len(got2) >= unacked
	})
	waitUntil(t, time.Minute, func() bool { n, _ := b.depth(t, b.queue); return n == 0 })
	require.NoError(t, c2.Stop(b.ctx))
	mu.Lock()
	defer mu.Unlock()
	mu2.Lock()
	defer mu2.Unlock()
	require.Len(t, running, stuck)
	for id := range running {
		require.False(t, acked1[id])
		require.True(t, got2[id] != nil && got2[id].Redelivered, "in progress at the cut: %s must come back", id)
	}
	dup := 0
	for _, m := range msgs {
		d, again := got2[m.ID]
		if !acked1[m.ID] {
			require.True(t, again, "message %s was not acked by the dead consumer and never came back", m.ID)
			continue
		}
		if again {
			dup++
			require.True(t, d.Redelivered)
		}
	}
	t.Logf("first consumer acked %d, left %d unacked; second consumer received %d (%d of them acked before the cut)",
		len(acked1), unacked, len(got2), dup)
	require.Less(t, dup, 50, "only acks in flight at the cut may be lost")
}

// A message that kills its consumer every time (the handler never gets to
// return) cannot be parked by the consumer: the quorum queue's delivery
// limit dead-letters it, at least once, to the parking queue.
func TestQuorumDeliveryLimitParksAMessageThatCrashesItsConsumer(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	// A queue of its own with a small delivery limit.
	queue := testenv.Name("ferry_crash_")
	ferryamqptest.DeleteRabbitMQQueue(t, queue)
	ferryamqptest.DeleteRabbitMQQueue(t, queue+".parking")
	cfg := func() *ConsumerConfig {
		return &ConsumerConfig{Declare: true, ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 2}}, Queue: Queue{DeliveryLimit: 2},
			Topology: Topology{Bindings: []Binding{{Queue: queue, Exchange: "amq.topic", RoutingKey: queue}}}}
	}
	// Declare it before publishing.
	c0, err := NewConsumer(b.conn, queue, func(context.Context, *ferrybroker.Delivery) error { return nil }, cfg())
	require.NoError(t, err)
	require.NoError(t, c0.Start(b.ctx))
	require.NoError(t, c0.Stop(b.ctx))
	m := testMsgs(1, func(int) string { return queue })
	require.Equal(t, ferrytype.OutcomeConfirmed, b.pub.Publish(b.ctx, m)[0].Outcome)

	deliveries := 0
	for {
		n, _ := b.depth(t, queue)
		p, _ := b.depth(t, queue+".parking")
		if n == 0 && p == 1 {
			break
		}
		require.Less(t, deliveries, 10, "the delivery limit never dead-lettered the message")
		rc := dialRaw(t)
		crashed := make(chan struct{})
		c, err := NewConsumer(rc.Connection, queue, func(context.Context, *ferrybroker.Delivery) error {
			rc.cut() // the process dies mid-handler
			close(crashed)
			return nil
		}, cfg())
		require.NoError(t, err)
		require.NoError(t, c.Start(b.ctx))
		select {
		case <-crashed:
			deliveries++
			waitUntil(t, time.Minute, func() bool { return rc.IsClosed() })
		case <-time.After(2 * time.Second):
			// No delivery: RabbitMQ is dead-lettering it.
		}
		_ = c.Stop(b.ctx)
		_ = rc.Close()
	}
	require.Equal(t, 3, deliveries, "delivered DeliveryLimit+1 times")
	got := ferryamqptest.ReadRabbitMQQueue(t, b.conn, queue+".parking", 1, time.Minute)
	require.Len(t, got, 1)
	require.Equal(t, m[0].ID, got[0].MessageId)
	require.Equal(t, "delivery_limit", got[0].Headers["x-first-death-reason"])
}

func TestConsumerConfigErrors(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	_, err := NewConsumer(conn, "q", nil, nil)
	require.ErrorContains(t, err, "handler is nil")
	_, err = NewConsumer(conn, "q", h, &ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 8}, Prefetch: 4})
	require.ErrorContains(t, err, "ConsumerConfig.Prefetch 4")
	_, err = NewConsumer(conn, "q", h, &ConsumerConfig{Declare: true, ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 30}}})
	require.ErrorContains(t, err, "ConsumerConfig.Redelivery.MaxDeliveries 30 exceeds the queue's DeliveryLimit 20")
	_, err = NewConsumer(conn, "q", h, &ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: time.Second, MaxRetryDelay: time.Millisecond}}})
	require.ErrorContains(t, err, "ConsumerConfig.Redelivery: ")
	c, err := NewConsumer(conn, testenv.Name("ferry_missing_"), h, nil)
	require.NoError(t, err)
	err = c.Start(context.Background())
	require.ErrorContains(t, err, "does not exist: declare it")
	_, err = DialConsumer("amqp://u:s3cr3tpw@127.0.0.1:1/", "q", h, nil)
	require.NoError(t, err, "DialConsumer connects at Start")
}

// A publisher and a consumer that own their connections leave no
// goroutine behind once closed.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	// serial: it counts the process's goroutines, which parallel tests change.
	b := setupConsumer(t)
	base := runtime.NumGoroutine()
	url := testenv.URL(testenv.EnvAMQP)
	p, err := Dial(b.ctx, url, nil)
	require.NoError(t, err)
	msgs := testMsgs(100, func(int) string { return b.rk })
	for _, r := range p.Publish(b.ctx, msgs) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome)
	}
	var n atomic.Int64
	c, err := DialConsumer(url, b.queue, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if n.Add(1)%10 == 0 {
			return errors.New("transient") // some retry timers too
		}
		return nil
	}, b.config(ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: time.Millisecond}}}))
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	waitUntil(t, time.Minute, func() bool { return c.Stats().Acked == 100 })
	require.NoError(t, c.Stop(b.ctx))
	require.NoError(t, p.Close())
	testenv.WaitFor(t, 30*time.Second, func() bool { return runtime.NumGoroutine() <= base }, func() string {
		buf := make([]byte, 1<<20)
		return fmt.Sprintf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	})
}

// A parked copy keeps the original's AMQP properties and says which
// exchange it came through, next to the park headers the suite checks.
func TestConsumerParkedCopyKeepsAMQPProperties(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t)
	m := b.publish(t, 1)[0]
	c := b.start(t, b.conn, func(ctx context.Context, d *ferrybroker.Delivery) error {
		return ferrytype.Poison(errors.New("unknown event type OrderPaidV9"))
	}, b.config(ConsumerConfig{}))
	waitUntil(t, time.Minute, func() bool { return c.Stats().Parked == 1 })
	require.NoError(t, c.Stop(b.ctx))
	got := ferryamqptest.ReadRabbitMQQueue(t, b.conn, c.ParkingQueue(), 1, time.Minute)
	require.Len(t, got, 1)
	d := got[0]
	require.Equal(t, m.ID, d.MessageId)
	require.Equal(t, "OrderPaid", d.Type)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "amq.topic", d.Headers[HeaderParkExchange])
	require.Equal(t, b.rk, d.Headers[ferrybroker.HeaderParkRoute])
	require.Equal(t, b.queue, d.Headers[ferrybroker.HeaderParkSource])
	require.Equal(t, "1", d.Headers[ferrybroker.HeaderParkDeliveryCount])
}
