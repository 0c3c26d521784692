package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/examples/shop"
)

// nodeKiller is a broker cluster whose nodes the node-kill and
// node-pause scenarios fault.
type nodeKiller interface {
	// faultLeader faults the node that leads the shop's stream
	// (JetStream) or its points queue (RabbitMQ): killed (SIGKILL) or,
	// with pause, stopped (SIGSTOP: it holds its connections and
	// answers nothing). It waits until another node leads, then, after
	// down, starts the killed node again with its data or lets the
	// paused one run (SIGCONT), and returns once it caught up. It says
	// each step as it happens. faulted reports whether a node was
	// faulted, moved whether another then took the lead.
	faultLeader(ctx context.Context, pause bool, down time.Duration, say func(string, ...any)) (faulted, moved bool, err error)
}

// leaderFaults runs faultLeader every ~4 s until ctx ends.
func leaderFaults(pause bool) func(ctx context.Context, s *system) {
	return func(ctx context.Context, s *system) {
		k, ok := s.broker.(nodeKiller)
		if !ok {
			s.say("the broker is not a cluster (Options.Cluster)")
			return
		}
		after(ctx, time.Second, 4*time.Second, func() {
			faulted, moved, err := k.faultLeader(ctx, pause, 2*time.Second, s.say)
			s.mu.Lock()
			if faulted {
				s.nodeKills++
			}
			if moved {
				s.leaderMoves++
			}
			s.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				s.say("leader fault: %v", err)
			}
		})
	}
}

// expectLeaderFaults fails a run whose leader fault never landed.
func expectLeaderFaults(r *Result) []string {
	switch {
	case r.Counters.NodeKills == 0:
		return []string{"vacuous: no broker node was faulted"}
	case r.Counters.LeaderMoves == 0:
		return []string{"vacuous: the leader never moved to another node"}
	}
	return nil
}

// NodeKill kills the broker cluster's leader node under the running
// system, again and again: at most one node is down at a time, so the
// cluster keeps its quorum, and what it confirmed must survive. Same
// checker: every order's effects once.
var NodeKill = &Scenario{
	Name:        "node-kill",
	ClusterOnly: true,
	About: "the broker node that leads the shop's stream (JetStream, R3) or points queue (RabbitMQ, quorum) SIGKILLed " +
		"every ~4 s and started again 2 s after another node took the lead, with its data; the next kill waits until it caught up",
	faults: leaderFaults(false),
	expect: expectLeaderFaults,
}

// NodePause stops the broker cluster's leader node (SIGSTOP) until
// another node took the lead, and lets it run again: a node that hangs
// (a stalled disk, a starved VM) rather than dies. It comes back
// believing it leads, holding its clients' connections; the cluster must
// have it step down, and nothing it took while paused may count as
// confirmed.
var NodePause = &Scenario{
	Name:        "node-pause",
	ClusterOnly: true,
	About: "the broker node that leads the shop's stream or points queue SIGSTOPped every ~4 s until another node " +
		"took the lead (past the cluster's election timeouts), and SIGCONTed 2 s later; the next pause waits until it caught up",
	faults: leaderFaults(true),
	expect: expectLeaderFaults,
}

// natsNode is one server of a run's own JetStream cluster.
type natsNode struct {
	name string
	addr string // client address, host:port
	proc *shop.Proc
}

