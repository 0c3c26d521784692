package ferryamqp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// envManagement names the URL of the test RabbitMQ server's management
// API; default: the host, user and password of the AMQP URL
// (testenv.EnvAMQP) on http port 15672.
const envManagement = "FERRY_TEST_AMQP_MANAGEMENT_URL"

// testManagementURL returns the management API's URL of the shared test
// server, skipping the test (or failing it under FERRY_REQUIRE_SERVICES=1)
// when the API does not answer.
func testManagementURL(t *testing.T) string {
	t.Helper()
	ferryamqptest.UseRabbitMQ(t)
	raw := os.Getenv(envManagement)
	if raw == "" {
		u, err := url.Parse(testenv.URL(testenv.EnvAMQP))
		if err != nil {
			t.Fatalf("%s: %v", testenv.EnvAMQP, err)
		}
		m := &url.URL{Scheme: "http", User: u.User, Host: u.Hostname() + ":15672"}
		if m.User == nil {
			m.User = url.UserPassword("guest", "guest")
		}
		raw = m.String()
	}
	what := "RabbitMQ's management API at " + ferrytype.RedactURL(raw) + " (" + envManagement + ")"
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", envManagement, ferrytype.RedactSecrets(err.Error(), raw))
	}
	req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), http.MethodGet,
		u.Scheme+"://"+u.Host+strings.TrimRight(u.EscapedPath(), "/")+"/api/overview", nil)
	require.NoError(t, err)
	pass, _ := u.User.Password()
	req.SetBasicAuth(u.User.Username(), pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		testenv.Unavailable(t, what, ferrytype.RedactError(err, raw))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		testenv.Unavailable(t, what, errors.New(resp.Status))
	}
	return raw
}

