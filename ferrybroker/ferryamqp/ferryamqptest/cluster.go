package ferryamqptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

// The three-node RabbitMQ cluster of the tests' own, which
// scripts/rabbitmq-cluster.sh starts (scripts/services.sh calls it): nodes
// ferry-c1@localhost, ferry-c2@localhost and ferry-c3@localhost, AMQP on
// 127.0.0.1:5681-5683, the management API on every node at
// 127.0.0.1:15681-15683, guest/guest. A test kills and restarts its nodes
// (RabbitMQCluster); nothing else uses them, and scripts/test.sh does not
// count them among the services that must run unchanged through the
// suite.

// EnvClusterScript names the path of scripts/rabbitmq-cluster.sh, which
// kills and starts the cluster's nodes; default: the one found in the
// working directory or a directory above it (the repository's).
const EnvClusterScript = "FERRY_TEST_RABBITMQ_CLUSTER_SCRIPT"

// ClusterNode is one node of the cluster.
type ClusterNode struct {
	N             int    // its number, 1 to 3, as rabbitmq-cluster.sh takes it
	Name          string // ferry-cN@localhost, for rabbitmqctl -n
	URL           string // its AMQP URL
	Port          int    // its AMQP port
	ManagementURL string // its management API, http://guest:guest@127.0.0.1:1568N
}

// Cluster is the cluster of the tests' own, held by one test at a time
// (RabbitMQCluster), which may kill and start its nodes.
type Cluster struct {
	Nodes  []ClusterNode
	script string
}

var (
	clusterHoldersMu sync.Mutex
	clusterHolders   = map[string]*Cluster{}
)

func heldCluster(t testing.TB) *Cluster {
	clusterHoldersMu.Lock()
	defer clusterHoldersMu.Unlock()
	for name := t.Name(); ; {
		if c := clusterHolders[name]; c != nil {
			return c
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return nil
		}
		name = name[:i]
	}
}

func newCluster() *Cluster {
	c := &Cluster{}
	for n := 1; n <= 3; n++ {
		c.Nodes = append(c.Nodes, ClusterNode{
			N:             n,
			Name:          fmt.Sprintf("ferry-c%d@localhost", n),
			URL:           fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", 5680+n),
			Port:          5680 + n,
			ManagementURL: fmt.Sprintf("http://guest:guest@127.0.0.1:%d", 15680+n),
		})
	}
	return c
}

// RabbitMQCluster returns the three-node cluster of the tests' own and
// holds it for the test: a file lock keeps every other test that holds
// it, of this process or another, waiting until this one ends, so that a
// test kills nodes under no one else. It skips the test when no node of
// the cluster answers (scripts/rabbitmq-cluster.sh start starts it), or
// fails it when FERRY_REQUIRE_SERVICES=1. A node a killed test left down
// is started first, and it returns once the three nodes run, clustered.
// Killing and starting nodes runs scripts/rabbitmq-cluster.sh
// (EnvClusterScript), which needs root or the rabbitmq user.
func RabbitMQCluster(t testing.TB) *Cluster {
	t.Helper()
	if c := heldCluster(t); c != nil {
		return c
	}
	c := newCluster()
	what := "the tests' own RabbitMQ cluster (ferry-c1..3@localhost, AMQP ports 5681-5683; scripts/rabbitmq-cluster.sh start)"
	if !slices.ContainsFunc(c.Nodes, func(n ClusterNode) bool { return portOpen(n.Port) }) {
		testenv.Unavailable(t, what, errors.New("no node answers"))
	}
	script, err := clusterScript()
	if err != nil {
		testenv.Unavailable(t, what, err)
	}
	c.script = script
	f, err := flock(filepath.Join(os.TempDir(), "ferry-test-rabbitmq-cluster.lock"), syscall.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unlock(f) })
	clusterHoldersMu.Lock()
	clusterHolders[t.Name()] = c
	clusterHoldersMu.Unlock()
	t.Cleanup(func() {
		clusterHoldersMu.Lock()
		delete(clusterHolders, t.Name())
		clusterHoldersMu.Unlock()
	})
	for _, n := range c.Nodes {
		if !portOpen(n.Port) {
			t.Logf("%s is down (a test killed meanwhile?): starting it", n.Name)
			c.Start(t, n.N)
		}
	}
	c.WaitRunning(t, 3*time.Minute)
	return c
}

// clusterScript finds scripts/rabbitmq-cluster.sh.
func clusterScript() (string, error) {
	if p := os.Getenv(EnvClusterScript); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", EnvClusterScript, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "rabbitmq-cluster.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("scripts/rabbitmq-cluster.sh not found above the working directory: set %s", EnvClusterScript)
		}
		dir = up
	}
}

