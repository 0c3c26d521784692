package ferrynats_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// lockedBuffer is a log's output, written by the connection's callback
// goroutine and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A publisher dialled with several servers keeps going when the one it
// is connected to dies, and says so: one line when the connection is
// lost, one naming the other server it reconnected to.
func TestDialMovesToTheNextServerAndSaysSo(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)
	start := func() *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
			StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
		require.NoError(t, err)
		go s.Start()
		require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
		t.Cleanup(s.Shutdown)
		return s
	}
	a, b := start(), start()
	var out lockedBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	p, err := ferrynats.Dial(ctx, a.ClientURL()+","+b.ClientURL(), &ferrynats.DialConfig{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	// The client takes the servers of the list in random order.
	if strings.Contains(p.String(), b.Addr().String()) {
		a, b = b, a
	}
	require.Contains(t, p.String(), a.Addr().String())

	a.Shutdown()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "connected to another NATS server") },
		30*time.Second, 50*time.Millisecond, "no line about the move; the log:\n%s", out.String())
	logged := out.String()
	require.Contains(t, logged, "lost the connection to the NATS server")
	require.Contains(t, logged, "from="+a.ClientURL())
	require.Contains(t, logged, "to="+b.ClientURL())
	require.Contains(t, p.String(), b.Addr().String())
}
