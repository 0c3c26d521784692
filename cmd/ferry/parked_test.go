package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// parkedQueue is a fresh consumer queue bound to amq.topic whose consumer
// parked n messages (its handler refused them all), through the real
// consumer path.
type parkedQueue struct {
	ctx   context.Context
	conn  *amqp.Connection
	queue string
	rk    string
	ids   []string
}

func setupParked(t *testing.T, n int) *parkedQueue {
	t.Helper()
	p := &parkedQueue{ctx: testsvc.Context(t, 5*time.Minute), conn: testsvc.RabbitMQ(t),
		queue: testsvc.Name("ferry_pq_"), rk: testsvc.Name("ferry.rk.")}
	testsvc.DeleteRabbitMQQueue(t, p.queue)
	testsvc.DeleteRabbitMQQueue(t, p.queue+".parking")
	refuse := func(context.Context, *ferrybroker.Delivery) error {
		return ferrytype.Poison(errors.New("points account missing"))
	}
	c, err := ferryamqp.NewConsumer(p.conn, p.queue, refuse, p.config())
	require.NoError(t, err)
	require.NoError(t, c.Start(p.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	ch, err := p.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	for i := range n {
		id := fmt.Sprintf("%s-evt-%d", p.queue, i)
		p.ids = append(p.ids, id)
		dc, err := ch.PublishWithDeferredConfirmWithContext(p.ctx, "amq.topic", p.rk, true, false, amqp.Publishing{
			MessageId: id, Type: "OrderPaid", ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Body: []byte(fmt.Sprintf(`{"order":%d}`, i))})
		require.NoError(t, err)
		ok, err := dc.WaitContext(p.ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	testsvc.WaitFor(t, time.Minute, func() bool { return c.Stats().Parked == int64(n) }, nil)
	require.NoError(t, c.Stop(p.ctx))
	return p
}

func (p *parkedQueue) config() *ferryamqp.ConsumerConfig {
	return &ferryamqp.ConsumerConfig{Declare: true,
		Topology: ferryamqp.Topology{Bindings: []ferryamqp.Binding{{Queue: p.queue, Exchange: "amq.topic", RoutingKey: p.rk}}}}
}

func (p *parkedQueue) depth(t *testing.T, queue string) int {
	t.Helper()
	ch, err := p.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

func (p *parkedQueue) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return ferryCLI(t, append(append([]string{"parked"}, args...), "--broker-url", testsvc.URL(testsvc.EnvAMQP),
		"--queue", p.queue)...)
}

// ferry parked list shows parked messages and leaves them; replay
// --dry-run moves nothing; replay --max moves that many; a fixed consumer
// then handles each message once; a run with nothing left exits 5.
func TestParkedCLI(t *testing.T) {
	t.Parallel()
	p := setupParked(t, 6)
	code, out, errOut := p.cli(t, "list", "--limit", "2")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("parking queue %s.parking: 6 messages, the first 2:", p.queue))
	require.Contains(t, out, "points account missing")
	require.Contains(t, out, p.rk)

	code, out, errOut = p.cli(t, "list", "--json")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	var list struct {
		Depth    int `json:"depth"`
		Messages []struct {
			MessageID string `json:"message_id"`
			Source    string `json:"source"`
			Payload   string `json:"payload"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, 6, list.Depth)
	require.Len(t, list.Messages, 6)
	require.Equal(t, p.queue, list.Messages[0].Source)
	require.Contains(t, list.Messages[0].Payload, `"order"`)

	code, out, errOut = p.cli(t, "replay", "--dry-run")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("would replay 6 messages from %s.parking to %s", p.queue, p.queue))
	require.Contains(t, out, "nothing moved")
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, p.queue+".parking") == 6 }, nil)
	require.Zero(t, p.depth(t, p.queue))

	code, out, errOut = p.cli(t, "replay", "--max", "2", "--batch", "1")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "replayed 2 messages")
	require.Contains(t, errOut, "ferry: replay: 1 replayed", "progress on stderr")
	require.Equal(t, 2, p.depth(t, p.queue), "confirmed before the command returned")
	// Acks are asynchronous: the parking queue's count follows.
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, p.queue+".parking") == 4 }, nil)

	// The cause is fixed: a consumer that handles everything.
	var mu sync.Mutex
	handled := map[string]int{}
	c, err := ferryamqp.NewConsumer(p.conn, p.queue, func(_ context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		handled[d.MessageID]++
		return nil
	}, p.config())
	require.NoError(t, err)
	require.NoError(t, c.Start(p.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	code, out, errOut = p.cli(t, "replay", "--json")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	var res ferryamqp.ReplayResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, 4, res.Replayed)
	require.Equal(t, 4, res.Depth)
	testsvc.WaitFor(t, time.Minute, func() bool { return c.Stats().Acked == 6 }, nil)
	require.NoError(t, c.Stop(p.ctx))
	mu.Lock()
	for _, id := range p.ids {
		require.Equal(t, 1, handled[id], "message %s", id)
	}
	mu.Unlock()
	require.Equal(t, int64(6), c.Stats().Delivered)

	code, out, errOut = p.cli(t, "replay")
	require.Equal(t, exitNoMatch, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "nothing to replay")
	code, out, _ = p.cli(t, "list")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "is empty")
}

func TestParkedCLIErrors(t *testing.T) {
	t.Parallel()
	code, _, errOut := ferryCLI(t, "parked", "replay", "--broker-url", "nats://127.0.0.1:4222", "--queue", "points")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "works on RabbitMQ")
	code, _, errOut = ferryCLI(t, "parked", "replay", "--broker-url", "amqp://127.0.0.1:5672/")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--queue is required")
	code, _, errOut = ferryCLI(t, "parked", "list", "--broker-url", "amqp://127.0.0.1:5672/")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "name the parking queue")
	code, _, errOut = ferryCLI(t, "parked", "replay", "--broker-url", "amqp://127.0.0.1:5672/", "--queue", "q", "--max", "0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--max")
	code, _, errOut = ferryCLI(t, "parked", "list", "--broker-url", "amqp://u:s3cr3t@127.0.0.1:99999/", "--queue", "q")
	require.Equal(t, exitUsage, code, errOut)
	require.NotContains(t, errOut, "s3cr3t")

	testsvc.RabbitMQ(t)
	wrong, err := url.Parse(testsvc.URL(testsvc.EnvAMQP))
	require.NoError(t, err)
	wrong.User = url.UserPassword(wrong.User.Username(), "wrong3tpw")
	code, _, errOut = ferryCLI(t, "parked", "list", "--broker-url", wrong.String(), "--queue", "q")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "RabbitMQ refused access (403)")
	require.NotContains(t, errOut, "3tpw")
	missing := testsvc.Name("ferry_missing_")
	code, _, errOut = ferryCLI(t, "parked", "replay", "--broker-url", testsvc.URL(testsvc.EnvAMQP), "--queue", missing)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "queue "+missing+" does not exist")
}
