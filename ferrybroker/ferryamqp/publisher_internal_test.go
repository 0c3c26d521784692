package ferryamqp

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// rawConn is a connection whose socket the test can cut without any AMQP
// close handshake, as a crash or a network failure would.
type rawConn struct {
	*amqp.Connection
	mu   sync.Mutex
	sock net.Conn
}

func (c *rawConn) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.sock.Close()
}

// dialRaw dials the shared test server; dialRawURL the server at amqpURL.
func dialRaw(t testing.TB) *rawConn {
	t.Helper()
	ferryamqptest.UseRabbitMQ(t)
	return dialRawURL(t, testenv.URL(testenv.EnvAMQP))
}

func dialRawURL(t testing.TB, amqpURL string) *rawConn {
	t.Helper()
	rc := &rawConn{}
	conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(5*time.Second)(network, addr)
		rc.mu.Lock()
		rc.sock = c
		rc.mu.Unlock()
		return c, err
	}})
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	rc.Connection = conn
	t.Cleanup(func() { _ = conn.Close() })
	return rc
}

func testMsgs(n int, route func(i int) string) []ferrytype.Message {
	out := make([]ferrytype.Message, n)
	prefix := testenv.Name("evt-")
	for i := range out {
		out[i] = ferrytype.Message{
			ID: fmt.Sprintf("%s-%d", prefix, i), AggregateType: "order", AggregateID: fmt.Sprint(i % 13),
			Sequence: int64(i + 1), Type: "OrderPaid", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			Headers:     map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			Destination: route(i), Attempt: 1, CreatedAt: time.Now(),
		}
	}
	return out
}

func ids(ds []amqp.Delivery) map[string]int {
	m := map[string]int{}
	for _, d := range ds {
		m[d.MessageId]++
	}
	return m
}

// A window mixing routable and unbound routing keys, from concurrent
// callers: every returned message is reported returned, none confirmed;
// every routed one is confirmed and in the queue.
func TestPublishUnroutableMixIsReturnedNeverConfirmed(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	p, err := New(testenv.Context(t, 10*time.Second), dialRaw(t).Connection, &Config{Window: 500, Channels: 2})
	require.NoError(t, err)
	defer p.Close()
	unbound := testenv.Name("ferry.unbound.")
	ctx := testenv.Context(t, time.Minute)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		routed   = map[string]bool{}
		returned int
	)
	for g := 0; g < 4; g++ {
		msgs := testMsgs(1000, func(int) string {
			if rand.IntN(3) == 0 {
				return unbound
			}
			return q.RoutingKey
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := p.Publish(ctx, msgs)
			mu.Lock()
			defer mu.Unlock()
			for i, r := range res {
				if msgs[i].Destination == unbound {
					require.Equal(t, ferrytype.OutcomeReturned, r.Outcome, "message %d to an unbound key: %v", i, r.Err)
					require.ErrorContains(t, r.Err, "NO_ROUTE")
					returned++
					continue
				}
				require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "message %d: %v", i, r.Err)
				routed[msgs[i].ID] = true
			}
		}()
	}
	wg.Wait()
	require.Positive(t, returned)
	got := ids(ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, len(routed), time.Minute))
	require.Len(t, got, len(routed))
	for id := range routed {
		require.Equal(t, 1, got[id], "confirmed message %s", id)
	}
}

