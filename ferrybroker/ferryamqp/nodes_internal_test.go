package ferryamqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// How a broker URL splits into the URLs of its nodes.
func TestSplitURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw  string
		want []string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h1:5681/,amqp://u:p@h2:5682/,amqps://u:p@h3:5683/",
			[]string{"amqp://u:p@h1:5681/", "amqp://u:p@h2:5682/", "amqps://u:p@h3:5683/"}},
		// Spaces around the elements of a list go; a single URL is kept
		// as it is (amqp091-go then refuses its spaces, as it always did).
		{"amqp://h1/ , amqp://h2/", []string{"amqp://h1/", "amqp://h2/"}},
		{" amqp://h1/", []string{" amqp://h1/"}},
		// A comma in a password, unencoded, stays in its URL, alone or in
		// a list.
		{"amqp://u:pa,ss@h/", []string{"amqp://u:pa,ss@h/"}},
		{"amqp://u:pa,ss@h1/,amqp://u:pa,ss@h2/", []string{"amqp://u:pa,ss@h1/", "amqp://u:pa,ss@h2/"}},
		// A comma followed by no URL is one URL's, as before lists: a
		// virtual host "a,b" (also a bare host after a comma, which then
		// fails to connect as the virtual host it makes).
		{"amqp://h/a,b", []string{"amqp://h/a,b"}},
		// Empty elements make a list, so that they are refused.
		{"amqp://h/,", []string{"amqp://h/", ""}},
		{",amqp://h/", []string{"", "amqp://h/"}},
		{"amqp://h1/,,amqp://h2/", []string{"amqp://h1/", "", "amqp://h2/"}},
	} {
		require.Equal(t, c.want, SplitURL(c.raw), c.raw)
	}
}

// What a list is checked for, and that a single URL is read as before.
func TestParseNodes(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-pw"
	n, err := parseNodes("amqp://u:" + pw + "@h1:5681/app,amqp://u:" + pw + "@h2:5682/app")
	require.NoError(t, err)
	require.Equal(t, []string{"amqp://u:" + pw + "@h1:5681/app", "amqp://u:" + pw + "@h2:5682/app"}, n.urls)
	require.Equal(t, []string{"amqp://u:xxxxx@h1:5681/app", "amqp://u:xxxxx@h2:5682/app"}, n.addrs)
	require.Equal(t, "app", n.vhost)

	// "/" and no path are the same virtual host, the default.
	n, err = parseNodes("amqp://u:" + pw + "@h1:5681/,amqp://u:" + pw + "@h2:5682")
	require.NoError(t, err)
	require.Equal(t, "/", n.vhost)

	one, err := parseNodes("amqp://u:" + pw + "@h1:5681/app")
	require.NoError(t, err)
	require.Len(t, one.urls, 1)
	require.Equal(t, "app", one.vhost)

	for _, c := range []struct{ raw, want string }{
		{"amqp://u:" + pw + "@h1/,", "node 2 of the 2 comma-separated URLs is empty"},
		{",amqp://u:" + pw + "@h1/", "node 1 of the 2 comma-separated URLs is empty"},
		{"amqp://u:" + pw + "@h1/,,amqp://u:" + pw + "@h2/", "node 2 of the 3 comma-separated URLs is empty"},
		{"amqp://u:" + pw + "@h1/app,amqp://u:" + pw + "@h2/other",
			`node 1 names virtual host "app" and node 2 "other": list the nodes of one cluster with the same virtual host`},
		{"amqp://u:" + pw + "@h1/,amqp://u:" + pw + "@h2/app", `node 1 names virtual host "/" and node 2 "app"`},
		{"amqp://u:" + pw + "@h1/,nats://u:" + pw + "@h2:4222", "node 2 (nats://u:xxxxx@h2:4222): AMQP scheme must be"},
		{"amqp://u:" + pw + "@h1/,amqp://u:" + pw + "@h2:port/", "node 2 (amqp://u:xxxxx@h2:port/)"},
		// A single URL fails as it always did.
		{"http://u:" + pw + "@h1/", "broker URL http://u:xxxxx@h1/: AMQP scheme must be either 'amqp://' or 'amqps://'"},
	} {
		_, err := parseNodes(c.raw)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, c.raw)
		require.ErrorContains(t, err, c.want, c.raw)
		require.NotContains(t, err.Error(), pw, c.raw)
		require.Equal(t, err.Error(), CheckURL(c.raw).Error())
	}
	// Every constructor that takes a broker URL checks it so.
	bad := "amqp://u:" + pw + "@h1/,"
	_, err = Dial(context.Background(), bad, nil)
	require.ErrorContains(t, err, "is empty")
	_, err = DialConsumer(bad, "q", func(context.Context, *ferrybroker.Delivery) error { return nil }, nil)
	require.ErrorContains(t, err, "is empty")
	_, err = Connect(context.Background(), bad, nil)
	require.ErrorContains(t, err, "is empty")
}

