package ferry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/open"
	"github.com/ferrydev/ferry/internal/testsvc"
)

const secret = "s3cr3tpw"

// The library's errors name the server they could not reach, never with
// its password.
func TestLibraryErrorsCarryNoPassword(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)
	for name, fn := range map[string]func() error{
		"ferrymysql.Open": func() error {
			_, err := ferrymysql.Open(ctx, "mysql://root:"+secret+"@127.0.0.1:1/app?timeout=2s", nil)
			return err
		},
		"ferrymysql.ParseURL": func() error {
			_, err := ferrymysql.ParseURL("mysql://root:" + secret + "@127.0.0.1:1/app?timeout=zzz")
			return err
		},
		"ferrypg.Open": func() error {
			_, err := ferrypg.Open(ctx, "postgres://app:"+secret+"@127.0.0.1:1/app?connect_timeout=2", nil)
			return err
		},
		"ferrynats.Dial": func() error {
			_, err := ferrynats.Dial(ctx, "nats://ferry:"+secret+"@127.0.0.1:1", nil)
			return err
		},
		"open.Store": func() error {
			_, err := open.Store(ctx, "oracle://app:"+secret+"@db/app", "")
			return err
		},
		"open.Publisher": func() error {
			_, err := open.Publisher(ctx, "kafka://app:"+secret+"@broker:9092", nil)
			return err
		},
	} {
		err := fn()
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), secret, name)
		require.Contains(t, err.Error(), "xxxxx", "%s names the server: %v", name, err)
	}
}

// A relay and an outbox collector whose broker and database become
// unreachable log what failed; the URLs they were given had passwords,
// the logs do not.
func TestLibraryLogsCarryNoPassword(t *testing.T) {
	// serial: it cuts networks to make the clients log their errors.
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := setupRelay(t, "postgres")
	b.Enqueue(t, 3, func(int) string { return "1" })

	natsURL, natsProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	natsURL = strings.Replace(natsURL, "nats://", "nats://ferry:"+secret+"@", 1)
	pub, err := ferrynats.Dial(b.Ctx, natsURL, &ferrynats.DialConfig{Config: ferrynats.Config{Stream: b.stream}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	dbURL, dbProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvPostgres))
	dbURL = strings.Replace(dbURL, "postgres@", "postgres:"+secret+"@", 1) + "&connect_timeout=2"
	store, err := ferrypg.Open(b.Ctx, dbURL, &ferrypg.Config{Table: b.st.Driver.Table()})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	tables, err := ferryprom.NewOutboxCollector(prometheus.NewRegistry(), []ferrystore.Store{store},
		&ferryprom.OutboxConfig{Interval: 20 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	require.NoError(t, tables.Start(b.Ctx))
	t.Cleanup(func() { _ = tables.Stop(context.Background()) })

	natsProxy.Cut()
	dbProxy.Cut()
	r := b.Relay(t, pub, &ferry.RelayConfig{Logger: log, PollInterval: 10 * time.Millisecond,
		PublishTimeout: 100 * time.Millisecond, Retry: ferry.ExponentialBackoff{Initial: 5 * time.Millisecond}})
	// The outage is counted a moment before its log line is written:
	// wait for the line itself.
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		out := buf.String()
		return r.Stats().Outages >= 1 && strings.Contains(out, "broker unreachable") &&
			strings.Contains(out, "outbox metrics: poll failed")
	}, func() string { return buf.String() })
	out := buf.String()
	require.Contains(t, out, "broker unreachable")
	require.NotContains(t, out, secret)
}

// syncBuffer is a bytes.Buffer safe for the relay's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
