package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
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

// ferry parked drop removes parked messages for good: the parked copies of
// the inbox conflicts a person resolved (and only those: an open conflict's
// copy and a message refused for another reason stay), then by id and
// reason, then all; a dry run drops nothing; each run that finds nothing
// says so once and exits 5.
func TestParkedDropRemovesTheCopiesOfResolvedConflicts(t *testing.T) {
	t.Parallel()
	ib := setupInbox(t, "sqlite")
	in := ib.inbox(t, "points-award")
	p := &parkedQueue{ctx: testsvc.Context(t, 5*time.Minute), conn: testsvc.RabbitMQ(t),
		queue: testsvc.Name("ferry_pd_"), rk: testsvc.Name("ferry.rk.")}
	testsvc.DeleteRabbitMQQueue(t, p.queue)
	testsvc.DeleteRabbitMQQueue(t, p.queue+".parking")
	for i := 1; i <= 3; i++ {
		_, err := ib.award(t, in, fmt.Sprintf("order:%d:paid", i), fmt.Sprintf("applied-%d", i), 10)
		require.NoError(t, err)
	}
	// The consumer: orders 1 to 3 come again with another amount (three
	// conflicts, parked); order 4's account is missing (parked).
	handle := func(_ context.Context, d *ferrybroker.Delivery) error {
		var body struct{ Order int }
		if err := json.Unmarshal(d.Payload, &body); err != nil {
			return ferrytype.Poison(err)
		}
		if body.Order == 4 {
			return ferrytype.Poison(errors.New("points account missing"))
		}
		_, err := ib.award(t, in, fmt.Sprintf("order:%d:paid", body.Order), d.MessageID, 99)
		return err
	}
	c, err := ferryamqp.NewConsumer(p.conn, p.queue, handle, p.config())
	require.NoError(t, err)
	require.NoError(t, c.Start(p.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	ch, err := p.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	for i := 1; i <= 4; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(p.ctx, "amq.topic", p.rk, true, false, amqp.Publishing{
			MessageId: fmt.Sprintf("%s-evt-%d", p.queue, i), Type: "OrderPaid", DeliveryMode: amqp.Persistent,
			Body: []byte(fmt.Sprintf(`{"order":%d}`, i))})
		require.NoError(t, err)
		ok, err := dc.WaitContext(p.ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	testsvc.WaitFor(t, time.Minute, func() bool { return c.Stats().Parked == 4 }, nil)
	require.NoError(t, c.Stop(p.ctx))
	parking := p.queue + ".parking"
	drop := func(args ...string) (int, string, string) {
		t.Helper()
		return ferryCLI(t, append(append([]string{"parked", "drop", "--broker-url", testsvc.URL(testsvc.EnvAMQP),
			"--queue", p.queue}, args...), ib.args...)...)
	}

	// Orders 1 and 2's conflicts are resolved; order 3's stays open.
	list, err := ferryadmin.ListConflicts(p.ctx, ib.store, ferryadmin.ConflictListOptions{Consumer: "points-award"})
	require.NoError(t, err)
	require.Len(t, list.Conflicts, 3)
	var resolve []string
	for _, cf := range list.Conflicts {
		if cf.Key != "order:3:paid" {
			resolve = append(resolve, strconv.FormatInt(cf.ID, 10))
		}
	}
	code, out, errOut := ib.cli(t, append([]string{"conflicts", "resolve", "--decision", "keep-stored", "--note", "producer bug, INC-9"},
		resolve...)...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "ferry parked drop --resolved-conflicts", "resolving says where the parked copies are")

	code, out, errOut = drop("--resolved-conflicts", "--dry-run")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("would drop 2 messages from %s (4 examined of 4 parked; 2 kept: ", parking))
	require.Contains(t, out, "nothing dropped")
	require.Contains(t, out, p.queue+"-evt-1")
	require.Contains(t, out, p.queue+"-evt-2")
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, parking) == 4 }, nil)

	code, out, errOut = drop("--resolved-conflicts", "--json")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	var res ferryamqp.DropResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, [3]int{4, 2, 2}, [3]int{res.Examined, res.Dropped, res.Kept})
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, parking) == 2 }, nil)

	code, out, errOut = drop("--resolved-conflicts")
	require.Equal(t, exitNoMatch, code, "%s\n%s", out, errOut)
	require.Empty(t, out)
	require.Equal(t, fmt.Sprintf("ferry: no parked message in %s matches --resolved-conflicts: nothing to drop (2 examined)\n",
		parking), errOut, "one line")

	code, _, errOut = drop()
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "select messages with --id, --reason-contains or --resolved-conflicts, or pass --all")
	code, _, errOut = drop("--all", "--id", "x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give it alone")

	code, out, errOut = drop("--id", p.queue+"-evt-4", "--reason-contains", "points account missing")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("dropped 1 message from %s for good (2 examined of 2 parked; 1 kept: ", parking))
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, parking) == 1 }, nil)

	code, out, errOut = drop("--all")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "dropped 1 message")
	testsvc.WaitFor(t, time.Minute, func() bool { return p.depth(t, parking) == 0 }, nil)
	code, _, errOut = drop("--all")
	require.Equal(t, exitNoMatch, code)
	require.Equal(t, fmt.Sprintf("ferry: nothing to drop: parking queue %s is empty\n", parking), errOut)
}
