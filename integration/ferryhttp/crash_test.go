package ferryhttp_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/fault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The child process: a payments server on the bed the parent built, that
// prints its address and serves until killed.
const envChild = "FERRYHTTP_TEST_CHILD"

type childSpec struct {
	Kind, URL string
	Tables    tables
	CrashAt   string
	Lease     time.Duration
}

func TestChildServer(t *testing.T) {
	t.Parallel()
	raw := os.Getenv(envChild)
	if raw == "" {
		t.Skip("run by the crash tests as their server process")
	}
	var spec childSpec
	require.NoError(t, json.Unmarshal([]byte(raw), &spec))
	ctx := context.Background()
	var (
		db  *sql.DB
		drv ferrystore.Driver[*sql.Tx]
		err error
	)
	switch spec.Kind {
	case "mysql":
		var s *ferrymysql.Store
		s, err = ferrymysql.Open(ctx, spec.URL, &ferrymysql.Config{Table: spec.Tables.Outbox})
		if err == nil {
			db, drv = s.DB(), s
		}
	case "postgres":
		db, err = sql.Open("pgx", spec.URL)
		if err == nil {
			drv, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: spec.Tables.Outbox})
		}
	default:
		var s *ferrysqlite.Store
		s, err = ferrysqlite.Open(ctx, spec.URL, &ferrysqlite.Config{Table: spec.Tables.Outbox})
		if err == nil {
			db, drv = s.DB(), s
		}
	}
	require.NoError(t, err)
	keys, err := openKeys(spec.Kind, db, spec.Tables)
	require.NoError(t, err)
	ob, err := ferry.NewOutbox(drv, nil)
	require.NoError(t, err)
	b := &bed{kind: spec.Kind, db: db, outbox: ob, keys: keys, payments: spec.Tables.Payments, tables: spec.Tables}
	crash, err := fault.Crash(spec.CrashAt)
	require.NoError(t, err)
	k, err := ferryhttp.New(keys, &ferryhttp.Config{Lease: spec.Lease})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	os.Stdout.WriteString("listening " + ln.Addr().String() + "\n")
	// Each request's context carries the crash: the middleware reaches
	// ferryfault.HTTPAfterCommit with it.
	srv := &http.Server{Handler: b.handler(k), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ferryfault.With(ctx, crash) }}
	_ = srv.Serve(ln)
}

// child is a running server process.
type child struct {
	cmd  *exec.Cmd
	url  string
	done chan error
}

func startChild(t *testing.T, b *bed, crashAt string, lease time.Duration) *child {
	t.Helper()
	spec := childSpec{Kind: b.kind, URL: b.url(t), Tables: b.tables, CrashAt: crashAt, Lease: lease}
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildServer$", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- a
			}
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	select {
	case a := <-addr:
		c.url = "http://" + a
	case err := <-c.done:
		t.Fatalf("server process ended before it listened: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("server process did not listen within 60 s")
	}
	return c
}

// waitKilled waits until the process was killed (by its own fault point).
func (c *child) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "the server process was killed")
	case <-time.After(60 * time.Second):
		t.Fatal("the server process did not die at its crash point")
	}
}

// url is the bed's database URL, for a child process.
func (b *bed) url(t *testing.T) string {
	switch b.kind {
	case "mysql":
		return testsvc.URL(testsvc.EnvMySQL)
	case "postgres":
		return testsvc.URL(testsvc.EnvPostgres)
	}
	var file string
	require.NoError(t, b.db.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file))
	return "sqlite://" + file
}

// The process dies after the commit and before the response: the client
// gets no answer; its retry, to a new process, gets the response that was
// committed with the payment, and the payment happened once.
func TestKilledAfterCommitRetryGetsTheCommittedResponse(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		body := `{"order_id":"o-1","amount":10}`
		dying := startChild(t, b, ferryfault.HTTPAfterCommit, 0)
		_, err := send(dying.url, "k", body)
		require.Error(t, err, "the client gets no response")
		dying.waitKilled(t)
		require.Equal(t, 1, b.charged(t, "o-1"), "the payment committed")
		require.Equal(t, 1, b.events(t, "o-1"), "with its event")

		next := startChild(t, b, "", 0)
		r := post(t, next.url, "k", body)
		require.Equal(t, http.StatusCreated, r.Status)
		require.Equal(t, "true", r.Header.Get(ferryhttp.HeaderReplayed))
		var id string
		require.NoError(t, b.db.QueryRow(b.q("SELECT id FROM "+b.payments+" WHERE order_id = ?"), "o-1").Scan(&id))
		require.Equal(t, id, r.payment(t).PaymentID, "the replay is the committed payment's response")
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 1, b.events(t, "o-1"))
	})
}

// The process dies in the handler, its writes uncommitted: its claim stays
// until its lease runs out, then a retry takes it over and pays once.
func TestKilledInHandlerClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		// The lease bounds the dying request's handler: long enough for a
		// loaded machine to reach the crash inside it.
		const lease = 4 * time.Second
		body := `{"order_id":"o-1","amount":10}`
		dying := startChild(t, b, "", lease)
		_, err := send(dying.url, "k", body, "X-Test-Crash", "in-handler")
		require.Error(t, err)
		dying.waitKilled(t)
		require.Equal(t, 0, b.charged(t, "o-1"), "nothing of the dead request committed")
		require.Equal(t, 0, b.events(t, "o-1"))

		next := startChild(t, b, "", lease)
		waitLeaseOver(t, b, "k")
		r := post(t, next.url, "k", body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		require.Empty(t, r.Header.Get(ferryhttp.HeaderReplayed))
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 1, b.events(t, "o-1"))
		k, err := b.keys.GetKey(testsvc.Context(t, time.Minute),
			ferryhttp.ScopeHash(ferryhttp.Request{Method: "POST", Route: "POST /payments", Key: "k"}))
		require.NoError(t, err)
		require.Equal(t, int64(1), k.Takeovers)
		require.Equal(t, ferrystore.KeyDone, k.State)
	})
}