// durabilityPublisher dials a publisher on the shared server that checks
// (without declaring) the queues named, with the management API at mgmt.
func durabilityPublisher(t *testing.T, amqpURL, mgmt string, queues ...string) *Publisher {
	t.Helper()
	cfg := &Config{ManagementURL: mgmt}
	for _, q := range queues {
		cfg.Topology.Queues = append(cfg.Topology.Queues, Queue{Name: q})
	}
	p, err := Dial(testenv.Context(t, 10*time.Second), amqpURL, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func oneRow(t *testing.T, p *Publisher) ferrybroker.Durability {
	t.Helper()
	rows, err := p.Durability(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	t.Logf("%s: %s: %s; fix: %s", rows[0].Destination, rows[0].Level, rows[0].Settings, rows[0].Fix)
	return rows[0]
}

// Durability on the real server and its real management API. The server
// is one node, so no queue of it is replicated: TestDurabilityClassification
// covers that with the API's answers for a 3-node cluster.
func TestDurabilityOnRabbitMQ(t *testing.T) {
	t.Parallel()
	mgmt := testManagementURL(t)
	amqpURL := testenv.URL(testenv.EnvAMQP)
	conn := ferryamqptest.RabbitMQ(t)

	t.Run("ClassicDurableIsSingle", func(t *testing.T) {
		t.Parallel()
		q := ferryamqptest.RabbitMQQueue(t, conn, "classic", nil)
		r := oneRow(t, durabilityPublisher(t, amqpURL, mgmt, q.Name))
		require.Equal(t, "queue "+q.Name, r.Destination)
		require.Equal(t, ferrybroker.DurabilitySingle, r.Level)
		require.True(t, strings.HasPrefix(r.Settings, "classic queue: on one node"), r.Settings)
		require.Contains(t, r.Settings, "on the node's disk (persisted, fsync batched)")
		require.Contains(t, r.Fix, "x-queue-type quorum")
		require.Contains(t, r.Fix, "use a quorum queue")
	})

	t.Run("QuorumOfOneMemberIsSingle", func(t *testing.T) {
		t.Parallel()
		q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
		// New, on a borrowed connection: the virtual host comes from the
		// connection, not from a URL.
		own := ferryamqptest.RabbitMQ(t)
		p, err := New(testenv.Context(t, 10*time.Second), own, &Config{ManagementURL: mgmt,
			Topology: Topology{Queues: []Queue{{Name: q.Name}}}})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		r := oneRow(t, p)
		require.Equal(t, "queue "+q.Name, r.Destination)
		require.Equal(t, ferrybroker.DurabilitySingle, r.Level)
		require.True(t, strings.HasPrefix(r.Settings, "quorum queue, 1 member, 1 online;"), r.Settings)
		require.Contains(t, r.Settings, "majority of the members has written it to its log (fsynced)")
		require.Contains(t, r.Fix, "3 members")
	})

	t.Run("MissingQueueIsUnknown", func(t *testing.T) {
		t.Parallel()
		// The publisher checks its queue at start: the queue goes after.
		q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
		p := durabilityPublisher(t, amqpURL, mgmt, q.Name)
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDelete(q.Name, false, false, false)
		require.NoError(t, err)
		_ = ch.Close()
		r := oneRow(t, p)
		require.Equal(t, ferrybroker.DurabilityUnknown, r.Level)
		require.Contains(t, r.Settings, `queue not found in virtual host "/"`)
	})

	t.Run("NoManagementURLIsUnknown", func(t *testing.T) {
		t.Parallel()
		q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
		r := oneRow(t, durabilityPublisher(t, amqpURL, "", q.Name))
		require.Equal(t, ferrybroker.Durability{Destination: "queue " + q.Name, Level: ferrybroker.DurabilityUnknown,
			Settings: "queue type not readable over AMQP 0-9-1", Fix: "give the management API (--management-url http://…:15672)"}, r)
	})

	t.Run("WrongPasswordIsAnErrorWithoutIt", func(t *testing.T) {
		t.Parallel()
		q := ferryamqptest.RabbitMQQueue(t, conn, "classic", nil)
		u, err := url.Parse(mgmt)
		require.NoError(t, err)
		wrong := testenv.Name("wrong-password-")
		u.User = url.UserPassword(u.User.Username(), wrong)
		rows, err := durabilityPublisher(t, amqpURL, u.String(), q.Name).Durability(testenv.Context(t, 10*time.Second))
		require.Error(t, err)
		t.Log(err)
		require.Nil(t, rows)
		require.Contains(t, err.Error(), "refused the credentials")
		require.Contains(t, err.Error(), "401")
		require.NotContains(t, err.Error(), wrong)
	})

	t.Run("NoQueueNamedIsUnknown", func(t *testing.T) {
		t.Parallel()
		p, err := New(testenv.Context(t, 10*time.Second), ferryamqptest.RabbitMQ(t), &Config{ManagementURL: mgmt})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		require.Equal(t, ferrybroker.Durability{Destination: "exchange amq.topic", Level: ferrybroker.DurabilityUnknown,
			Settings: "the queues bound to it are not named", Fix: "name the queue (--queue) so ferry can read its type"}, oneRow(t, p))
	})

	t.Run("VirtualHostOfTheURL", func(t *testing.T) {
		t.Parallel()
		// A virtual host whose name holds a slash, which the API's path
		// must carry escaped: ferry/durability_1234abcd.
		vhost := testenv.Name("ferry/durability_")
		vhURL := managementVhost(t, mgmt, amqpURL, vhost)
		vconn, err := amqp.DialConfig(vhURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = vconn.Close() })
		// Deleted with the virtual host.
		q := ferryamqptest.RabbitMQQueue(t, vconn, "classic", nil)
		r := oneRow(t, durabilityPublisher(t, vhURL, mgmt, q.Name))
		require.Equal(t, ferrybroker.DurabilitySingle, r.Level, r.Settings)
		require.True(t, strings.HasPrefix(r.Settings, "classic queue: on one node"), r.Settings)
	})
}

// managementVhost creates the virtual host vhost through the management
// API at mgmt, gives its user every permission on it, deletes it when the
// test ends, and returns amqpURL with that virtual host.
func managementVhost(t *testing.T, mgmt, amqpURL, vhost string) string {
	t.Helper()
	u, err := url.Parse(mgmt)
	require.NoError(t, err)
	base := u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/") + "/api"
	pass, _ := u.User.Password()
	call := func(method, path, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.SetBasicAuth(u.User.Username(), pass)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, ferrytype.RedactError(err, mgmt))
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, resp.Status)
	}
	esc := url.PathEscape(vhost)
	call(http.MethodPut, "/vhosts/"+esc, "")
	t.Cleanup(func() { call(http.MethodDelete, "/vhosts/"+esc, "") })
	call(http.MethodPut, "/permissions/"+esc+"/"+url.PathEscape(u.User.Username()), `{"configure":".*","write":".*","read":".*"}`)
	a, err := url.Parse(amqpURL)
	require.NoError(t, err)
	a.Path, a.RawPath = "/"+vhost, "/"+esc
	return a.String()
}