// The connection dies mid-window, with hundreds of confirms pending:
// amqp091-go then nacks every pending confirm itself. None of those may be
// reported rejected, let alone confirmed: they are unknown. Every message
// reported confirmed is in the queue.
func TestConnectionCutMidWindowIsUnknownNeverConfirmed(t *testing.T) {
	// serial: it cuts the connection mid-window and bounds how long the next publish takes.
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	rc := dialRaw(t)
	cut := make(chan struct{})
	var once sync.Once
	p, err := New(testenv.Context(t, 10*time.Second), rc.Connection, &Config{Window: 1000, Channels: 1,
		testAfterPublish: func(n int64) {
			if n == 1500 {
				once.Do(func() { close(cut) })
			}
		}})
	require.NoError(t, err)
	defer p.Close()
	go func() { <-cut; rc.cut() }()
	msgs := testMsgs(4000, func(int) string { return q.RoutingKey })
	res := p.Publish(testenv.Context(t, time.Minute), msgs)
	confirmed := map[string]bool{}
	unknown := 0
	for i, r := range res {
		switch r.Outcome {
		case ferrytype.OutcomeConfirmed:
			confirmed[msgs[i].ID] = true
		case ferrytype.OutcomeUnknown:
			unknown++
			require.Error(t, r.Err)
		default:
			t.Fatalf("message %d: %s (%v): a lost connection is unknown", i, r.Outcome, r.Err)
		}
	}
	require.Positive(t, unknown)
	got := ids(ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, len(confirmed), time.Minute))
	for id := range confirmed {
		require.Equal(t, 1, got[id], "confirmed message %s is not in the queue", id)
	}
	// Unknown means unknown: some of those are stored all the same.
	t.Logf("confirmed %d, unknown %d, of which stored anyway %d", len(confirmed), unknown, len(got)-len(confirmed))
	// Publishing on the dead connection is unknown at once.
	start := time.Now()
	for _, r := range p.Publish(testenv.Context(t, time.Minute), msgs[:3]) {
		require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
		require.ErrorIs(t, r.Err, ErrNotConnected)
	}
	require.Less(t, time.Since(start), 5*time.Second)
	require.Error(t, p.Check(context.Background()))
}

// A real basic.nack (a quorum queue at its length limit with
// overflow=reject-publish) is reported rejected; nothing is unknown.
func TestBrokerNackIsRejected(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", amqp.Table{"x-max-length": int64(10), "x-overflow": "reject-publish"})
	p, err := New(testenv.Context(t, 10*time.Second), dialRaw(t).Connection, nil)
	require.NoError(t, err)
	defer p.Close()
	msgs := testMsgs(30, func(int) string { return q.RoutingKey })
	confirmed, rejected := map[string]bool{}, 0
	for _, m := range msgs {
		r := p.Publish(testenv.Context(t, time.Minute), []ferrytype.Message{m})[0]
		switch r.Outcome {
		case ferrytype.OutcomeConfirmed:
			confirmed[m.ID] = true
		case ferrytype.OutcomeRejected:
			require.ErrorContains(t, r.Err, "nack")
			rejected++
		default:
			t.Fatalf("%s: %s (%v)", m.ID, r.Outcome, r.Err)
		}
	}
	// A quorum queue enforces its limit once it is exceeded: it may take
	// one message more.
	require.GreaterOrEqual(t, len(confirmed), 10)
	require.LessOrEqual(t, len(confirmed), 11)
	require.Equal(t, 30-len(confirmed), rejected)
	got := ids(ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, len(confirmed), time.Minute))
	require.Len(t, got, len(confirmed))
	for id := range confirmed {
		require.Equal(t, 1, got[id])
	}
}

// An event naming an exchange that does not exist is returned as
// unroutable without being published: RabbitMQ would close the channel,
// turning the other publishes in flight on it into unknown outcomes.
func TestMissingExchangeIsReturnedAndOthersConfirmed(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	p, err := New(testenv.Context(t, 10*time.Second), dialRaw(t).Connection, &Config{Channels: 1})
	require.NoError(t, err)
	defer p.Close()
	missing := testenv.Name("ferry_no_such_exchange_")
	msgs := testMsgs(200, func(int) string { return q.RoutingKey })
	for i := range msgs {
		if i%10 == 0 {
			msgs[i].Exchange = missing
		}
	}
	for i, r := range p.Publish(testenv.Context(t, time.Minute), msgs) {
		if i%10 == 0 {
			require.Equal(t, ferrytype.OutcomeReturned, r.Outcome, "message %d", i)
			require.ErrorContains(t, r.Err, "exchange "+missing+" does not exist")
			continue
		}
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "message %d: %v", i, r.Err)
	}
	require.Equal(t, int64(180), p.Published())
}

