// Package ferryamqptest runs tests against a real RabbitMQ server: it
// connects to the server FERRY_TEST_AMQP_URL names (default
// amqp://guest:guest@127.0.0.1:5672/), skipping the test when it is
// unreachable unless FERRY_REQUIRE_SERVICES=1; it declares fresh queues,
// reads them back and deletes them when the test ends. That server is
// shared and nothing here stops it or sets an alarm on it: an outage test
// stops, restarts or alarms a RabbitMQ node of the tests' own
// (DisruptRabbitMQ; FERRY_TEST_AMQP_DISRUPT_URL, default port 5673, which
// scripts/services.sh starts), under a file lock that keeps every other
// such test of the machine off that node meanwhile.
// ferry's own tests use it; so can the tests of an application that runs
// ferryamqp. It imports nothing but the core and amqp091-go.
package ferryamqptest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/internal/testenv"
)

// EnvRabbitMQCtl names the rabbitmqctl command the tests run; default
// "rabbitmqctl".
const EnvRabbitMQCtl = "FERRY_TEST_RABBITMQCTL"

// The RabbitMQ node of the tests' own (scripts/services.sh starts it): the
// only one a test stops, restarts or sets an alarm on (DisruptRabbitMQ).
// The server at EnvAMQP is shared, with other tests and with whoever else
// uses the machine's broker: nothing here disrupts it.
const (
	// EnvDisruptAMQP names the node's AMQP URL; default
	// amqp://guest:guest@127.0.0.1:5673/.
	EnvDisruptAMQP = "FERRY_TEST_AMQP_DISRUPT_URL"
	// EnvDisruptNode names the node as rabbitmqctl -n takes it; default
	// ferry-disrupt@localhost.
	EnvDisruptNode = "FERRY_TEST_RABBITMQ_DISRUPT_NODE"
)

// DisruptTarget returns the AMQP URL and the node name of the RabbitMQ
// node of the tests' own, from the environment or their defaults.
func DisruptTarget() (amqpURL, node string) {
	amqpURL, node = os.Getenv(EnvDisruptAMQP), os.Getenv(EnvDisruptNode)
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@127.0.0.1:5673/"
	}
	if node == "" {
		node = "ferry-disrupt@localhost"
	}
	return amqpURL, node
}

// UseRabbitMQ is for a test that dials the shared RabbitMQ server
// (EnvAMQP) itself: it skips the test, or fails it under
// FERRY_REQUIRE_SERVICES=1, when the server does not answer. Nothing
// stops or alarms that server (DisruptRabbitMQ works on a node of its
// own), so the test waits for nothing.
func UseRabbitMQ(t testing.TB) {
	t.Helper()
	RabbitMQ(t)
}

// Node is the RabbitMQ node of the tests' own, held by one test at a time
// (DisruptRabbitMQ), which may stop and start its application and set
// alarms on it.
type Node struct {
	URL  string // its AMQP URL (EnvDisruptAMQP)
	Name string // its name for rabbitmqctl -n (EnvDisruptNode)
}

// holders holds the names of the tests of this process that hold a node:
// they and their subtests use it without locking again, which would wait
// for the very test that holds it.
var (
	holdersMu sync.Mutex
	holders   = map[string]*Node{}
)

func held(t testing.TB) *Node {
	holdersMu.Lock()
	defer holdersMu.Unlock()
	for name := t.Name(); ; {
		if n := holders[name]; n != nil {
			return n
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return nil
		}
		name = name[:i]
	}
}

