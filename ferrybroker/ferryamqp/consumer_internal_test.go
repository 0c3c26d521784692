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
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
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
	b := &consumerBundle{ctx: testsvc.Context(t, 5*time.Minute), conn: testsvc.RabbitMQ(t),
		queue: testsvc.Name("ferry_cq_"), rk: testsvc.Name("ferry.rk.")}
	testsvc.DeleteRabbitMQQueue(t, b.queue)
	testsvc.DeleteRabbitMQQueue(t, b.queue+".parking")
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
	onSettle := func(d *ferrybroker.Delivery, s Settlement) {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.seq++
		c, ok := j.commit[d]
		switch s.Action {
		case ActionAcked:
			if !ok || c >= j.seq {
				violations = append(violations, fmt.Sprintf("%s acked without a prior commit", d.MessageID))
			}
		case ActionRequeued:
			if ok {
				violations = append(violations, fmt.Sprintf("%s requeued after its commit", d.MessageID))
			}
		default:
			violations = append(violations, fmt.Sprintf("%s: unexpected %s (%v)", d.MessageID, s.Action, s.Err))
		}
	}
	c := b.start(t, b.conn, handler, b.config(ConsumerConfig{Concurrency: 8, Prefetch: 32, MaxDeliveries: 20,
		RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond, OnSettle: onSettle}))
	waitUntil(t, 2*time.Minute, func() bool { return distinct.Load() == int64(len(msgs)) })
	require.NoError(t, c.Stop(b.ctx))
	j.mu.Lock()
	require.Empty(t, violations)
	j.mu.Unlock()
	st := c.Stats()
	require.Equal(t, int64(len(msgs)), st.Acked, "%+v", st)
	require.Positive(t, st.Requeued)
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
	c1 := b.start(t, rc.Connection, h1, b.config(ConsumerConfig{Concurrency: 8, Prefetch: 50,
		OnSettle: func(d *ferrybroker.Delivery, s Settlement) {
			if s.Action == ActionAcked {
				mu.Lock()
				acked1[d.MessageID] = true
				mu.Unlock()
			}
		}}))
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
	}, b.config(ConsumerConfig{Concurrency: 8}))
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

// Poison messages are parked with their reason, never acked and
// forgotten: an ErrPoison at once, a transient failure after
// MaxDeliveries deliveries, an undecodable payload without running the
// handler.
func TestConsumerParksPoisonWithReason(t *testing.T) {
	b := setupConsumer(t)
	msgs := b.publish(t, 3)
	poison, flaky, good := msgs[0].ID, msgs[1].ID, msgs[2].ID
	// An undecodable message, published by someone else.
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Publish("amq.topic", b.rk, false, false, amqp.Publishing{
		MessageId: "bad-json", ContentType: "application/json", Body: []byte(`{"amount": 1`), DeliveryMode: amqp.Persistent}))
	require.NoError(t, ch.Close())

	var calls sync.Map
	c := b.start(t, b.conn, func(ctx context.Context, d *ferrybroker.Delivery) error {
		n, _ := calls.LoadOrStore(d.MessageID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		switch d.MessageID {
		case poison:
			return ferrytype.Poison(errors.New("unknown event type OrderPaidV9"))
		case flaky:
			return errors.New("points service unavailable")
		}
		return nil
	}, b.config(ConsumerConfig{MaxDeliveries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}))
	waitUntil(t, time.Minute, func() bool { s := c.Stats(); return s.Parked == 3 && s.Acked == 1 })
	require.NoError(t, c.Stop(b.ctx))

	count := func(id string) int64 {
		n, ok := calls.Load(id)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}
	require.EqualValues(t, 1, count(poison), "a poison message is not retried")
	require.EqualValues(t, 3, count(flaky), "parked on its third delivery")
	require.EqualValues(t, 0, count("bad-json"), "the handler never sees an undecodable message")
	require.EqualValues(t, 1, count(good))

	n, _ := b.depth(t, b.queue)
	require.Zero(t, n)
	parked := map[string]amqp.Delivery{}
	for _, d := range testsvc.ReadRabbitMQQueue(t, b.conn, c.ParkingQueue(), 3, time.Minute) {
		parked[d.MessageId] = d
	}
	require.Len(t, parked, 3)
	require.Contains(t, parked[poison].Headers[HeaderReason], "unknown event type OrderPaidV9")
	require.Contains(t, parked[flaky].Headers[HeaderReason], "failed on delivery 3 of at most 3: points service unavailable")
	require.Contains(t, parked["bad-json"].Headers[HeaderReason], "invalid message: payload is not valid JSON")
	for id, d := range parked {
		require.Equal(t, b.rk, d.Headers[HeaderOriginalRoutingKey], id)
		require.Equal(t, "amq.topic", d.Headers[HeaderOriginalExchange], id)
		require.Equal(t, b.queue, d.Headers[HeaderOriginalQueue], id)
		require.NotEmpty(t, d.Headers[HeaderFailedAt], id)
		require.Equal(t, amqp.Persistent, d.DeliveryMode, id)
	}
	require.EqualValues(t, 3, parked[flaky].Headers[HeaderDeliveryCount])
	require.Equal(t, msgs[0].Headers["traceparent"], parked[poison].Headers["traceparent"])
	require.JSONEq(t, string(msgs[1].Payload), string(parked[flaky].Body))
}