// Every message carries what a consumer needs, in AMQP's own fields
// where there is one.
func TestPublishedMessageProperties(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	p, err := New(testenv.Context(t, 10*time.Second), conn, nil)
	require.NoError(t, err)
	defer p.Close()
	m := testMsgs(1, func(int) string { return q.RoutingKey })[0]
	m.Headers["Ferry-Event-Id"] = "spoofed"
	require.Equal(t, ferrytype.OutcomeConfirmed, p.Publish(testenv.Context(t, time.Minute), []ferrytype.Message{m})[0].Outcome)
	got := ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, 1, time.Minute)
	require.Len(t, got, 1)
	d := got[0]
	require.Equal(t, m.ID, d.MessageId)
	require.Equal(t, "OrderPaid", d.Type)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, m.CreatedAt.Unix(), d.Timestamp.Unix())
	require.Equal(t, "amq.topic", d.Exchange)
	require.Equal(t, q.RoutingKey, d.RoutingKey)
	require.Equal(t, m.Headers["traceparent"], d.Headers["traceparent"])
	require.Equal(t, m.ID, d.Headers[ferrybroker.HeaderEventID], "metadata headers win over the event's own")
	require.Equal(t, "0", d.Headers[ferrybroker.HeaderAggregateID])
	require.Equal(t, "1", d.Headers[ferrybroker.HeaderSequence])
	require.Contains(t, d.Headers, HeaderPublishTag)
}

func TestTopology(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	ctx := testenv.Context(t, time.Minute)
	t.Run("MissingExchangeIsNamed", func(t *testing.T) {
		name := testenv.Name("ferry_orders_")
		_, err := New(ctx, conn, &Config{Exchange: name})
		require.EqualError(t, err, "exchange "+name+" does not exist: declare it, or let ferry declare it (Declare, --declare)")
	})
	t.Run("MissingQueueIsNamed", func(t *testing.T) {
		name := testenv.Name("ferry_q_")
		_, err := New(ctx, conn, &Config{Topology: Topology{Queues: []Queue{{Name: name}}}})
		require.EqualError(t, err, "queue "+name+" does not exist: declare it, or let ferry declare it (Declare, --declare)")
	})
	t.Run("DeclareThenVerify", func(t *testing.T) {
		ex, ae, queue := testenv.Name("ferry_ex_"), testenv.Name("ferry_ae_"), testenv.Name("ferry_q_")
		ferryamqptest.DeleteRabbitMQExchange(t, ex)
		ferryamqptest.DeleteRabbitMQExchange(t, ae)
		ferryamqptest.DeleteRabbitMQQueue(t, queue)
		ferryamqptest.DeleteRabbitMQQueue(t, queue+".parking")
		ferryamqptest.DeleteRabbitMQQueue(t, queue+".unrouted")
		cfg := &Config{
			Exchange: ex, Declare: true,
			Topology: Topology{
				Exchanges: []Exchange{{Name: ex, AlternateExchange: ae}, {Name: ae, Kind: "fanout"}},
				Queues:    []Queue{{Name: queue}, {Name: queue + ".unrouted", NoParking: true}},
				Bindings: []Binding{{Queue: queue, RoutingKey: "orders.#"},
					{Queue: queue + ".unrouted", Exchange: ae}},
			},
		}
		p, err := New(ctx, conn, cfg)
		require.NoError(t, err)
		msgs := testMsgs(2, func(i int) string { return []string{"orders.paid", "unmatched"}[i] })
		for _, r := range p.Publish(ctx, msgs) {
			// The alternate exchange takes the unmatched one: no return.
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
		}
		require.NoError(t, p.Close())
		require.Len(t, ferryamqptest.ReadRabbitMQQueue(t, conn, queue, 1, time.Minute), 1)
		require.Len(t, ferryamqptest.ReadRabbitMQQueue(t, conn, queue+".unrouted", 1, time.Minute), 1)

		cfg.Declare = false
		p, err = New(ctx, conn, cfg)
		require.NoError(t, err, "the declared topology verifies")
		require.NoError(t, p.Close())

		cfg.Declare = true
		cfg.Topology.Queues[0].Type = QueueClassic
		cfg.Topology.Queues[0].DeliveryLimit = -1
		_, err = New(ctx, conn, cfg)
		require.ErrorContains(t, err, "exists with other settings")
		require.ErrorContains(t, err, "PRECONDITION_FAILED")
	})
	t.Run("QuorumQueueArguments", func(t *testing.T) {
		queue := testenv.Name("ferry_q_")
		ferryamqptest.DeleteRabbitMQQueue(t, queue)
		ferryamqptest.DeleteRabbitMQQueue(t, queue+".parking")
		p, err := New(ctx, conn, &Config{Declare: true, Topology: Topology{Queues: []Queue{{Name: queue, DeliveryLimit: 3}}}})
		require.NoError(t, err)
		require.NoError(t, p.Close())
		// Declaring again with the arguments ferry uses succeeds; any other
		// delivery limit would fail with PRECONDITION_FAILED.
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
			"x-queue-type": "quorum", "x-delivery-limit": int64(3), "x-dead-letter-exchange": "",
			"x-dead-letter-routing-key": queue + ".parking", "x-dead-letter-strategy": "at-least-once",
			"x-overflow": "reject-publish",
		})
		require.NoError(t, err)
	})
	t.Run("InvalidConfigNamesTheField", func(t *testing.T) {
		_, err := New(ctx, conn, &Config{Window: -1})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		require.ErrorContains(t, err, "Config.Window")
		_, err = New(ctx, conn, &Config{Topology: Topology{Queues: []Queue{{Name: "q", Type: QueueClassic, DeliveryLimit: 5}}}})
		require.ErrorContains(t, err, "DeliveryLimit needs a quorum queue")
	})
}

