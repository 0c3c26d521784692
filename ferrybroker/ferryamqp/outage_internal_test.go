package ferryamqp

import (
	"context"
	"io"
	"net"
	"strconv"
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

// proxy forwards TCP connections to RabbitMQ until stopped: stopping it
// cuts every connection through it and refuses new ones, an outage that
// disturbs nobody else using the server.
type proxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func startProxy(t testing.TB) *proxy {
	t.Helper()
	u, err := amqp.ParseURI(testenv.URL(testenv.EnvAMQP))
	require.NoError(t, err)
	p := &proxy{t: t, target: net.JoinHostPort(u.Host, strconv.Itoa(u.Port))}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.stop)
	return p
}

// url is the test server's URL with the proxy's address.
func (p *proxy) url() string {
	u, _ := amqp.ParseURI(testenv.URL(testenv.EnvAMQP))
	return "amqp://" + u.Username + ":" + u.Password + "@" + p.addr + "/"
}

func (p *proxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// stop cuts every connection and refuses new ones.
func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restart listens again on the same address.
func (p *proxy) restart() { p.listen(p.addr) }

// During an outage a Publish returns unknown within ReconnectWait,
// sending nothing, however often it is called; once the server is back
// the publisher has reconnected and publishes again.
func TestDialPublishDuringOutageIsPromptlyUnknown(t *testing.T) {
	// serial: it cuts the network and bounds how long a publish waits.
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	px := startProxy(t)
	ctx := testenv.Context(t, 2*time.Minute)
	p, err := Dial(ctx, px.url(), &Config{ReconnectWait: 300 * time.Millisecond,
		Connection: ConnectionConfig{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}})
	require.NoError(t, err)
	defer p.Close()
	msgs := testMsgs(30, func(int) string { return q.RoutingKey })
	for _, r := range p.Publish(ctx, msgs[:10]) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome)
	}

	px.stop()
	// Check can fail on the dead channel before the link has noticed the
	// connection is gone: wait for both.
	waitUntil(t, 30*time.Second, func() bool { return p.Check(ctx) != nil && !p.Connected() })
	require.ErrorIs(t, p.Disconnected(), ErrNotConnected)
	before := p.Published()
	for i := 0; i < 5; i++ {
		start := time.Now()
		for _, r := range p.Publish(ctx, msgs[10:20]) {
			require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
			require.ErrorIs(t, r.Err, ErrNotConnected)
			require.ErrorIs(t, r.Err, ferrytype.ErrNotSent)
		}
		took := time.Since(start)
		require.GreaterOrEqual(t, took, 250*time.Millisecond, "waits for the connection, no hot loop")
		require.Less(t, took, 10*time.Second, "then reports unknown, well before the context ends")
	}
	require.Equal(t, before, p.Published(), "nothing is sent during the outage")

	px.restart()
	waitUntil(t, 30*time.Second, func() bool { return p.Check(ctx) == nil })
	for _, r := range p.Publish(ctx, msgs[20:]) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
	}
	got := ids(ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, 20, time.Minute))
	for _, m := range append(msgs[:10:10], msgs[20:]...) {
		require.Equal(t, 1, got[m.ID])
	}
}

// A consumer that owns its connection loses it mid-stream, with handlers
// in progress, and reconnects: deliveries of the old channel are never
// acked on the new one (their acks fail), RabbitMQ redelivers them, and
// every message is handled.
func TestDialConsumerReconnectsAndLosesNothing(t *testing.T) {
	// serial: it cuts the network under a consumer.
	b := setupConsumer(t)
	msgs := b.publish(t, 300)
	px := startProxy(t)
	var (
		mu        sync.Mutex
		committed = map[string]int{}
		handled   atomic.Int64
	)
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var stuck atomic.Int64
	c, err := DialConsumer(px.url(), b.queue, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if handled.Add(1) > 100 && stuck.Add(1) <= 3 {
			<-gate // in progress when the connection dies
		}
		mu.Lock()
		committed[d.MessageID]++
		mu.Unlock()
		return nil
	}, b.config(ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 4}, Connection: ConnectionConfig{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}}))
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	waitUntil(t, time.Minute, func() bool { return stuck.Load() >= 3 })
	px.stop()
	release()
	px.restart()
	waitUntil(t, 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(committed) == len(msgs)
	})
	waitUntil(t, time.Minute, func() bool { n, _ := b.depth(t, b.queue); return n == 0 })
	require.NoError(t, c.Stop(b.ctx))
	st := c.Stats()
	require.Positive(t, st.Left, "the acks of the old channel failed: %+v", st)
	require.Equal(t, int64(len(msgs)), int64(len(committed)))
}
