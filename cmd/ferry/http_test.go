package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// freePort returns a loopback address nobody listens on right now, for a
// child process to listen on. The port is drawn below the kernel's
// ephemeral range (ip_local_port_range): a port of that range, free when
// drawn, may be taken before the child binds it by any outgoing
// connection of the machine, of which the tests make thousands; one below
// it only by another listener asking for that very port.
func freePort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	for range 1000 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(1024+rand.IntN(low-1024)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use: draw again
		}
		require.NoError(t, ln.Close())
		return addr
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The daemon serves /healthz, /metrics and /readyz; /readyz turns 503
// while the database or the broker is unreachable and 200 again after.
// Passwords in the URLs never reach its output.
func TestRelayServesMetricsAndReadiness(t *testing.T) {
	// serial: it cuts the broker's network and waits for readiness to follow.
	b := setupOps(t, "postgres")
	_, prefix := testsvc.JetStreamStream(t, testsvc.NATS(t))
	b.enqueue(t, orderPaid("1", prefix+".paid"))
	dbURL, dbProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvPostgres))
	dbURL = strings.Replace(dbURL, "postgres@", "postgres:s3cr3tpw@", 1) + "&connect_timeout=2"
	natsURL, natsProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	natsURL = strings.Replace(natsURL, "nats://", "nats://ferry:s3cr3tpw@", 1)
	addr := freePort(t)
	cmd, out := child(t, nil, "relay", "--database-url", dbURL, "--table", b.st.Driver.Table(), "--broker-url", natsURL,
		"--http-addr", addr, "--metrics-interval", "50ms", "--ready-timeout", "1s", "--poll-interval", "20ms",
		"--log-format", "json", "--log-level", "debug")
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := "http://" + addr

	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/healthz"); return code == 200 }, func() string { return "healthz" })
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		_, body := get(t, base+"/metrics")
		return strings.Contains(body, `ferry_relay_sent_total{destination="`+prefix+`.paid",table="`+b.st.Driver.Table()+`"} 1`)
	}, func() string { return "the event is sent and counted by destination" })
	// The outbox gauges exist only while the latest poll succeeded, and a
	// poll has Interval/2 (25 ms) to answer: on a loaded machine one fails
	// now and then, so wait for a successful one rather than read once.
	var metrics string
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		_, metrics = get(t, base+"/metrics")
		for _, name := range []string{"ferry_outbox_oldest_pending_age_seconds", "ferry_outbox_events", "ferry_outbox_up",
			"ferry_relay_publish_outcomes_total", "ferry_relay_commit_to_confirm_seconds_bucket", "go_goroutines",
			`ferry_build_info{goversion="` + runtime.Version() + `",revision=`} {
			if !strings.Contains(metrics, name) {
				return false
			}
		}
		return true
	}, func() string { return "every metric family served:\n" + metrics })
	var code int
	var body string
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, body = get(t, base+"/readyz"); return code == 200 },
		func() string { return fmt.Sprintf("ready: %d %s", code, body) })
	require.JSONEq(t, `{"status":"ready","checks":{"database":{"ok":true},"broker":{"ok":true}}}`, body)

	// The relay records itself: its version, its broker without the
	// password; ferry status shows it alive.
	var beats []ferrystore.RelayBeat
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		var err error
		beats, err = b.st.Driver.Relays(b.ctx)
		require.NoError(t, err)
		return len(beats) == 1
	}, func() string { return "the relay's heartbeat row" })
	require.NotEmpty(t, beats[0].Version)
	require.Equal(t, cmd.Process.Pid, beats[0].PID)
	require.Contains(t, beats[0].Broker, "ferry:xxxxx@")
	require.NotContains(t, beats[0].Broker, "s3cr3tpw")
	code, body, _ = b.cli(t, "status")
	require.Equal(t, exitOK, code)
	require.Contains(t, body, "relays: 1 alive of 1 recorded")

	dbProxy.Cut()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 503 }, func() string { return "unready without the database" })
	_, body = get(t, base+"/readyz")
	require.Contains(t, body, `"database":{"ok":false,"error":`)
	require.Contains(t, body, `"broker":{"ok":true}`)
	require.NotContains(t, body, "s3cr3tpw")
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		_, m := get(t, base+"/metrics")
		return strings.Contains(m, `ferry_outbox_up{table="`+b.st.Driver.Table()+`"} 0`)
	}, func() string { return "the outbox gauges say the database is unreachable" })
	dbProxy.Restore()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 }, func() string { return "ready again" })

	natsProxy.Cut()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 503 }, func() string { return "unready without the broker" })
	_, body = get(t, base+"/readyz")
	require.Contains(t, body, `"broker":{"ok":false,"error":`)
	natsProxy.Restore()
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 }, func() string { return "ready again" })

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	beats, err := b.st.Driver.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, beats, "the relay deleted its heartbeat row as it stopped")
	logs := out.String()
	require.Contains(t, logs, "serving /metrics")
	require.NotContains(t, logs, "s3cr3tpw", "no password in the daemon's logs")
}

// With the standard OTEL_EXPORTER_OTLP_ENDPOINT set, the daemon exports
// its publish spans over OTLP/HTTP, in the trace stored with the event.
func TestRelayExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	stream, prefix := testsvc.JetStreamStream(t, testsvc.NATS(t))
	ev := orderPaid("1", prefix+".paid")
	ev.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	b.enqueue(t, ev)
	got := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			got <- body
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	cmd, out := child(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_SERVICE_NAME=ferry-test-relay"},
		append([]string{"relay", "--drain", "--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream,
			"--poll-interval", "20ms"}, b.args...)...)
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "tracing: exporting publish spans")
	select {
	case body := <-got:
		// The protobuf carries the trace id of the stored traceparent,
		// the span name and the service name as plain bytes.
		traceID, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
		require.True(t, bytes.Contains(body, traceID), "the span continues the stored trace")
		require.Contains(t, string(body), "send "+prefix+".paid")
		require.Contains(t, string(body), "ferry-test-relay")
	case <-time.After(10 * time.Second):
		t.Fatal("no OTLP export received")
	}
}

// A taken --http-addr fails the start, before any event is claimed.
func TestRelayFailsOnATakenHTTPAddr(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	id := b.enqueue(t, orderPaid("1", "x"))[0]
	code, _, errOut := ferryCLI(t, append([]string{"relay", "--broker-url", testsvc.EmbeddedNATS(t).ConnectedUrl(),
		"--http-addr", ln.Addr().String()}, b.args...)...)
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "--http-addr "+ln.Addr().String())
	row, err := b.st.Driver.Get(b.ctx, id)
	require.NoError(t, err)
	require.Zero(t, row.Attempt, "nothing was claimed")
}