// URLs returns the nodes' AMQP URLs, comma-separated, as ferryamqp.Dial
// takes them.
func (c *Cluster) URLs() string {
	var s []string
	for _, n := range c.Nodes {
		s = append(s, n.URL)
	}
	return strings.Join(s, ",")
}

// ManagementURLs returns the nodes' management APIs, comma-separated, as
// ferryamqp.Config.ManagementURL takes them.
func (c *Cluster) ManagementURLs() string {
	var s []string
	for _, n := range c.Nodes {
		s = append(s, n.ManagementURL)
	}
	return strings.Join(s, ",")
}

// Node returns node n (1 to 3).
func (c *Cluster) Node(n int) ClusterNode { return c.Nodes[n-1] }

// NodeAt returns the node whose AMQP port is port (a connection's remote
// port), and whether there is one.
func (c *Cluster) NodeAt(port int) (ClusterNode, bool) {
	for _, n := range c.Nodes {
		if n.Port == port {
			return n, true
		}
	}
	return ClusterNode{}, false
}

// NodeOf returns the node conn is connected to.
func (c *Cluster) NodeOf(t testing.TB, conn *amqp.Connection) ClusterNode {
	t.Helper()
	addr, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("connection's remote address %v is not TCP", conn.RemoteAddr())
	}
	n, ok := c.NodeAt(addr.Port)
	if !ok {
		t.Fatalf("the connection goes to %v, no node of the cluster", addr)
	}
	return n
}

// Conn returns a connection to the first node that accepts one, closed
// when the test ends.
func (c *Cluster) Conn(t testing.TB) *amqp.Connection {
	t.Helper()
	var errs []string
	for _, n := range c.Nodes {
		conn, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			dialled.Store(conn, n.URL)
			t.Cleanup(func() {
				dialled.Delete(conn)
				_ = conn.Close()
			})
			return conn
		}
		errs = append(errs, n.Name+": "+err.Error())
	}
	t.Fatalf("no node of the cluster accepts a connection: %s", strings.Join(errs, "; "))
	return nil
}

// DeleteQueue deletes the queue named name when the test ends, through
// the first node that answers (after the cleanups registered later, such
// as Kill's restart, have run).
func (c *Cluster) DeleteQueue(t testing.TB, name string) {
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			conn, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
			if err != nil {
				continue
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err == nil {
				_, err = ch.QueueDelete(name, false, false, false)
			}
			if err != nil {
				t.Logf("cleanup: delete queue %s: %v", name, err)
			}
			return
		}
		t.Logf("cleanup: delete queue %s: no node answers", name)
	})
}

