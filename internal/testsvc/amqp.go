package testsvc

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Tests that stop or restart a shared service must not run while another
// test package uses it (go test runs packages in parallel processes). A
// test using RabbitMQ holds a shared file lock for its duration; a test
// disrupting it holds the exclusive one.
func lockService(t testing.TB, name string, how int) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "ferry-test-"+name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// UseRabbitMQ declares that the test uses the shared RabbitMQ server: a
// test of another package that restarts it waits until this one ends.
func UseRabbitMQ(t testing.TB) { lockService(t, "rabbitmq", syscall.LOCK_SH) }

// DisruptRabbitMQ declares that the test stops or restarts RabbitMQ: it
// waits until no other test uses the server, and keeps them out until it
// ends.
func DisruptRabbitMQ(t testing.TB) { lockService(t, "rabbitmq", syscall.LOCK_EX) }

// RabbitMQ returns a connection to the test RabbitMQ server, closed when
// the test ends, and marks the test as using the server (UseRabbitMQ).
func RabbitMQ(t testing.TB) *amqp.Connection {
	t.Helper()
	UseRabbitMQ(t)
	conn, err := amqp.DialConfig(URL(EnvAMQP), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		Unavailable(t, "RabbitMQ at "+URL(EnvAMQP), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