// Stop cancels the consumer, lets the handlers in progress finish and acks
// them; the prefetched deliveries that never started go back to the queue.
func TestConsumerStopFinishesInFlightAndLeavesTheRest(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 10)
	gate := make(chan struct{})
	var started, finished atomic.Int64
	cancelled := make(chan struct{})
	var once sync.Once
	logs := signalHandler{msg: "consumer cancelled; finishing the handlers in progress", fn: func() { once.Do(func() { close(cancelled) }) }}
	c := b.start(t, b.conn, func(ctx context.Context, d *ferrybroker.Delivery) error {
		started.Add(1)
		<-gate
		finished.Add(1)
		return nil
	}, b.config(ConsumerConfig{Concurrency: 2, Prefetch: 10, Logger: slog.New(logs)}))
	waitUntil(t, time.Minute, func() bool { return started.Load() == 2 })
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(b.ctx) }()
	<-cancelled
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while handlers were running", err)
	default:
	}
	close(gate)
	require.NoError(t, <-stopped)
	require.EqualValues(t, 2, started.Load())
	require.EqualValues(t, 2, finished.Load())
	require.EqualValues(t, 2, c.Stats().Acked)
	left := testsvc.ReadRabbitMQQueue(t, b.conn, b.queue, 8, time.Minute)
	require.Len(t, left, 8)
	for _, d := range left {
		require.True(t, d.Redelivered, "prefetched, never started, returned")
	}
}

// The Delivery a handler gets carries the event's metadata, and a
// redelivery says so with its count.
func TestConsumerDeliveryFields(t *testing.T) {
	b := setupConsumer(t)
	m := b.publish(t, 1)[0]
	var (
		mu   sync.Mutex
		seen []ferrybroker.Delivery
	)
	c := b.start(t, b.conn, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, *d)
		if len(seen) == 1 {
			return errors.New("try again")
		}
		return nil
	}, b.config(ConsumerConfig{RetryDelay: time.Millisecond}))
	waitUntil(t, time.Minute, func() bool { return c.Stats().Acked == 1 })
	require.NoError(t, c.Stop(b.ctx))
	require.Len(t, seen, 2)
	first, second := seen[0], seen[1]
	require.Equal(t, m.ID, first.MessageID)
	require.Equal(t, "OrderPaid", first.Type)
	require.Equal(t, "order", first.AggregateType)
	require.Equal(t, m.AggregateID, first.AggregateID)
	require.Equal(t, m.Sequence, first.Sequence)
	require.Equal(t, b.rk, first.Route)
	require.JSONEq(t, string(m.Payload), string(first.Payload))
	require.Equal(t, m.Headers["traceparent"], first.Headers["traceparent"])
	require.False(t, first.Redelivered)
	require.Equal(t, 1, first.DeliveryCount)
	require.True(t, second.Redelivered)
	require.Equal(t, 2, second.DeliveryCount)
}