// Each connection attempt starts at the node after the one last
// connected to and goes round the list once.
func TestNodesOrder(t *testing.T) {
	t.Parallel()
	n, err := parseNodes("amqp://h1/,amqp://h2/,amqp://h3/")
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, n.order(), "the first connection tries the nodes in the order given")
	n.reached(0)
	require.Equal(t, []int{1, 2, 0}, n.order())
	n.reached(2)
	require.Equal(t, []int{0, 1, 2}, n.order())
	n.reached(1)
	require.Equal(t, []int{2, 0, 1}, n.order())

	one, err := parseNodes("amqp://h1/")
	require.NoError(t, err)
	require.Equal(t, []int{0}, one.order())
	one.reached(0)
	require.Equal(t, []int{0}, one.order())
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// A failed attempt says why at every node, in the order tried, without
// the password; the next attempt starts after the node last reached.
func TestDialEveryNodeFails(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-pw"
	a, b, c := closedPort(t), closedPort(t), closedPort(t)
	n, err := parseNodes("amqp://u:" + pw + "@" + a + "/,amqp://u:" + pw + "@" + b + "/,amqp://u:" + pw + "@" + c + "/")
	require.NoError(t, err)
	cfg, err := ConnectionConfig{DialTimeout: 2 * time.Second}.withDefaults("ferry")
	require.NoError(t, err)
	dial := n.dialer(cfg)

	_, _, _, err = dial()
	var ne *nodesError
	require.ErrorAs(t, err, &ne)
	require.Len(t, ne.errs, 3)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "none of the 3 RabbitMQ nodes accepted a connection: connect to amqp://u:xxxxx@"+a+"/: "), msg)
	require.Less(t, strings.Index(msg, a), strings.Index(msg, b))
	require.Less(t, strings.Index(msg, b), strings.Index(msg, c))
	require.Contains(t, msg, "connection refused")
	require.NotContains(t, msg, pw)
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr, "each node's error is still there to inspect")

	n.reached(0) // as if a first connection had reached node 1
	_, _, _, err = dial()
	msg = err.Error()
	require.Less(t, strings.Index(msg, b), strings.Index(msg, c), "the attempt starts at node 2")
	require.Less(t, strings.Index(msg, c), strings.Index(msg, a), "and ends at node 1")

	// One URL fails as it always did: its own error, no list.
	one, err := parseNodes("amqp://u:" + pw + "@" + a + "/")
	require.NoError(t, err)
	_, _, _, err = one.dialer(cfg)()
	require.False(t, errors.As(err, &ne))
	require.True(t, strings.HasPrefix(err.Error(), "connect to amqp://u:xxxxx@"+a+"/: "), err.Error())
}

