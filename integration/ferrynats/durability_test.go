package ferrynats_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	listeners := make([]net.Listener, 0, n) // held until all n are picked, so they differ
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// startCluster runs a JetStream cluster of n servers in the test process,
// routed to each other on loopback ports, each storing under its own
// t.TempDir(), and returns them once every one accepts connections. A
// route port taken between its pick and its listen makes it try again
// with fresh ports.
func startCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	var lastErr error
	for range 3 {
		servers, err := tryStartCluster(t, n)
		if err == nil {
			return servers
		}
		lastErr = err
	}
	t.Fatalf("JetStream cluster of %d did not start: %v", n, lastErr)
	return nil
}

func tryStartCluster(t *testing.T, n int) ([]*server.Server, error) {
	ports := freePorts(t, n)
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	var servers []*server.Server
	stop := func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "ferry-durability", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			stop()
			return nil, err
		}
		servers = append(servers, s)
		go s.Start()
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			stop()
			return nil, errors.New(s.Name() + " did not listen within 10s (a port taken?)")
		}
	}
	t.Cleanup(stop)
	return servers, nil
}

// waitFor polls cond (testsvc.WaitFor) until it returns "" (met), and
// fails the test with cond's last answer when d passes first.
func waitFor(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	var why string
	testsvc.WaitFor(t, d, func() bool { why = cond(); return why == "" }, func() string { return why })
}

// A file stream of 3 replicas on a 3-node JetStream cluster is
// replicated once its replicas are current, with no Fix; the same
// cluster's R1 and async persist mode streams are not.
func TestDurabilityReplicatedStreamOnCluster(t *testing.T) {
	t.Parallel()
	testsvc.Slow(t, "a 3-node JetStream cluster in the test process")
	servers := startCluster(t, 3)

	// The JetStream meta group has a leader, and every server knows it.
	waitFor(t, 30*time.Second, func() string {
		leaders := 0
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				leaders++
			}
			if !s.JetStreamIsCurrent() {
				return s.Name() + " is not current with the JetStream meta group"
			}
		}
		if leaders != 1 {
			return fmt.Sprintf("%d JetStream meta leaders", leaders)
		}
		return ""
	})

	nc, err := nats.Connect(servers[0].ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	create := func(name string, cfg jetstream.StreamConfig) {
		t.Helper()
		cfg.Name, cfg.Subjects = name, []string{strings.ToLower(name) + ".>"}
		// A server that has just joined may not be placeable yet: retry
		// until the deadline.
		waitFor(t, 30*time.Second, func() string {
			ctx := testsvc.Context(t, 5*time.Second)
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				return fmt.Sprintf("create stream %s: %v", name, err)
			}
			return ""
		})
	}
	create("ORDERS", jetstream.StreamConfig{Storage: jetstream.FileStorage, Replicas: 3})
	create("SINGLE", jetstream.StreamConfig{Storage: jetstream.FileStorage, Replicas: 1})
	create("ASYNC", jetstream.StreamConfig{Storage: jetstream.FileStorage, Replicas: 1, PersistMode: jetstream.AsyncPersistMode})

	publisher := func(stream string) *ferrynats.Publisher {
		p, err := ferrynats.New(testsvc.Context(t, 10*time.Second), nc, &ferrynats.Config{Stream: stream})
		require.NoError(t, err)
		return p
	}
	row := func(p *ferrynats.Publisher) (ferrybroker.Durability, error) {
		rows, err := p.Durability(testsvc.Context(t, 5*time.Second))
		if err != nil {
			return ferrybroker.Durability{}, err
		}
		require.Len(t, rows, 1)
		return rows[0], nil
	}

	// Right after creation the replicas may not be current yet: wait for
	// the leader to call both current.
	orders := publisher("ORDERS")
	var d ferrybroker.Durability
	waitFor(t, 30*time.Second, func() string {
		var err error
		d, err = row(orders)
		switch {
		case err != nil:
			return err.Error()
		case !strings.Contains(d.Settings, "(3 current)"):
			return d.Settings
		}
		return ""
	})
	require.Equal(t, ferrybroker.Durability{
		Destination: "stream ORDERS",
		Level:       ferrybroker.DurabilityReplicated,
		Settings: "stream ORDERS: 3 replicas (3 current), file storage; fsync: the server's sync_interval, not reported to clients " +
			"(default 2m: an acknowledged message may not be on disk yet, unless its jetstream block says sync_interval: always)",
	}, d)

	d, err = row(publisher("SINGLE"))
	require.NoError(t, err)
	require.Equal(t, ferrybroker.DurabilitySingle, d.Level, "%+v", d)
	require.True(t, strings.HasPrefix(d.Settings, "stream SINGLE: 1 replica, file storage; fsync:"), d.Settings)
	require.Contains(t, d.Fix, "nats stream edit SINGLE --replicas 3")

	d, err = row(publisher("ASYNC"))
	require.NoError(t, err)
	require.Equal(t, ferrybroker.DurabilityVolatile, d.Level, "%+v", d)
	require.Contains(t, d.Settings, "async persist mode")
}
