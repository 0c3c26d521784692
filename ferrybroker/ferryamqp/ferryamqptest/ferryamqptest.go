// Package ferryamqptest runs tests against a real RabbitMQ server: it
// connects to the server FERRY_TEST_AMQP_URL names (default
// amqp://guest:guest@127.0.0.1:5672/), skipping the test when it is
// unreachable unless FERRY_REQUIRE_SERVICES=1; it declares fresh queues,
// reads them back and deletes them when the test ends; and it stops,
// restarts or disrupts the server for outage tests, under a file lock that
// keeps every other test process of the machine off the server meanwhile.
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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/internal/testenv"
)

// EnvRabbitMQCtl names the rabbitmqctl command tests use to stop and start
// the RabbitMQ application; default "rabbitmqctl".
const EnvRabbitMQCtl = "FERRY_TEST_RABBITMQCTL"

// Tests that stop or restart a shared service must not run while another
// test uses it, in this process (parallel tests) or another (go test runs
// packages in parallel processes). A test using RabbitMQ holds a shared
// file lock for its duration; a test disrupting it holds the exclusive
// one. A gate lock in front of it keeps a disruptor from waiting forever
// while users come and go: a user passes the gate (shared, for a moment)
// before it takes the shared lock; a disruptor closes the gate (exclusive,
// until it ends), so that new users wait for it, and then waits for the
// users already in to finish.
func lockService(t testing.TB, name string, how int) {
	t.Helper()
	base := filepath.Join(os.TempDir(), "ferry-test-"+name)
	gate, err := flock(base+".gate.lock", how)
	if err != nil {
		t.Fatal(err)
	}
	main, err := flock(base+".lock", how)
	if err != nil {
		unlock(gate)
		t.Fatal(err)
	}
	if how == syscall.LOCK_SH {
		unlock(gate)
		gate = nil
	}
	t.Cleanup(func() {
		unlock(main)
		if gate != nil {
			unlock(gate)
		}
	})
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

// holders holds the names of the tests of this process that hold a
// RabbitMQ lock, shared (users) or exclusive (disruptors): they and their
// subtests use the server without locking again. Locking again would wait
// at the gate behind a disruptor that waits for this very test to end.
var (
	holdersMu sync.Mutex
	holders   = map[string]int{} // syscall.LOCK_SH or LOCK_EX
)

// holding returns the lock t or a parent of t holds: 0, syscall.LOCK_SH
// or syscall.LOCK_EX.
func holding(t testing.TB) int {
	holdersMu.Lock()
	defer holdersMu.Unlock()
	for name := t.Name(); ; {
		if how := holders[name]; how != 0 {
			return how
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return 0
		}
		name = name[:i]
	}
}

func hold(t testing.TB, how int) {
	holdersMu.Lock()
	holders[t.Name()] = how
	holdersMu.Unlock()
	t.Cleanup(func() {
		holdersMu.Lock()
		delete(holders, t.Name())
		holdersMu.Unlock()
	})
}

// UseRabbitMQ declares that the test uses the shared RabbitMQ server: a
// test that restarts it waits until this one ends.
func UseRabbitMQ(t testing.TB) {
	if holding(t) != 0 {
		return
	}
	lockService(t, "rabbitmq", syscall.LOCK_SH)
	hold(t, syscall.LOCK_SH)
}

// DisruptRabbitMQ declares that the test stops or restarts RabbitMQ, or
// sets an alarm on it: it waits until no other test uses the server, and
// keeps them out until it ends. Call it before anything else touches
// RabbitMQ in the test.
func DisruptRabbitMQ(t testing.TB) {
	switch holding(t) {
	case syscall.LOCK_EX:
		return
	case syscall.LOCK_SH:
		t.Fatal("DisruptRabbitMQ: the test already uses RabbitMQ; call DisruptRabbitMQ first")
	}
	lockService(t, "rabbitmq", syscall.LOCK_EX)
	hold(t, syscall.LOCK_EX)
}

// RabbitMQ returns a connection to the test RabbitMQ server, closed when
// the test ends, and marks the test as using the server (UseRabbitMQ).
func RabbitMQ(t testing.TB) *amqp.Connection {
	t.Helper()
	UseRabbitMQ(t)
	conn, err := amqp.DialConfig(testenv.URL(testenv.EnvAMQP), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ at "+testenv.URL(testenv.EnvAMQP), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
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
	DeleteRabbitMQQueue(t, q.Name)
	if err := ch.QueueBind(q.Name, q.RoutingKey, "amq.topic", false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", q.Name, err)
	}
	return q
}

// DeleteRabbitMQQueue deletes the queue named name when the test ends, on
// a connection of its own (the test's may be closed by then).
func DeleteRabbitMQQueue(t testing.TB, name string) {
	t.Cleanup(func() {
		deleteRabbit(t, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
	})
}

// DeleteRabbitMQExchange deletes the exchange named name when the test
// ends.
func DeleteRabbitMQExchange(t testing.TB, name string) {
	t.Cleanup(func() { deleteRabbit(t, func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) }) })
}

func deleteRabbit(t testing.TB, op func(ch *amqp.Channel) error) {
	conn, err := amqp.DialConfig(testenv.URL(testenv.EnvAMQP), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
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

// RabbitMQCtl runs rabbitmqctl with args and returns its output. It skips
// (or fails) the test when rabbitmqctl is not available.
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

// StopRabbitMQ stops the RabbitMQ application (rabbitmqctl stop_app): every
// connection closes and the port stops answering. The test must hold
// DisruptRabbitMQ. Whatever happens next, the application is started again
// when the test ends.
func StopRabbitMQ(t testing.TB) {
	t.Helper()
	if holding(t) != syscall.LOCK_EX {
		t.Fatal("StopRabbitMQ needs DisruptRabbitMQ first")
	}
	t.Cleanup(func() {
		if out, err := rabbitmqctl("start_app"); err != nil {
			t.Errorf("cleanup: rabbitmqctl start_app: %v\n%s", err, out)
			return
		}
		if err := waitRabbitMQ(2 * time.Minute); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	RabbitMQCtl(t, "stop_app")
}

// StartRabbitMQ starts the RabbitMQ application again and waits until it
// accepts AMQP connections.
func StartRabbitMQ(t testing.TB) {
	t.Helper()
	RabbitMQCtl(t, "start_app")
	if err := waitRabbitMQ(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
}

// waitRabbitMQ waits until an AMQP connection to the test server opens.
func waitRabbitMQ(d time.Duration) error {
	deadline := time.Now().Add(d)
	u, err := amqp.ParseURI(testenv.URL(testenv.EnvAMQP))
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(u.Host, fmt.Sprint(u.Port))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			conn, err := amqp.DialConfig(testenv.URL(testenv.EnvAMQP), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
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
