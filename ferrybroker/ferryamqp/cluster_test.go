package ferryamqp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The tests of this file run against the three-node RabbitMQ cluster of
// the tests' own (scripts/rabbitmq-cluster.sh; ferryamqptest.RabbitMQCluster
// skips them when it is not up) and kill its nodes, one test at a time
// (a file lock).

// remotePort returns the AMQP port of the node the publisher is
// connected to, 0 while it is not connected.
func remotePort(p *Publisher) int {
	conn := p.link.connection()
	if conn == nil {
		return 0
	}
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

func clusterMsg(id, routingKey string) ferrytype.Message {
	return ferrytype.Message{ID: id, AggregateType: "order", AggregateID: id, Sequence: 1, Type: "OrderPaid",
		Payload: json.RawMessage(`{"id":"` + id + `"}`), Destination: routingKey, Attempt: 1, CreatedAt: time.Now()}
}

// clusterRun is what the publishing loop of
// TestClusterPublisherLosesNothingWhenItsNodeIsKilled did.
type clusterRun struct {
	confirmed map[string]bool // every id confirmed
	published int             // distinct ids published
	retries   int             // publishes of an id again, its outcome not confirmed
	outcomes  map[string]int  // the outcomes other than confirmed, by kind
	err       error           // why it stopped before its end
}

// A publisher dialled with the three nodes publishes to a quorum queue
// while the node it is connected to (which also leads the queue: the
// queue was declared through it) is killed with SIGKILL. It reconnects to
// another node, says so in one log line, and publishes on, each message
// whose outcome was not a confirm published again with its id, as the
// relay does. Once the killed node is back, every confirmed message is
// in the queue: none lost, duplicates allowed (and counted).
func TestClusterPublisherLosesNothingWhenItsNodeIsKilled(t *testing.T) {
	// serial: it kills a node of the cluster (RabbitMQCluster holds it,
	// under a file lock).
	testenv.Slow(t, "a RabbitMQ cluster node killed under a publisher")
	c := ferryamqptest.RabbitMQCluster(t)
	const n = 3000
	queue, rk := testenv.Name("ferry_cluster_q_"), testenv.Name("ferry.cluster.")
	c.DeleteQueue(t, queue)
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx := testenv.Context(t, 5*time.Minute)
	pub, err := Dial(testenv.Context(t, time.Minute), c.URLs(), &Config{
		Logger:        log,
		Declare:       true,
		Topology:      Topology{Queues: []Queue{{Name: queue, Type: QueueQuorum, NoParking: true}}, Bindings: []Binding{{Queue: queue, RoutingKey: rk}}},
		ReconnectWait: 5 * time.Second,
		Connection:    ConnectionConfig{ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	first, ok := c.NodeAt(remotePort(pub))
	require.True(t, ok, "the publisher is connected to port %d", remotePort(pub))
	require.Equal(t, 1, first.N, "the first connection goes to the first node of the list")

	// The publishing loop: batches of 20, at most about 1,000 messages a
	// second, so that the kill lands mid-stream; it goes on past n until
	// the node was killed and a batch was confirmed on another node.
	var confirmedSoFar atomic.Int64
	var victimPort atomic.Int64
	var status atomic.Value // what the loop did last, for a failure's message
	status.Store("")
	killed := make(chan struct{})
	done := make(chan clusterRun, 1)
	prefix := testenv.Name("c")
	go func() {
		run := clusterRun{confirmed: map[string]bool{}, outcomes: map[string]int{}}
		defer func() { done <- run }()
		var pending []string
		var lastBad string
		next, afterMove := 0, 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			isKilled := false
			select {
			case <-killed:
				isKilled = true
			default:
			}
			moved := isKilled && remotePort(pub) != 0 && int64(remotePort(pub)) != victimPort.Load()
			if next >= n && len(pending) == 0 && afterMove > 0 {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				run.err = fmt.Errorf("stopped before its end: %w (%d confirmed, %d pending)", ctx.Err(), len(run.confirmed), len(pending))
				return
			}
			batch := pending[:min(len(pending), 20)]
			pending = slices.Clone(pending[len(batch):])
			run.retries += len(batch)
			for len(batch) < 20 && (next < n || !moved || afterMove == 0) {
				batch = append(batch, fmt.Sprintf("%s-%05d", prefix, next))
				next++
				run.published++
			}
			msgs := make([]ferrytype.Message, len(batch))
			for i, id := range batch {
				msgs[i] = clusterMsg(id, rk)
			}
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res := pub.Publish(pctx, msgs)
			cancel()
			ok := 0
			for i, r := range res {
				if r.Outcome == ferrytype.OutcomeConfirmed {
					run.confirmed[batch[i]] = true
					ok++
					continue
				}
				kind := r.Outcome.String()
				if r.NotSent() {
					kind += ", not sent"
				}
				run.outcomes[kind]++
				pending = append(pending, batch[i])
				lastBad = fmt.Sprintf("last outcome not confirmed: %s: %v", kind, r.Err)
			}
			confirmedSoFar.Add(int64(ok))
			status.Store(fmt.Sprintf("%d ids published, %d confirmed, %d pending, on port %d, moved %v, %d confirmed after the move; %s",
				run.published, len(run.confirmed), len(pending), remotePort(pub), moved, afterMove, lastBad))
			if moved && ok > 0 {
				afterMove += ok
			}
		}
	}()

	testenv.WaitFor(t, 2*time.Minute, func() bool { return confirmedSoFar.Load() >= n/5 },
		func() string { return fmt.Sprintf("%d of %d confirmed", confirmedSoFar.Load(), n/5) })
	victim, ok := c.NodeAt(remotePort(pub))
	require.True(t, ok, "the publisher is connected to port %d", remotePort(pub))
	victimPort.Store(int64(victim.Port))
	c.Kill(t, victim.N)
	atKill := confirmedSoFar.Load()
	close(killed)
	t.Logf("killed %s (the publisher's node) with %d of %d messages confirmed", victim.Name, atKill, n)

	// The fault happened: the port is closed and the cluster counts the
	// node out.
	require.False(t, c.PortOpen(victim.N), "%s still answers", victim.Name)
	testenv.WaitFor(t, time.Minute, func() bool {
		running, err := c.RunningNodes()
		return err == nil && len(running) == 2 && !slices.Contains(running, victim.Name)
	}, func() string { r, err := c.RunningNodes(); return fmt.Sprintf("running nodes %v (%v)", r, err) })

	var run clusterRun
	select {
	case run = <-done:
	case <-time.After(4 * time.Minute):
		t.Fatalf("the publishing loop did not end within 4 minutes: %s; logs:\n%s", status.Load(), logs.String())
	}
	require.NoError(t, run.err, logs.String())
	t.Logf("published %d ids, %d confirmed, %d publishes again; outcomes other than confirmed: %v",
		run.published, len(run.confirmed), run.retries, run.outcomes)
	require.Len(t, run.confirmed, run.published, "every id is confirmed in the end")
	require.GreaterOrEqual(t, run.published, n)

	// The publisher moved to another node, and said so once.
	now, ok := c.NodeAt(remotePort(pub))
	require.True(t, ok, "the publisher is connected to port %d", remotePort(pub))
	require.NotEqual(t, victim.N, now.N, "the publisher is still on the killed node")
	moves := logs.Lines("connected to another RabbitMQ node")
	require.NotEmpty(t, moves, logs.String())
	require.Contains(t, moves[0], "from="+ferrytype.RedactURL(victim.URL))
	require.Contains(t, moves[len(moves)-1], "to="+ferrytype.RedactURL(now.URL))
	require.NotContains(t, logs.String(), "guest:guest@", "the logs hold no password")
	t.Logf("moved from %s to %s; %d move lines; reconnect failures logged: %d", victim.Name, now.Name, len(moves),
		len(logs.Lines("reconnect to RabbitMQ failed")))

	// The killed node back, every confirmed message is in the queue.
	c.Start(t, victim.N)
	got := ferryamqptest.ReadRabbitMQQueue(t, c.Conn(t), queue, len(run.confirmed), 2*time.Minute)
	count := ids(got)
	var lost []string
	dups := 0
	for id := range run.confirmed {
		switch k := count[id]; {
		case k == 0:
			lost = append(lost, id)
		case k > 1:
			dups += k - 1
		}
	}
	slices.Sort(lost)
	require.Empty(t, lost, "confirmed, and not in the queue (%d of %d)", len(lost), len(run.confirmed))
	for id := range count {
		require.True(t, strings.HasPrefix(id, prefix+"-"), "a message %q this test did not publish", id)
	}
	t.Logf("the queue holds %d messages: every one of the %d confirmed ids, %d duplicates", len(got), len(run.confirmed), dups)
}

// Durability reads a quorum queue of the cluster through the management
// APIs of its nodes: 3 members online is replicated; with one node killed
// (the first of the list, whose API goes with it) it reads the next API
// and reports 2 of 3 online, still replicated (a majority confirms); with
// the node back, 3 of 3 again.
func TestClusterDurabilityOfAQuorumQueue(t *testing.T) {
	// serial: it kills a node of the cluster (RabbitMQCluster holds it,
	// under a file lock).
	testenv.Slow(t, "a RabbitMQ cluster node killed under the durability reader")
	c := ferryamqptest.RabbitMQCluster(t)
	queue := testenv.Name("ferry_cluster_d_")
	c.DeleteQueue(t, queue)
	pub, err := Dial(testenv.Context(t, time.Minute), c.URLs(), &Config{
		ManagementURL: c.ManagementURLs(),
		Declare:       true,
		Topology:      Topology{Queues: []Queue{{Name: queue, Type: QueueQuorum, NoParking: true}}},
		Logger:        slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })

	var row ferrybroker.Durability
	var readErr error
	read := func() bool {
		rows, err := pub.Durability(testenv.Context(t, 20*time.Second))
		if readErr = err; err != nil {
			return false
		}
		require.Len(t, rows, 1)
		row = rows[0]
		return true
	}
	until := func(settings string) {
		t.Helper()
		testenv.WaitFor(t, time.Minute, func() bool { return read() && strings.HasPrefix(row.Settings, settings) },
			func() string {
				return fmt.Sprintf("want %q, read %s: %q (%v)", settings, row.Level, row.Settings, readErr)
			})
		t.Logf("%s: %s: %s; fix: %q", row.Destination, row.Level, row.Settings, row.Fix)
	}

	// The API lists a quorum queue's members a few seconds after the
	// declare.
	until("quorum queue, 3 members, 3 online;")
	require.Equal(t, ferrybroker.DurabilityReplicated, row.Level)
	require.Equal(t, "queue "+queue, row.Destination)
	require.Empty(t, row.Fix)
	require.Contains(t, row.Settings, "a majority of the members has written it to its log (fsynced)")

	c.Kill(t, 1)
	require.False(t, c.PortOpen(1))
	// The first API of the list is gone with its node: Durability reads
	// the next one. The API counts the dead member out within seconds.
	until("quorum queue, 3 members, 2 online;")
	require.Equal(t, ferrybroker.DurabilityReplicated, row.Level, "2 of 3 members is a majority: a confirm still needs 2 disks")
	require.Empty(t, row.Fix)

	c.Start(t, 1)
	until("quorum queue, 3 members, 3 online;")
	require.Equal(t, ferrybroker.DurabilityReplicated, row.Level)
}