// quorumJSON is RabbitMQ 3.10's answer to GET /api/queues/%2F/NAME for a
// quorum queue, as the local server gave it for one of 1 member, with
// the members, online and leader of a 3-node cluster put in.
const quorumJSON = `{"consumer_details":[],"arguments":{"x-queue-type":"quorum"},"auto_delete":false,"consumer_capacity":0,` +
	`"consumer_utilisation":0,"consumers":0,"deliveries":[],"durable":true,"effective_policy_definition":{},"exclusive":false,` +
	`"garbage_collection":{"fullsweep_after":65535,"max_heap_size":0,"min_bin_vheap_size":46422,"min_heap_size":233,"minor_gcs":2},` +
	`"incoming":[],"leader":"rabbit@node-a","members":["rabbit@node-a","rabbit@node-b","rabbit@node-c"],"memory":88844,` +
	`"message_bytes":0,"message_bytes_dlx":0,"message_bytes_persistent":0,"message_bytes_ram":0,"message_bytes_ready":0,` +
	`"message_bytes_unacknowledged":0,"messages":0,"messages_details":{"rate":0.0},"messages_dlx":0,"messages_persistent":0,` +
	`"messages_ram":0,"messages_ready":0,"messages_ready_details":{"rate":0.0},"messages_unacknowledged":0,` +
	`"messages_unacknowledged_details":{"rate":0.0},"name":"NAME","node":"rabbit@node-a","online":ONLINE,` +
	`"open_files":{"rabbit@node-a":0},"operator_policy":null,"policy":null,"reductions":19170,"reductions_details":{"rate":0.0},` +
	`"single_active_consumer_ctag":null,"state":"running","type":"quorum","vhost":"/"}`

// classicJSON is the local server's answer for a durable classic queue.
const classicJSON = `{"consumer_details":[],"arguments":{"x-queue-type":"classic"},"auto_delete":false,"backing_queue_status":` +
	`{"avg_ack_egress_rate":0.0,"avg_ack_ingress_rate":0.0,"avg_egress_rate":0.0,"avg_ingress_rate":0.0,` +
	`"delta":["delta","undefined",0,0,"undefined"],"len":0,"mode":"default","next_deliver_seq_id":0,"next_seq_id":0,"q1":0,"q2":0,` +
	`"q3":0,"q4":0,"target_ram_count":"infinity","version":1},"consumer_capacity":0,"consumer_utilisation":0,"consumers":0,` +
	`"deliveries":[],"durable":DURABLE,"effective_policy_definition":POLICYDEF,"exclusive":false,"exclusive_consumer_tag":null,` +
	`"garbage_collection":{"fullsweep_after":65535,"max_heap_size":0,"min_bin_vheap_size":46422,"min_heap_size":233,"minor_gcs":11},` +
	`"head_message_timestamp":null,"idle_since":"2026-12-07T15:16:56.362+00:00","incoming":[],"memory":15504,"message_bytes":0,` +
	`"messages":0,"name":"NAME","node":"rabbit@node-a","operator_policy":null,"policy":POLICY,"recoverable_slaves":null,` +
	`"slave_nodes":[],"synchronised_slave_nodes":[],"state":"running","type":"classic","vhost":"/"}`