// startCluster runs three nats-servers of o.NATSServer as one JetStream
// cluster, each with a store of its own in o.Dir, acknowledging a write
// only once it is fsynced (sync_interval: always; the default flushes
// every two minutes, and a killed server may lose what it acknowledged),
// and returns the client URLs, comma-separated, once each accepts
// connections and the cluster has a meta leader.
func (b *natsBroker) startCluster(ctx context.Context, o Options) (string, error) {
	const n = 3
	client, route := make([]string, n), make([]string, n)
	for i := range n {
		var err error
		if client[i], err = freePort(); err != nil {
			return "", err
		}
		if route[i], err = freePort(); err != nil {
			return "", err
		}
	}
	b.store = filepath.Join(o.Dir, "nats")
	var urls []string
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%s", route[j]))
			}
		}
		dir := filepath.Join(b.store, name)
		conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%s"
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: ferry-chaos
  listen: "127.0.0.1:%s"
  routes: [%s]
}
`, name, client[i], dir, route[i], strings.Join(routes, ", "))
		path := filepath.Join(b.store, name+".conf")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return "", err
		}
		node := &natsNode{name: name, addr: "127.0.0.1:" + client[i],
			proc: &shop.Proc{Name: "nats-" + name, Bin: o.NATSServer, Log: o.Log, Args: []string{"-c", path}}}
		b.nodes = append(b.nodes, node)
		if err := node.proc.Start(); err != nil {
			return "", err
		}
		urls = append(urls, "nats://"+node.addr)
	}
	for _, node := range b.nodes {
		if err := waitListening(ctx, node.proc, node.addr); err != nil {
			return "", err
		}
	}
	return strings.Join(urls, ","), nil
}

// faultLeader is nodeKiller's, for the run's own JetStream cluster.
func (b *natsBroker) faultLeader(ctx context.Context, pause bool, down time.Duration, say func(string, ...any)) (faulted, moved bool, err error) {
	if len(b.nodes) == 0 {
		return false, false, errors.New("not a cluster")
	}
	leader, err := streamLeader(ctx, b.js)
	if err != nil {
		return false, false, fmt.Errorf("read the stream's leader: %w", err)
	}
	var victim *natsNode
	for _, n := range b.nodes {
		if n.name == leader {
			victim = n
		}
	}
	if victim == nil {
		return false, false, fmt.Errorf("the stream's leader %q is none of the cluster's servers", leader)
	}
	// The harness reads the stream through the other servers: its own
	// connection may be to the victim, which a pause leaves open and
	// silent.
	var others []string
	for _, n := range b.nodes {
		if n != victim {
			others = append(others, "nats://"+n.addr)
		}
	}
	nc, err := nats.Connect(strings.Join(others, ","))
	if err != nil {
		return false, false, fmt.Errorf("connect to the other servers: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, false, err
	}
	if pause {
		_ = victim.proc.Signal(syscall.SIGSTOP)
		say("broker: SIGSTOP %s, the stream's leader", victim.name)
	} else {
		_ = victim.proc.Signal(syscall.SIGKILL)
		victim.proc.Wait(10 * time.Second)
		say("broker: SIGKILL %s, the stream's leader", victim.name)
	}
	// From here on the fault runs to its end, the load's end
	// notwithstanding: the settle needs all three servers back.
	ctx = context.WithoutCancel(ctx)
	// Another server must take the lead: the stream keeps two of its
	// three replicas, a quorum.
	var now string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if now, err = streamLeader(ctx, js); err == nil && now != "" && now != victim.name {
			moved = true
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if moved {
		say("broker: %s leads the stream", now)
	} else {
		say("broker: no other server took the stream's lead from %s within 30 s (last: %q, %v)", victim.name, now, err)
	}
	sleepCtx(ctx, down)
	if pause {
		if err := victim.proc.Signal(syscall.SIGCONT); err != nil {
			return true, moved, fmt.Errorf("SIGCONT %s: %w", victim.name, err)
		}
	} else {
		if err := victim.proc.Start(); err != nil {
			return true, moved, fmt.Errorf("start %s again: %w", victim.name, err)
		}
		if err := waitListening(ctx, victim.proc, victim.addr); err != nil {
			return true, moved, err
		}
	}
	// The next kill waits until the server started again caught up:
	// killing a second replica before then would take the quorum.
	deadline = time.Now().Add(60 * time.Second)
	for {
		caught, err := b.replicasCurrent(ctx, js)
		if caught {
			break
		}
		if time.Now().After(deadline) {
			return true, moved, fmt.Errorf("%s: started again, did not catch up within 60 s (%v)", victim.name, err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	say("broker: %s back and current", victim.name)
	return true, moved, nil
}

// streamLeader returns the server that leads the shop's stream.
func streamLeader(ctx context.Context, js jetstream.JetStream) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, shop.Stream)
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil {
		return "", errors.New("the stream has no cluster information")
	}
	return info.Cluster.Leader, nil
}

// replicasCurrent reports whether the shop's stream has a leader and
// every replica is current.
func (b *natsBroker) replicasCurrent(ctx context.Context, js jetstream.JetStream) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, shop.Stream)
	if err != nil {
		return false, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, err
	}
	c := info.Cluster
	if c == nil || c.Leader == "" || len(c.Replicas) != len(b.nodes)-1 {
		return false, nil
	}
	for _, r := range c.Replicas {
		if !r.Current || r.Offline {
			return false, nil
		}
	}
	return true, nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

var _ nodeKiller = (*natsBroker)(nil)