func TestRecoveryEnabledConnectionIsRefused(t *testing.T) {
	t.Parallel()
	ferryamqptest.UseRabbitMQ(t)
	conn, err := amqp.DialConfig(testenv.URL(testenv.EnvAMQP), amqp.Config{Recovery: &amqp.Recovery{}})
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	defer conn.Close()
	_, err = New(context.Background(), conn, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "automatic recovery")
}

func TestDialRedactsPassword(t *testing.T) {
	t.Parallel()
	_, err := Dial(context.Background(), "amqp://user:s3cr3tpw@127.0.0.1:1/vhost", &Config{Connection: ConnectionConfig{DialTimeout: time.Second}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "s3cr3tpw")
	_, err = Dial(context.Background(), "http://user:s3cr3tpw@127.0.0.1:1/", nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.NotContains(t, err.Error(), "s3cr3tpw")
}

// A publisher that owns its connection reconnects after losing it; a
// publish during the outage is unknown, never lost nor confirmed.
func TestDialReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	ctx := testenv.Context(t, time.Minute)
	p, err := Dial(ctx, testenv.URL(testenv.EnvAMQP), &Config{
		Connection: ConnectionConfig{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}})
	require.NoError(t, err)
	defer p.Close()
	msgs := testMsgs(3, func(int) string { return q.RoutingKey })
	require.Equal(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, msgs[:1])[0].Outcome)

	first := p.link.connection()
	require.NoError(t, first.Close())
	waitUntil(t, 30*time.Second, func() bool { c := p.link.connection(); return c != nil && c != first })
	require.NoError(t, p.Check(ctx))
	for _, r := range p.Publish(ctx, msgs[1:]) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
	}
	require.Len(t, ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, 3, time.Minute), 3)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "closing twice is safe")
	r := p.Publish(ctx, msgs[:1])[0]
	require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
	require.True(t, first.IsClosed())
	require.True(t, strings.Contains(r.Err.Error(), "closed"), r.Err)
}

func waitUntil(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, d, cond, nil)
}