// streamJSON is the local server's answer for a stream, its members those
// of a 3-node cluster.
const streamJSON = `{"consumer_details":[],"arguments":{"x-queue-type":"stream"},"auto_delete":false,"consumers":0,"deliveries":[],` +
	`"durable":true,"effective_policy_definition":{},"exclusive":false,"incoming":[],MEMBERS"memory":42568,"messages":0,` +
	`"name":"NAME","node":"rabbit@node-a","operator_policy":null,"policy":null,"readers":{"rabbit@node-a":0},"reductions":0,` +
	`"state":"running","type":"stream","vhost":"/"}`

// What Durability makes of the management API's answers, on an
// httptest server that serves them as RabbitMQ would: checking the
// credentials and the escaped virtual host, under a path prefix.
func TestDurabilityClassification(t *testing.T) {
	t.Parallel()
	const user, pass = "ferry", "s3cret-mgmt-pw"
	r := strings.NewReplacer
	answers := map[string]string{
		"q3of3":     r("NAME", "q3of3", "ONLINE", `["rabbit@node-a","rabbit@node-b","rabbit@node-c"]`).Replace(quorumJSON),
		"q2of3":     r("NAME", "q2of3", "ONLINE", `["rabbit@node-a","rabbit@node-c"]`).Replace(quorumJSON),
		"q1of3":     r("NAME", "q1of3", "ONLINE", `["rabbit@node-a"]`).Replace(quorumJSON),
		"classic":   r("NAME", "classic", "DURABLE", "true", "POLICYDEF", "{}", "POLICY", "null").Replace(classicJSON),
		"transient": r("NAME", "transient", "DURABLE", "false", "POLICYDEF", "{}", "POLICY", "null").Replace(classicJSON),
		"mirrored": r("NAME", "mirrored", "DURABLE", "true", "POLICYDEF", `{"ha-mode":"all"}`, "POLICY", `"ha-all"`).
			Replace(classicJSON),
		"stream3": r("NAME", "stream3", "MEMBERS",
			`"members":["rabbit@node-a","rabbit@node-b","rabbit@node-c"],"online":["rabbit@node-a","rabbit@node-b","rabbit@node-c"],`).
			Replace(streamJSON),
		"stream-new": r("NAME", "stream-new", "MEMBERS", "").Replace(streamJSON),
		"delayed":    `{"name":"delayed","type":"x-delayed","durable":true,"vhost":"/"}`,
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"not_authorized","reason":"Login failed"}`))
			return
		}
		name, ok := strings.CutPrefix(req.URL.EscapedPath(), "/rabbitmq/api/queues/%2F/")
		if body := answers[name]; ok && body != "" {
			_, _ = w.Write([]byte(body))
			return
		}
		if name, ok := strings.CutPrefix(req.URL.EscapedPath(), "/rabbitmq/api/queues/ferry%2Fprod/"); ok && name == "q3of3" {
			_, _ = w.Write([]byte(answers[name]))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"Object Not Found","reason":"Not Found"}`))
	})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	mgmt := "http://" + user + ":" + pass + "@" + srv.Listener.Addr().String() + "/rabbitmq/"

	// publisher and configured make a publisher that never connects:
	// Durability asks the management API only.
	configured := func(t *testing.T, cfg *Config, vhost string, queues ...string) *Publisher {
		for _, q := range queues {
			cfg.Topology.Queues = append(cfg.Topology.Queues, Queue{Name: q})
		}
		p, err := newPublisher(cfg)
		require.NoError(t, err)
		p.vhost = vhost
		return p
	}
	publisher := func(t *testing.T, mgmt, vhost string, queues ...string) *Publisher {
		return configured(t, &Config{ManagementURL: mgmt}, vhost, queues...)
	}

	t.Run("Rows", func(t *testing.T) {
		t.Parallel()
		names := []string{"q3of3", "q2of3", "q1of3", "classic", "transient", "mirrored", "stream3", "stream-new", "delayed", "gone"}
		rows, err := publisher(t, mgmt, "/", names...).Durability(testenv.Context(t, 10*time.Second))
		require.NoError(t, err)
		require.Len(t, rows, len(names))
		byName := map[string]ferrybroker.Durability{}
		for i, row := range rows {
			t.Logf("%s: %s: %s; fix: %s", row.Destination, row.Level, row.Settings, row.Fix)
			require.Equal(t, "queue "+names[i], row.Destination)
			byName[names[i]] = row
		}

		// 3 members, 3 online: replicated, and nothing to fix.
		require.Equal(t, ferrybroker.Durability{Destination: "queue q3of3", Level: ferrybroker.DurabilityReplicated,
			Settings: "quorum queue, 3 members, 3 online; RabbitMQ confirms a persistent message once a majority of the members " +
				"has written it to its log (fsynced)"}, byName["q3of3"])
		// 2 of 3 online is still a majority: a confirm still needs 2 disks.
		require.Equal(t, ferrybroker.DurabilityReplicated, byName["q2of3"].Level)
		require.True(t, strings.HasPrefix(byName["q2of3"].Settings, "quorum queue, 3 members, 2 online;"), byName["q2of3"].Settings)
		// 1 of 3 online: no majority, so no leader and no confirm; counted
		// as single, what it holds reachable being at most one node's.
		q1 := byName["q1of3"]
		require.Equal(t, ferrybroker.DurabilitySingle, q1.Level)
		require.True(t, strings.HasPrefix(q1.Settings, "quorum queue, 3 members, 1 online: no majority online"), q1.Settings)
		require.Equal(t, "bring its offline members back (rabbit@node-b, rabbit@node-c)", q1.Fix)

		require.Equal(t, ferrybroker.DurabilitySingle, byName["classic"].Level)
		require.Equal(t, "classic queue: on one node (rabbit@node-a); RabbitMQ confirms a persistent message once it is on "+
			"the node's disk (persisted, fsync batched)", byName["classic"].Settings)
		require.Contains(t, byName["classic"].Fix, "declare the queue as a quorum queue (x-queue-type quorum, "+
			"ferry relay --queue-type quorum --declare) on a cluster of 3 nodes")

		require.Equal(t, ferrybroker.DurabilityVolatile, byName["transient"].Level)
		require.Contains(t, byName["transient"].Settings, "not durable")

		m := byName["mirrored"]
		require.Equal(t, ferrybroker.DurabilitySingle, m.Level, "mirroring is no replication ferry counts")
		require.Contains(t, m.Settings, `mirrored by policy "ha-all" (ha-mode all)`)
		require.Contains(t, m.Settings, "Jepsen")
		require.Contains(t, m.Settings, "use a quorum queue")

		require.Equal(t, ferrybroker.DurabilityReplicated, byName["stream3"].Level)
		require.True(t, strings.HasPrefix(byName["stream3"].Settings, "stream, 3 members, 3 online;"), byName["stream3"].Settings)
		require.Empty(t, byName["stream3"].Fix)

		require.Equal(t, ferrybroker.DurabilityUnknown, byName["stream-new"].Level)
		require.Equal(t, ferrybroker.DurabilityUnknown, byName["delayed"].Level)
		require.Contains(t, byName["delayed"].Settings, `"x-delayed"`)
		require.Equal(t, ferrybroker.DurabilityUnknown, byName["gone"].Level)
		require.Contains(t, byName["gone"].Settings, "queue not found")

		for name, row := range byName {
			if row.Level != ferrybroker.DurabilityReplicated {
				require.NotEmpty(t, row.Fix, name)
			}
		}
	})

	t.Run("VirtualHostIsEscaped", func(t *testing.T) {
		t.Parallel()
		r := oneRow(t, publisher(t, mgmt, "ferry/prod", "q3of3"))
		require.Equal(t, ferrybroker.DurabilityReplicated, r.Level, r.Settings)
	})

	t.Run("HTTPSWithConnectionTLS", func(t *testing.T) {
		t.Parallel()
		tlsSrv := httptest.NewTLSServer(api)
		t.Cleanup(tlsSrv.Close)
		pool := x509.NewCertPool()
		pool.AddCert(tlsSrv.Certificate())
		mgmtTLS := "https://" + user + ":" + pass + "@" + tlsSrv.Listener.Addr().String() + "/rabbitmq"
		rows, err := configured(t, &Config{ManagementURL: mgmtTLS, Connection: ConnectionConfig{TLS: &tls.Config{RootCAs: pool}}}, "/", "q3of3").
			Durability(testenv.Context(t, 10*time.Second))
		require.NoError(t, err)
		require.Equal(t, ferrybroker.DurabilityReplicated, rows[0].Level)
		// Without those roots the server's certificate is refused.
		_, err = publisher(t, mgmtTLS, "/", "q3of3").Durability(testenv.Context(t, 10*time.Second))
		require.ErrorContains(t, err, "certificate")
		require.NotContains(t, err.Error(), pass)
	})

	t.Run("WrongPasswordIsAnError", func(t *testing.T) {
		t.Parallel()
		bad := strings.Replace(mgmt, pass, "other-pw-9f3k", 1)
		rows, err := publisher(t, bad, "/", "q3of3").Durability(testenv.Context(t, 10*time.Second))
		require.Nil(t, rows)
		require.ErrorContains(t, err, "the management API refused the credentials (401 Unauthorized: Login failed)")
		require.NotContains(t, err.Error(), "other-pw-9f3k")
		require.Contains(t, err.Error(), "ferry:xxxxx@")
	})

	t.Run("UnreachableIsAnError", func(t *testing.T) {
		t.Parallel()
		ln := httptest.NewServer(http.NotFoundHandler())
		addr := ln.Listener.Addr().String()
		ln.Close() // nothing listens there now
		rows, err := publisher(t, "http://ferry:"+pass+"@"+addr, "/", "q3of3").Durability(testenv.Context(t, 10*time.Second))
		require.Nil(t, rows)
		require.Error(t, err)
		require.NotContains(t, err.Error(), pass)
	})

	t.Run("NotTheAPIIsAnError", func(t *testing.T) {
		t.Parallel()
		html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("<html>RabbitMQ Management</html>"))
		}))
		t.Cleanup(html.Close)
		_, err := publisher(t, "http://ferry:"+pass+"@"+html.Listener.Addr().String(), "/", "q3of3").
			Durability(testenv.Context(t, 10*time.Second))
		require.ErrorContains(t, err, "not the management API's JSON")
		require.NotContains(t, err.Error(), pass)
	})

	t.Run("ContextEndsTheRequest", func(t *testing.T) {
		t.Parallel()
		hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) { <-req.Context().Done() }))
		t.Cleanup(hang.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := publisher(t, "http://ferry:"+pass+"@"+hang.Listener.Addr().String(), "/", "q3of3").Durability(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("ConfigIsChecked", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []string{"ftp://ferry:" + pass + "@host:15672", "http://ferry:" + pass + "@", "http://ferry:" + pass + "@host:15672/?x=1",
			"http://ferry:" + pass + "@host:bad port"} {
			_, err := newPublisher(&Config{ManagementURL: bad})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, bad)
			require.NotContains(t, err.Error(), pass, bad)
		}
	})
}
