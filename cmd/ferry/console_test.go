package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// Without credentials, or with --insecure-no-auth off loopback, the
// console does not start: exit 2 and a sentence saying what to set.
func TestConsoleRefusesToStartWithoutAuthentication(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	for _, v := range []string{envConsoleUser, envConsolePassword, envConsoleToken, envConsoleSecret} {
		t.Setenv(v, "")
	}
	db := "sqlite://" + t.TempDir() + "/x.db"
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"NoCredentials", nil, nil, "the console needs authentication: set FERRY_CONSOLE_USER and FERRY_CONSOLE_PASSWORD (basic) or FERRY_CONSOLE_TOKEN"},
		{"UserWithoutPassword", map[string]string{envConsoleUser: "alice"}, nil, "set both FERRY_CONSOLE_USER and FERRY_CONSOLE_PASSWORD"},
		{"BasicAndBearer", map[string]string{envConsoleUser: "a", envConsolePassword: "b", envConsoleToken: "c"}, nil, "not both"},
		{"InsecureOnAllInterfaces", nil, []string{"--insecure-no-auth", "--http-addr", ":8080"}, "serves only on a loopback address"},
		{"InsecureOnAnotherHost", nil, []string{"--insecure-no-auth", "--http-addr", "10.1.2.3:8080"}, "serves only on a loopback address"},
		{"InsecureWithCredentials", map[string]string{envConsoleToken: "c"}, []string{"--insecure-no-auth"}, "choose one"},
		{"ShortSecret", map[string]string{envConsoleToken: "c", envConsoleSecret: "short"}, nil, "at least 32 are needed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, out, errOut := ferryCLI(t, append([]string{"console", "--database-url", db}, c.args...)...)
			require.Equal(t, exitUsage, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Contains(t, errOut, c.says)
		})
	}
	t.Run("BadValues", func(t *testing.T) {
		t.Setenv(envConsoleToken, "tok")
		for _, c := range []struct {
			args []string
			says string
		}{
			{nil, "nothing to show"},
			{[]string{"--inbox-url", "mysql://root@127.0.0.1/test"}, "want name=URL"},
			{[]string{"--database-url", db, "--database-url", db}, `two outboxes named "outbox_event"`},
			{[]string{"--database-url", "a=nosuch://x"}, "--database-url a"},
			{[]string{"--database-url", db, "--task-table", "points=ferry_task"}, `no --inbox-url is named "points"`},
			{[]string{"--inbox-url", "p=" + db, "--task-table", "p=bad-name"}, "--task-table"},
		} {
			code, _, errOut := ferryCLI(t, append([]string{"console"}, c.args...)...)
			require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
			require.Contains(t, errOut, c.says)
		}
	})
}

// ferry console on a PostgreSQL outbox and a MariaDB consumer database
// with a task table: it authenticates, shows them, changes what a form
// asks, never prints a password, and stops on SIGTERM.
func TestConsoleServesTheStoresAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "postgres")
	in := setupInbox(t, "mysql")
	tasks := testsvc.Store(t, "mysql")
	ids := b.enqueue(t, orderPaid("1", "orders.paid"))
	msgs, err := b.st.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: "tok", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, err = b.st.Driver.MarkFailed(b.ctx, []ferrystore.Failure{{ID: ids[0], Token: "tok", Dead: true, Error: "rejected"}})
	require.NoError(t, err)
	cfgFile := writeFile(t, "ferry.yaml", `
reconcile:
  checks:
    - name: orders-paid
      table: purchase_order
      key_column: id
      time_column: paid_at
      aggregate_type: order
      event_type: OrderPaid
`)
	pgURL := strings.Replace(b.url, "postgres@", "postgres:s3cr3tpw@", 1)
	addr := freePort(t)
	args := append([]string{"console", "--config", cfgFile, "--database-url", "orders=" + pgURL, "--table", b.st.Driver.Table(),
		"--inbox-url", "points=" + in.url, "--task-table", "points=" + tasks.Driver.Table(), "--http-addr", addr},
		in.args[2:]...) // the inbox's table flags
	cmd, out := child(t, []string{envConsoleUser + "=alice", envConsolePassword + "=pw-alice"}, args...)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := "http://" + addr + "/"
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base); return code == http.StatusUnauthorized },
		func() string { return "the console answers:\n" + out.String() })

	do := func(method, path string, form url.Values, user, pass string) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, base+path, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.SetBasicAuth(user, pass)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	code, _ := do("GET", "", nil, "alice", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, page := do("GET", "", nil, "alice", "pw-alice")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "Outbox orders")
	require.Contains(t, page, "Tasks points")
	code, page = do("GET", "inbox/points", nil, "alice", "pw-alice")
	require.Equal(t, http.StatusOK, code, page)
	code, page = do("GET", "reconcile", nil, "alice", "pw-alice")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "orders-paid", "the config file's checks, on the first outbox")
	code, page = do("GET", "outbox/orders/dead", nil, "alice", "pw-alice")
	require.Equal(t, http.StatusOK, code, page)
	tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]
	code, page = do("POST", "outbox/orders/discard", url.Values{"csrf": {tok}, "id": {ids[0]}, "reason": {"INC-1"}}, "alice", "pw-alice")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "1 of 1 selected event changed")
	require.Equal(t, ferrytype.StatusDiscarded, b.status(t, ids[0]))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	logs := out.String()
	require.Contains(t, logs, "serving the console")
	require.Contains(t, logs, "stopping the console")
	require.Contains(t, logs, "operator=alice action=discard")
	require.NotContains(t, logs, "s3cr3tpw", "no password in the console's logs")
	require.NotContains(t, logs, "pw-alice")
}