// While RabbitMQ blocks the connection (a resource alarm) it stops reading
// from it, and a publish can hang in a socket write that ignores
// contexts. RabbitMQ says so (connection.blocked) once the connection
// publishes during the alarm. Publish returns when its context ends, every
// message unknown; once the block is known nothing more is written, every
// message is not sent and Connected is false; once the alarm clears the
// publisher is connected and publishes again. So on a connection the
// caller passed, and on one the publisher dialled, whose writes are
// batched (batchConn).
func TestBlockedConnectionIsUnknownAndReturnsOnTime(t *testing.T) {
	// serial: it sets a memory alarm on the tests' own RabbitMQ node,
	// which one test at a time holds (never on the shared server).
	testenv.Slow(t, "a RabbitMQ memory alarm")
	node := ferryamqptest.DisruptRabbitMQ(t)
	conn := node.Conn(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	borrowed, err := New(testenv.Context(t, 10*time.Second), dialRawURL(t, node.URL).Connection, nil)
	require.NoError(t, err)
	defer borrowed.Close()
	// A publisher that dialled its connection writes through batchConn.
	dialled, err := Dial(testenv.Context(t, 10*time.Second), node.URL, nil)
	require.NoError(t, err)
	defer dialled.Close()
	ctx := testenv.Context(t, 2*time.Minute)
	pubs := []struct {
		name string
		p    *Publisher
		msgs []ferrytype.Message
	}{
		{"borrowed connection", borrowed, testMsgs(30, func(int) string { return q.RoutingKey })},
		{"dialled connection", dialled, testMsgs(30, func(int) string { return q.RoutingKey })},
	}
	for _, u := range pubs {
		require.Equal(t, ferrytype.OutcomeConfirmed, u.p.Publish(ctx, u.msgs[:1])[0].Outcome, u.name)
	}

	orig := strings.TrimSpace(node.Ctl(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	restore := func() {
		args := []string{"set_vm_memory_high_watermark", orig}
		if strings.HasPrefix(orig, "{absolute,") {
			args = []string{"set_vm_memory_high_watermark", "absolute", strings.TrimSuffix(strings.TrimPrefix(orig, "{absolute,"), "}")}
		}
		node.Ctl(t, args...)
	}
	t.Cleanup(restore)
	node.Ctl(t, "set_vm_memory_high_watermark", "0.0000001")
	waitUntil(t, 30*time.Second, func() bool {
		return strings.Contains(node.Ctl(t, "eval", "rabbit_alarm:get_alarms()."), "memory")
	})

	publishBlocked := func(p *Publisher, batch []ferrytype.Message, known bool) {
		t.Helper()
		pubCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		for _, r := range p.Publish(pubCtx, batch) {
			require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
			require.Error(t, r.Err)
			if known {
				require.ErrorIs(t, r.Err, ferrytype.ErrNotSent)
			}
		}
		require.Less(t, time.Since(start), 10*time.Second, "Publish returns when its context ends (1 s), not when the alarm does")
	}
	for _, u := range pubs {
		// The first publish during the alarm gets the connection blocked.
		publishBlocked(u.p, u.msgs[1:10], false)
		waitUntil(t, 30*time.Second, func() bool {
			err := u.p.Check(ctx)
			return err != nil && strings.Contains(err.Error(), "blocked")
		})
		require.False(t, u.p.Connected(), u.name)
		require.ErrorContains(t, u.p.Disconnected(), "blocked", u.name)
		before := u.p.Published()
		publishBlocked(u.p, u.msgs[10:20], true)
		require.Equal(t, before, u.p.Published(), "%s: nothing is written while the connection is known blocked", u.name)
	}

	restore()
	for _, u := range pubs {
		waitUntil(t, 30*time.Second, func() bool { return u.p.Check(ctx) == nil })
		require.True(t, u.p.Connected(), u.name)
		for _, r := range u.p.Publish(ctx, u.msgs[20:]) {
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%s: %v", u.name, r.Err)
		}
	}
}