// A message that kills its consumer every time (the handler never gets to
// return) cannot be parked by the consumer: the quorum queue's delivery
// limit dead-letters it, at least once, to the parking queue.
func TestQuorumDeliveryLimitParksAMessageThatCrashesItsConsumer(t *testing.T) {
	b := setupConsumer(t)
	// A queue of its own with a small delivery limit.
	queue := testsvc.Name("ferry_crash_")
	testsvc.DeleteRabbitMQQueue(t, queue)
	testsvc.DeleteRabbitMQQueue(t, queue+".parking")
	cfg := func() *ConsumerConfig {
		return &ConsumerConfig{Declare: true, MaxDeliveries: 2, Queue: Queue{DeliveryLimit: 2},
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
	got := testsvc.ReadRabbitMQQueue(t, b.conn, queue+".parking", 1, time.Minute)
	require.Len(t, got, 1)
	require.Equal(t, m[0].ID, got[0].MessageId)
	require.Equal(t, "delivery_limit", got[0].Headers["x-first-death-reason"])
}

func TestConsumerConfigErrors(t *testing.T) {
	conn := testsvc.RabbitMQ(t)
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	_, err := NewConsumer(conn, "q", nil, nil)
	require.ErrorContains(t, err, "handler is nil")
	_, err = NewConsumer(conn, "q", h, &ConsumerConfig{Concurrency: 8, Prefetch: 4})
	require.ErrorContains(t, err, "ConsumerConfig.Prefetch 4")
	_, err = NewConsumer(conn, "q", h, &ConsumerConfig{Declare: true, MaxDeliveries: 30})
	require.ErrorContains(t, err, "exceeds the queue's DeliveryLimit 20")
	c, err := NewConsumer(conn, testsvc.Name("ferry_missing_"), h, nil)
	require.NoError(t, err)
	err = c.Start(context.Background())
	require.ErrorContains(t, err, "does not exist: declare it")
	_, err = DialConsumer("amqp://u:s3cr3tpw@127.0.0.1:1/", "q", h, nil)
	require.NoError(t, err, "DialConsumer connects at Start")
}

// A publisher and a consumer that own their connections leave no
// goroutine behind once closed.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	b := setupConsumer(t)
	base := runtime.NumGoroutine()
	url := testsvc.URL(testsvc.EnvAMQP)
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
	}, b.config(ConsumerConfig{RetryDelay: time.Millisecond}))
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	waitUntil(t, time.Minute, func() bool { return c.Stats().Acked == 100 })
	require.NoError(t, c.Stop(b.ctx))
	require.NoError(t, p.Close())
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The named fault point after the handler committed and before the ack: a
// crash there leaves the delivery unacked, and it comes back to the next
// consumer, which must find the effect done.
func TestFaultAfterHandleLeavesTheDeliveryUnacked(t *testing.T) {
	b := setupConsumer(t)
	b.publish(t, 3)
	var handled atomic.Int64
	first := b.start(t, b.conn, func(context.Context, *ferrybroker.Delivery) error {
		handled.Add(1)
		return nil
	}, b.config(ConsumerConfig{Concurrency: 1, Prefetch: 1,
		FaultPoint: func(_ context.Context, point string) error {
			if point == ferrybroker.FaultConsumerAfterHandle {
				return errors.New("crash")
			}
			return nil
		}}))
	waitUntil(t, time.Minute, func() bool { return handled.Load() >= 1 })
	require.NoError(t, first.Stop(b.ctx))
	require.Zero(t, first.Stats().Acked, "nothing acked past the fault point")
	seen := map[string]int{}
	var mu sync.Mutex
	second := b.start(t, b.conn, func(_ context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		seen[d.MessageID]++
		mu.Unlock()
		return nil
	}, b.config(ConsumerConfig{Concurrency: 1}))
	waitUntil(t, time.Minute, func() bool { return second.Stats().Acked == 3 })
	require.Len(t, seen, 3, "every message came back, the handled one included")
	if n, _ := b.depth(t, b.queue); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
}