// DisruptRabbitMQ returns the RabbitMQ node of the tests' own, for a test
// that stops or restarts RabbitMQ or sets an alarm on it, and holds it for
// the test: a file lock keeps every other such test, of this process or
// another, off the node until this one ends. It skips the test when the
// node is not running (scripts/services.sh starts it), or fails it when
// FERRY_REQUIRE_SERVICES=1; it fails it when the node's URL is the shared
// server's, or when the node named does not serve that URL. It never
// falls back to the shared server. A node whose application a killed test
// left stopped, or alarmed, is started and cleared first.
func DisruptRabbitMQ(t testing.TB) *Node {
	t.Helper()
	if n := held(t); n != nil {
		return n
	}
	amqpURL, name := DisruptTarget()
	n := &Node{URL: amqpURL, Name: name}
	u, err := amqp.ParseURI(amqpURL)
	if err != nil {
		t.Fatalf("%s: %v", EnvDisruptAMQP, err)
	}
	if shared, err := amqp.ParseURI(testenv.URL(testenv.EnvAMQP)); err == nil && shared.Port == u.Port && sameHost(shared.Host, u.Host) {
		t.Fatalf("%s (%s) is the shared RabbitMQ server's address (%s): a test that stops RabbitMQ or sets an alarm on it "+
			"needs a node of its own (scripts/services.sh starts one on port 5673)", EnvDisruptAMQP, redact(amqpURL), testenv.EnvAMQP)
	}
	f, err := flock(filepath.Join(os.TempDir(), "ferry-test-rabbitmq-"+name+".lock"), syscall.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unlock(f) })
	holdersMu.Lock()
	holders[t.Name()] = n
	holdersMu.Unlock()
	t.Cleanup(func() {
		holdersMu.Lock()
		delete(holders, t.Name())
		holdersMu.Unlock()
	})
	what := fmt.Sprintf("the tests' own RabbitMQ node %s at %s (the only one a test stops or sets an alarm on)", name, redact(amqpURL))
	st, err := n.state()
	if err != nil {
		if _, lerr := exec.LookPath(rabbitmqctlPath()); lerr != nil {
			err = lerr
		}
		testenv.Unavailable(t, what, err)
	}
	if st.stopped {
		t.Logf("%s: its application was stopped (a test killed meanwhile?): starting it", name)
		n.Start(t)
		if st, err = n.state(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if !slices.Contains(st.ports, u.Port) {
		t.Fatalf("RabbitMQ node %s (%s) listens for AMQP on %v, not on port %d of %s (%s): it is not the node at that URL",
			name, EnvDisruptNode, st.ports, u.Port, EnvDisruptAMQP, redact(amqpURL))
	}
	if st.alarms > 0 {
		t.Logf("%s: %d resource alarms set (a test killed meanwhile?): the memory high watermark back to 0.4", name, st.alarms)
		n.Ctl(t, "set_vm_memory_high_watermark", "0.4")
		testenv.WaitFor(t, time.Minute, func() bool { s, err := n.state(); return err == nil && s.alarms == 0 },
			func() string { return name + ": its alarms did not clear" })
	}
	if err := waitRabbitMQ(amqpURL, 2*time.Minute); err != nil {
		testenv.Unavailable(t, what, err)
	}
	return n
}

// flock opens path and locks it; unlock releases and closes it.
func flock(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

func unlock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

func sameHost(a, b string) bool {
	loopback := func(h string) bool { return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1" }
	return a == b || loopback(a) && loopback(b)
}

func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// nodeState is what rabbitmqctl says of a node: its application stopped,
// or the ports of its AMQP listeners and the number of its alarms.
type nodeState struct {
	stopped bool
	ports   []int
	alarms  int
}

var stateRE = regexp.MustCompile(`\{ports,\[([0-9,]*)\],alarms,([0-9]+)\}`)

func (n *Node) state() (nodeState, error) {
	out, err := rabbitmqctl("-n", n.Name, "eval", "case rabbit:is_running() of false -> stopped; true -> "+
		"{ports, [P || {listener, _, amqp, _, _, P, _} <- rabbit_networking:active_listeners()], "+
		"alarms, length(rabbit_alarm:get_alarms())} end.")
	if err != nil {
		// Its first line says why; the rest is a page of advice.
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return nodeState{}, fmt.Errorf("rabbitmqctl -n %s: %w: %s", n.Name, err, first)
	}
	if strings.TrimSpace(out) == "stopped" {
		return nodeState{stopped: true}, nil
	}
	m := stateRE.FindStringSubmatch(out)
	if m == nil {
		return nodeState{}, fmt.Errorf("rabbitmqctl -n %s eval: unexpected answer %q", n.Name, out)
	}
	var st nodeState
	for _, p := range strings.Split(m[1], ",") {
		if v, err := strconv.Atoi(p); err == nil {
			st.ports = append(st.ports, v)
		}
	}
	st.alarms, _ = strconv.Atoi(m[2])
	return st, nil
}

// Conn returns a connection to the node, closed when the test ends.
func (n *Node) Conn(t testing.TB) *amqp.Connection {
	t.Helper()
	return dial(t, n.URL, "the tests' own RabbitMQ node at "+redact(n.URL))
}

// Ctl runs rabbitmqctl -n with the node's name and args, and returns its
// output; it fails the test when rabbitmqctl fails.
func (n *Node) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := rabbitmqctl(append([]string{"-n", n.Name}, args...)...)
	if err != nil {
		t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Stop stops the node's RabbitMQ application (rabbitmqctl stop_app): every
// connection closes and the port stops answering. Whatever happens next,
// the application is started again when the test ends.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if out, err := rabbitmqctl("-n", n.Name, "start_app"); err != nil {
			t.Errorf("cleanup: rabbitmqctl -n %s start_app: %v\n%s", n.Name, err, out)
			return
		}
		if err := waitRabbitMQ(n.URL, 2*time.Minute); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	n.Ctl(t, "stop_app")
}

// Start starts the node's RabbitMQ application again and waits until it
// accepts AMQP connections.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	n.Ctl(t, "start_app")
	if err := waitRabbitMQ(n.URL, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// RabbitMQ returns a connection to the shared test RabbitMQ server
// (EnvAMQP), closed when the test ends.
func RabbitMQ(t testing.TB) *amqp.Connection {
	t.Helper()
	return dial(t, testenv.URL(testenv.EnvAMQP), "RabbitMQ at "+redact(testenv.URL(testenv.EnvAMQP)))
}

// dialled maps the connections dial opened to their URLs, so that
// RabbitMQQueue deletes a queue on the server it was declared on.
var dialled sync.Map // *amqp.Connection -> string

func dial(t testing.TB, amqpURL, what string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		testenv.Unavailable(t, what, err)
	}
	dialled.Store(conn, amqpURL)
	t.Cleanup(func() {
		dialled.Delete(conn)
		_ = conn.Close()
	})
	return conn
}

// RabbitMQVhost creates a fresh vhost on the test RabbitMQ server with
// rabbitmqctl, gives the test URL's user every permission on it, and
// deletes it when the test ends. It returns the test URL with that vhost:
// for a test whose queue names are fixed (the shop's), so that no other
// test's messages meet its own. It marks the test as using the server.
func RabbitMQVhost(t testing.TB) string {
	t.Helper()
	RabbitMQ(t) // skips when the server is not there
	u, err := url.Parse(testenv.URL(testenv.EnvAMQP))
	if err != nil {
		t.Fatalf("%s: %v", testenv.EnvAMQP, err)
	}
	vhost := fmt.Sprintf("test_%d_%d", os.Getpid(), time.Now().UnixNano())
	RabbitMQCtl(t, "add_vhost", vhost)
	t.Cleanup(func() {
		if out, err := rabbitmqctl("delete_vhost", vhost); err != nil {
			t.Errorf("cleanup: rabbitmqctl delete_vhost %s: %v\n%s", vhost, err, out)
		}
	})
	user := "guest"
	if u.User != nil {
		user = u.User.Username()
	}
	RabbitMQCtl(t, "set_permissions", "-p", vhost, user, ".*", ".*", ".*")
	u.Path, u.RawPath = "/"+vhost, ""
	return u.String()
}

// RabbitQueue is a fresh durable queue bound to amq.topic.
type RabbitQueue struct {
	Name       string
	RoutingKey string // bound to the queue on amq.topic
}

// RabbitMQQueue declares a fresh durable queue of type typ ("quorum" or
// "classic") with extra arguments args, bound to amq.topic with a fresh
// routing key, and deletes it when the test ends.
func RabbitMQQueue(t testing.TB, conn *amqp.Connection, typ string, args amqp.Table) RabbitQueue {
	t.Helper()
	q := RabbitQueue{Name: testenv.Name("ferry_q_"), RoutingKey: testenv.Name("ferry.rk.")}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	defer ch.Close()
	a := amqp.Table{"x-queue-type": typ}
	for k, v := range args {
		a[k] = v
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, a); err != nil {
		t.Fatalf("declare queue %s: %v", q.Name, err)
	}
	at := testenv.URL(testenv.EnvAMQP)
	if u, ok := dialled.Load(conn); ok {
		at = u.(string)
	}
	t.Cleanup(func() {
		deleteRabbit(t, at, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q.Name, false, false, false); return err })
	})
	if err := ch.QueueBind(q.Name, q.RoutingKey, "amq.topic", false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", q.Name, err)
	}
	return q
}