// On the shared server, through two proxies that stand for two nodes: a
// publisher dialled with a dead node first connects to the next; when
// its node goes, it reconnects to the other one and says so in one log
// line, with both addresses and no password.
func TestDialNodesMovesToTheNextNode(t *testing.T) {
	// serial: it cuts the network and bounds how long a reconnection takes.
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	p1, p2 := startProxy(t), startProxy(t)
	dead := "amqp://guest:guest@" + closedPort(t) + "/"
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	raw := dead + "," + p1.url() + "," + p2.url()
	pub, err := Dial(testenv.Context(t, 30*time.Second), raw, &Config{Logger: log,
		Connection: ConnectionConfig{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	require.Equal(t, ferrytype.RedactURL(raw), pub.String())
	addrOf := func() string {
		if c := pub.link.connection(); c != nil {
			return c.RemoteAddr().String()
		}
		return ""
	}
	require.Equal(t, p1.addr, addrOf(), "the dead first node is passed over")
	require.Empty(t, logs.Lines("connected to another RabbitMQ node"), "the first connection is no move")

	publishOne := func() {
		t.Helper()
		res := pub.Publish(testenv.Context(t, 10*time.Second), testMsgs(1, func(int) string { return q.RoutingKey }))
		require.NoError(t, res[0].Err)
	}
	publishOne()

	p1.stop()
	testenv.WaitFor(t, 20*time.Second, func() bool { return addrOf() == p2.addr },
		func() string {
			return "the publisher is on " + addrOf() + ", not on the third node " + p2.addr + "\n" + logs.String()
		})
	publishOne()
	moves := logs.Lines("connected to another RabbitMQ node")
	require.Len(t, moves, 1, logs.String())
	require.Contains(t, moves[0], "from=amqp://xxxxx:xxxxx@"+p1.addr+"/")
	require.Contains(t, moves[0], "to=amqp://xxxxx:xxxxx@"+p2.addr+"/")
	require.NotContains(t, logs.String(), "guest:guest")
	require.Empty(t, logs.Lines("connected to RabbitMQ again"), "a move is said once, not also as a plain reconnection")
	got := ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, 2, 10*time.Second)
	require.Len(t, got, 2)

	// The same node again (only the third answers): a plain reconnection.
	p2.stop()
	p2.restart()
	testenv.WaitFor(t, 20*time.Second, func() bool { return len(logs.Lines("connected to RabbitMQ again")) == 1 },
		func() string { return logs.String() })
	require.Len(t, logs.Lines("connected to another RabbitMQ node"), 1)
	require.Equal(t, p2.addr, addrOf())
}

// Config.ManagementURL as a list: Durability reads the first API that
// answers, passing over those that cannot be reached; with none
// reachable its error says why each failed, without a password.
func TestDurabilityReadsTheFirstManagementAPIThatAnswers(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-mgmt"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, p, _ := req.BasicAuth(); p != pw {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(strings.NewReplacer("NAME", "q3", "ONLINE", `["rabbit@node-a","rabbit@node-b","rabbit@node-c"]`).
			Replace(quorumJSON)))
	}))
	t.Cleanup(api.Close)
	dead1, dead2 := "http://u:"+pw+"@"+closedPort(t), "http://u:"+pw+"@"+closedPort(t)
	live := "http://u:" + pw + "@" + api.Listener.Addr().String()
	durability := func(mgmt string) ([]ferrybroker.Durability, error) {
		p, err := newPublisher(&Config{ManagementURL: mgmt, Topology: Topology{Queues: []Queue{{Name: "q3"}}}})
		require.NoError(t, err)
		p.vhost = "/"
		return p.Durability(testenv.Context(t, 10*time.Second))
	}

	rows, err := durability(dead1 + "," + live)
	require.NoError(t, err)
	require.Equal(t, ferrybroker.DurabilityReplicated, rows[0].Level, rows[0].Settings)

	_, err = durability(dead1 + "," + dead2)
	require.ErrorContains(t, err, "none of the 2 RabbitMQ management APIs answered: ")
	require.ErrorContains(t, err, "connection refused")
	require.NotContains(t, err.Error(), pw)

	// An API that answers, refusing the credentials, is the answer: the
	// next one is not asked.
	wrong := "http://u:other-pw-9f3k@" + api.Listener.Addr().String()
	_, err = durability(wrong + "," + live)
	require.ErrorContains(t, err, "refused the credentials")
	require.NotContains(t, err.Error(), "other-pw-9f3k")

	for _, bad := range []string{live + ",", live + ",," + live, "," + live} {
		_, err := newPublisher(&Config{ManagementURL: bad})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, bad)
		require.ErrorContains(t, err, "is empty", bad)
		require.NotContains(t, err.Error(), pw, bad)
	}
}
