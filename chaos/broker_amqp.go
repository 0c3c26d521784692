package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/examples/shop"
)

// amqpBroker is RabbitMQ with a virtual host of the run's own, so that the
// shop's fixed queue names never meet another run's.
type amqpBroker struct {
	vhost           string
	direct, proxied string
	host            string
	node            string // Options.AMQPNode: rabbitmqctl -n; empty, rabbitmqctl's default node
	admin           vhostAdmin
	cluster         *amqpCluster // Options.AMQPCluster; nil: a single node

	mu   sync.Mutex // guards conn and ch, opened by the first publishPaid
	conn *amqp.Connection
	ch   *amqp.Channel

	// stopped is set from a stop_app until the start_app after it
	// succeeded: heal starts the application only then (each rabbitmqctl
	// run boots an Erlang VM, a second of CPU).
	stopped atomic.Bool
	// count is the connection ready counts on, dialled again after a
	// failure; only the settle's loop uses it.
	count *amqp.Connection
}

// rabbitmqctl runs rabbitmqctl (FERRY_TEST_RABBITMQCTL, default
// "rabbitmqctl") with args on the node named node, or on its default
// node when node is empty.
func rabbitmqctl(ctx context.Context, node string, args ...string) (string, error) {
	path := os.Getenv("FERRY_TEST_RABBITMQCTL")
	if path == "" {
		path = "rabbitmqctl"
	}
	if node != "" {
		args = append([]string{"-n", node}, args...)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func newAMQPBroker(ctx context.Context, direct, node string, px *proxies, suffix string) (*amqpBroker, error) {
	u, err := url.Parse(direct)
	if err != nil {
		return nil, err
	}
	b := &amqpBroker{vhost: "chaos_" + suffix, host: u.Host, node: node, admin: newVhostAdmin(u, node)}
	if err := b.admin.add(ctx, b.vhost); err != nil {
		return nil, err
	}
	addr, err := px.add("broker", u.Host)
	if err != nil {
		b.close()
		return nil, err
	}
	with := func(host string) string {
		v := *u
		v.Host, v.Path, v.RawPath = host, "/"+b.vhost, ""
		return v.String()
	}
	b.direct, b.proxied = with(u.Host), with(addr)
	if err := shop.SetupAMQP(ctx, b.direct); err != nil {
		b.close()
		return nil, fmt.Errorf("declare the shop's topology: %w", err)
	}
	return b, nil
}

func (b *amqpBroker) url() string         { return b.proxied }
func (b *amqpBroker) relayArgs() []string { return nil }

// queues returns the messages (ready and unacknowledged) of each queue.
func (b *amqpBroker) queues(ctx context.Context) (map[string]int, error) {
	out, err := rabbitmqctl(ctx, b.node, "list_queues", "-p", b.vhost, "--no-table-headers", "--quiet", "name", "messages")
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		m[f[0]] = n
	}
	return m, sc.Err()
}

func (b *amqpBroker) quiet(ctx context.Context, final bool) (bool, error) {
	// The ready messages, over AMQP (a passive declare each). Only the
	// final check asks rabbitmqctl, whose count also holds the messages
	// consumers have not acknowledged yet, and each of whose runs boots an
	// Erlang VM (a second of CPU).
	if ready, err := b.ready(); err != nil || ready > 0 || !final {
		return err == nil && ready == 0, err
	}
	q, err := b.queues(ctx)
	if err != nil {
		return false, err
	}
	// A queue missing from the listing (not yet recovered after a
	// restart) is not an empty one.
	points, okP := q["points"]
	sms, okS := q["sms"]
	return okP && okS && points == 0 && sms == 0, nil
}

func (b *amqpBroker) pending(ctx context.Context) string {
	ready, err := b.ready()
	if err != nil {
		return "ready messages unknown: " + err.Error()
	}
	if ready > 0 {
		return fmt.Sprintf("%d messages ready in points and sms", ready)
	}
	q, err := b.queues(ctx)
	if err != nil {
		return "no message ready; the unacknowledged unknown: " + err.Error()
	}
	return fmt.Sprintf("messages, ready or unacknowledged: points %d, sms %d", q["points"], q["sms"])
}

// ready returns the messages of the points and sms queues that no
// consumer holds (a queue missing, as after a restart, is an error).
func (b *amqpBroker) ready() (int, error) {
	if b.count == nil || b.count.IsClosed() {
		conn, err := amqp.DialConfig(b.direct, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return 0, err
		}
		b.count = conn
	}
	// A channel a check: a passive declare of a missing queue closes it.
	ch, err := b.count.Channel()
	if err != nil {
		b.count.Close()
		return 0, err
	}
	defer ch.Close()
	n := 0
	for _, name := range []string{"points", "sms"} {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("queue %s: %w", name, err)
		}
		n += q.Messages
	}
	return n, nil
}

// parked drains the parking queues (the run is over).
func (b *amqpBroker) parked(ctx context.Context) (map[string][]parkedMsg, error) {
	conn, err := amqp.Dial(b.direct)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	out := map[string][]parkedMsg{}
	for _, group := range []string{"points", "sms"} {
		for {
			d, ok, err := ch.Get(group+".parking", true)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			out[group] = append(out[group], parkedMsg{ID: d.MessageId, Body: d.Body})
		}
	}
	return out, nil
}

// restart stops RabbitMQ's application on Options.AMQPNode, waits, and
// starts it again. Once begun, the stop runs to its end even when ctx (the
// fault phase) ends meanwhile: a stop_app killed halfway leaves the fault
// neither landed nor healed. ctx only cuts the time the broker stays down.
// Without a node named it refuses: rabbitmqctl's default node is the
// machine's shared server, which the suite never stops.
func (b *amqpBroker) restart(ctx context.Context, down time.Duration) error {
	if b.node == "" {
		return errors.New("no RabbitMQ node of the run's own to restart (Options.AMQPNode): the shared server is never stopped")
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	b.stopped.Store(true)
	if _, err := rabbitmqctl(stopCtx, b.node, "stop_app"); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	return b.heal(context.WithoutCancel(ctx))
}

// heal starts RabbitMQ's application if a restart stopped it and waits
// until it accepts connections.
func (b *amqpBroker) heal(ctx context.Context) error {
	if b.stopped.Load() {
		if _, err := rabbitmqctl(ctx, b.node, "start_app"); err != nil {
			return err
		}
		b.stopped.Store(false)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.host, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ did not come back: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (b *amqpBroker) publishPaid(ctx context.Context, msgID string, body []byte) error {
	b.mu.Lock()
	if b.ch == nil || b.ch.IsClosed() {
		conn, err := amqp.Dial(b.direct)
		if err != nil {
			b.mu.Unlock()
			return err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			conn.Close()
			b.mu.Unlock()
			return err
		}
		b.conn, b.ch = conn, ch
	}
	ch := b.ch
	b.mu.Unlock()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", shop.RoutePaid, true, false, amqp.Publishing{
		MessageId: msgID, Type: shop.OrderPaid, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"Ferry-Event-Type": shop.OrderPaid}, Body: body,
	})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("publish %s: nacked", msgID)
	}
	return err
}

func (b *amqpBroker) close() {
	if b.conn != nil {
		b.conn.Close()
	}
	if b.count != nil {
		b.count.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = b.admin.delete(ctx, b.vhost)
}