// DeleteRabbitMQQueue deletes the queue named name from the shared server
// when the test ends, on a connection of its own (the test's may be
// closed by then).
func DeleteRabbitMQQueue(t testing.TB, name string) {
	t.Cleanup(func() {
		deleteRabbit(t, testenv.URL(testenv.EnvAMQP), func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(name, false, false, false)
			return err
		})
	})
}

// DeleteRabbitMQExchange deletes the exchange named name from the shared
// server when the test ends.
func DeleteRabbitMQExchange(t testing.TB, name string) {
	t.Cleanup(func() {
		deleteRabbit(t, testenv.URL(testenv.EnvAMQP), func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
	})
}

func deleteRabbit(t testing.TB, amqpURL string, op func(ch *amqp.Channel) error) {
	conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Logf("cleanup: connect to RabbitMQ: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	if err := op(ch); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// ReadRabbitMQQueue takes every message of queue (basic.get, one at a
// time, so that none is in flight when the queue reads empty), waiting up
// to d for at least want of them, and returns them all: it keeps reading
// until it has want and the queue is empty.
func ReadRabbitMQQueue(t testing.TB, conn *amqp.Connection, queue string, want int, d time.Duration) []amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	defer ch.Close()
	deadline := time.Now().Add(d)
	var out []amqp.Delivery
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			out = append(out, m)
			continue
		}
		if len(out) >= want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d messages from %s within %s", len(out), want, queue, d)
		}
		time.Sleep(20 * time.Millisecond) // the queue is empty: poll
	}
}

// RabbitMQCtl runs rabbitmqctl with args on its default node, the shared
// server, and returns its output: for what leaves the server as it was
// (a virtual host of the test's own, say), never to stop it or set an
// alarm on it (DisruptRabbitMQ). It skips (or fails) the test when
// rabbitmqctl is not available.
func RabbitMQCtl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := rabbitmqctl(args...)
	if err != nil {
		if _, lerr := exec.LookPath(rabbitmqctlPath()); lerr != nil {
			testenv.Unavailable(t, "rabbitmqctl", lerr)
		}
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func rabbitmqctlPath() string {
	if v := os.Getenv(EnvRabbitMQCtl); v != "" {
		return v
	}
	return "rabbitmqctl"
}

func rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, rabbitmqctlPath(), args...).CombinedOutput()
	return string(out), err
}

// waitRabbitMQ waits until an AMQP connection to amqpURL opens.
func waitRabbitMQ(amqpURL string, d time.Duration) error {
	deadline := time.Now().Add(d)
	u, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(u.Host, fmt.Sprint(u.Port))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
			if err == nil {
				conn.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ did not accept connections on %s within %s: %v", addr, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