// Kill kills node n (SIGKILL to its Erlang VM: no clean shutdown, its
// connections drop at once) and returns once its AMQP port is closed.
// Whatever happens next, the node is started again when the test ends,
// and the cleanup waits until the three nodes run.
func (c *Cluster) Kill(t testing.TB, n int) {
	t.Helper()
	node := c.Node(n)
	t.Cleanup(func() {
		if portOpen(node.Port) {
			return
		}
		if out, err := c.run("start-node", strconv.Itoa(n)); err != nil {
			t.Errorf("cleanup: rabbitmq-cluster.sh start-node %d: %v\n%s", n, err, out)
			return
		}
		if err := c.waitRunning(3 * time.Minute); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if out, err := c.run("kill-node", strconv.Itoa(n)); err != nil {
		t.Fatalf("rabbitmq-cluster.sh kill-node %d: %v\n%s", n, err, out)
	}
	if portOpen(node.Port) {
		t.Fatalf("%s still answers on port %d after rabbitmq-cluster.sh kill-node %d", node.Name, node.Port, n)
	}
}

// Start starts node n again (rabbitmq-cluster.sh start-node; its data was
// kept, so it rejoins) and waits until the three nodes run, clustered.
func (c *Cluster) Start(t testing.TB, n int) {
	t.Helper()
	if out, err := c.run("start-node", strconv.Itoa(n)); err != nil {
		t.Fatalf("rabbitmq-cluster.sh start-node %d: %v\n%s", n, err, out)
	}
	c.WaitRunning(t, 3*time.Minute)
}

// WaitRunning waits up to d until every node accepts AMQP connections and
// the cluster counts its three nodes running (the management API of a
// node that answers: GET /api/nodes), and fails the test otherwise.
func (c *Cluster) WaitRunning(t testing.TB, d time.Duration) {
	t.Helper()
	if err := c.waitRunning(d); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) waitRunning(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		running, err := c.RunningNodes()
		if err == nil && len(running) == len(c.Nodes) {
			for _, n := range c.Nodes {
				if err = waitRabbitMQ(n.URL, time.Until(deadline)); err != nil {
					return err
				}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the RabbitMQ cluster did not have its %d nodes running within %s: running %v (%v)",
				len(c.Nodes), d, running, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RunningNodes returns the names of the nodes the cluster counts as
// running, as the management API of the first node that answers says
// (GET /api/nodes). A killed node is counted out within seconds (the
// distribution link to it drops with its process).
func (c *Cluster) RunningNodes() ([]string, error) {
	var errs []string
	for _, n := range c.Nodes {
		var nodes []struct {
			Name    string `json:"name"`
			Running bool   `json:"running"`
		}
		if err := getJSON(n.ManagementURL, "/api/nodes", &nodes); err != nil {
			errs = append(errs, n.Name+": "+err.Error())
			continue
		}
		var running []string
		for _, x := range nodes {
			if x.Running {
				running = append(running, x.Name)
			}
		}
		slices.Sort(running)
		return running, nil
	}
	return nil, fmt.Errorf("no management API of the cluster answers: %s", strings.Join(errs, "; "))
}

// getJSON reads GET base+path into v.
func getJSON(base, path string, v any) error {
	u, err := urlWithoutUser(base)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.base+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(u.user, u.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.Unmarshal(body, v)
}

type splitURL struct{ base, user, pass string }

func urlWithoutUser(raw string) (splitURL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return splitURL{}, fmt.Errorf("%s: not a URL", redact(raw))
	}
	var s splitURL
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		s.user, s.pass, _ = strings.Cut(rest[:at], ":")
		rest = rest[at+1:]
	}
	s.base = scheme + "://" + strings.TrimRight(rest, "/")
	return s, nil
}

// run runs rabbitmq-cluster.sh with args.
func (c *Cluster) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...).CombinedOutput()
	return string(out), err
}

// portOpen reports whether something accepts TCP connections on the
// loopback port.
func portOpen(port int) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// PortOpen reports whether node n accepts TCP connections on its AMQP
// port: false once Kill returned, until Start.
func (c *Cluster) PortOpen(n int) bool { return portOpen(c.Node(n).Port) }

// KillNode is Kill for code without a test (the chaos suite's harness,
// under a test that holds the cluster): it returns an error rather than
// failing a test, and leaves starting the node again to the caller.
func (c *Cluster) KillNode(n int) error {
	if out, err := c.run("kill-node", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("rabbitmq-cluster.sh kill-node %d: %w: %s", n, err, strings.TrimSpace(out))
	}
	if node := c.Node(n); portOpen(node.Port) {
		return fmt.Errorf("%s still answers on port %d after rabbitmq-cluster.sh kill-node %d", node.Name, node.Port, n)
	}
	return nil
}

// StartNode is Start for code without a test: it starts node n again and
// waits up to d until the three nodes run, clustered.
func (c *Cluster) StartNode(n int, d time.Duration) error {
	if out, err := c.run("start-node", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("rabbitmq-cluster.sh start-node %d: %w: %s", n, err, strings.TrimSpace(out))
	}
	return c.waitRunning(d)
}

// QueueMembers reads quorum queue name of vhost from the management API
// of the first node that answers: its leader, its members and those of
// them online.
func (c *Cluster) QueueMembers(vhost, name string) (leader string, members, online []string, err error) {
	var errs []string
	for _, n := range c.Nodes {
		var q struct {
			Leader  string   `json:"leader"`
			Members []string `json:"members"`
			Online  []string `json:"online"`
		}
		if err := getJSON(n.ManagementURL, "/api/queues/"+url.PathEscape(vhost)+"/"+url.PathEscape(name), &q); err != nil {
			errs = append(errs, n.Name+": "+err.Error())
			continue
		}
		return q.Leader, q.Members, q.Online, nil
	}
	return "", nil, nil, fmt.Errorf("no management API of the cluster answers: %s", strings.Join(errs, "; "))
}

// PauseNode stops node n's Erlang VM (SIGSTOP): it keeps its connections
// and its place in the cluster and answers nothing, as a node does that
// hangs on its disk or is starved of CPU, until ResumeNode.
func (c *Cluster) PauseNode(n int) error {
	if out, err := c.run("pause-node", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("rabbitmq-cluster.sh pause-node %d: %w: %s", n, err, strings.TrimSpace(out))
	}
	return nil
}

// ResumeNode lets node n's Erlang VM run again (SIGCONT).
func (c *Cluster) ResumeNode(n int) error {
	if out, err := c.run("resume-node", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("rabbitmq-cluster.sh resume-node %d: %w: %s", n, err, strings.TrimSpace(out))
	}
	return nil
}
