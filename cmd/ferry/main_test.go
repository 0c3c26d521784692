package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/fault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The test binary doubles as the ferry binary, so that tests can run the
// CLI as a real child process and kill it.
const envExecMain = "FERRY_TEST_EXEC_MAIN"

// envTestCrashAt arms a crash point ("point[:n]") in the relay of a child
// started by child. Only this test binary reads it: the ferry binary has no
// way to arm one.
const envTestCrashAt = "FERRY_TEST_CRASH_AT"

func TestMain(m *testing.M) {
	if os.Getenv(envExecMain) == "1" {
		crash, err := fault.Crash(os.Getenv(envTestCrashAt))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(exitUsage)
		}
		os.Exit(execute(newRootWith(&globals{faultPoint: crash}), os.Args[1:], os.Stdout, os.Stderr))
	}
	// ferry bench runs ferry relay processes: this binary, as ferry.
	benchRelay = func() (string, []string) { return os.Args[0], []string{envExecMain + "=1"} }
	os.Exit(m.Run())
}

func ferryCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// child starts the ferry CLI as a separate process. Read its output once
// it exited; childLive's while it runs.
func child(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	return childTo(t, &out, env, args...), &out
}

// childLive starts the ferry CLI as a separate process whose output the
// test may read while it runs.
func childLive(t *testing.T, env []string, args ...string) (*exec.Cmd, *testsvc.LogBuffer) {
	t.Helper()
	out := new(testsvc.LogBuffer)
	return childTo(t, out, env, args...), out
}

func childTo(t *testing.T, out io.Writer, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envExecMain+"=1"), env...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	return cmd
}

// requireKilled waits for cmd and requires that it died of SIGKILL (a
// crash point reached); out is its output, for the failure message.
func requireKilled(t *testing.T, cmd *exec.Cmd, out fmt.Stringer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the relay did not reach its crash point within 2m:\n%s", out)
	}
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the relay must die: %v\n%s", err, out)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by SIGKILL: %v\n%s", ws, out)
}

// paidEvents returns n OrderPaid events of n aggregates to dest.
func paidEvents(n int, dest string) []ferry.Event {
	events := make([]ferry.Event, n)
	for i := range events {
		events[i] = ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), Type: "OrderPaid",
			Payload: json.RawMessage(`{}`), Destination: dest}
	}
	return events
}

// kindURL is the test database URL of kind, "mysql" or "postgres".
func kindURL(kind string) string {
	if kind == "postgres" {
		return testsvc.URL(testsvc.EnvPostgres)
	}
	return testsvc.URL(testsvc.EnvMySQL)
}

// The demo is the reference shop's binary's now: `ferry demo`, whatever
// its flags, is a usage error that says where it went and how to run it.
func TestDemoSaysWhereItMoved(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"demo"}, {"demo", "--orders", "200"}, {"demo", "--broker-url", "kafka://127.0.0.1:9092"}} {
		code, out, errOut := ferryCLI(t, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "the demo now lives in the reference shop's binary")
		require.Contains(t, errOut, "crash points")
		require.Contains(t, errOut, "go run github.com/ferrydev/ferry/examples/shop/cmd/shop@VERSION demo")
		require.Contains(t, errOut, "go run ./examples/shop/cmd/shop demo")
	}
	code, out, _ := ferryCLI(t, "--help")
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, "demo", "the command is hidden")
}

// ferry --help lists every exit code.
func TestHelpListsTheExitCodes(t *testing.T) {
	t.Parallel()
	code, out, _ := ferryCLI(t, "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Exit codes:")
	for _, c := range []int{exitOK, exitFailed, exitUsage, exitIncomplete, exitFindings, exitNoMatch, exitDeadLeft, exitSchema} {
		require.Contains(t, out, fmt.Sprintf("\n  %d  ", c), "exit code %d", c)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"NoDatabaseURL", []string{"migrate"}, "no database URL"},
		{"UnknownScheme", []string{"migrate", "--database-url", "oracle://u:pw@h/db"}, "unknown scheme"},
		{"BadTableName", []string{"migrate", "--database-url", "sqlite:///" + t.TempDir() + "/x.db", "--table", "x;drop table y"}, "invalid identifier"},
		{"BadFlag", []string{"relay", "--batch-size", "many"}, "invalid argument"},
		{"BadBatchSize", []string{"relay", "--database-url", "sqlite:///" + t.TempDir() + "/x.db", "--broker-url",
			testsvc.EmbeddedNATS(t).ConnectedUrl(), "--batch-size", "0"}, "--batch-size must be positive"},
		{"PublishTimeoutOverLease", []string{"relay", "--database-url", "sqlite:///" + t.TempDir() + "/x.db", "--broker-url",
			testsvc.EmbeddedNATS(t).ConnectedUrl(), "--lease", "1s", "--publish-timeout", "2s"}, "--publish-timeout 2s must be shorter than --lease 1s"},
		{"BenchBadEvents", []string{"bench", "--events", "0"}, "--events must be positive"},
		{"BenchUnknownScenario", []string{"bench", "--scenarios", "relay,warp"}, `unknown scenario "warp"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := ferryCLI(t, c.args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
		})
	}
}

func TestUnreachableDatabaseIsAClearErrorWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"mysql://root:s3cr3tpw@127.0.0.1:1/test?timeout=2s",
		"postgres://postgres:s3cr3tpw@127.0.0.1:1/test?connect_timeout=2",
	} {
		code, _, errOut := ferryCLI(t, "relay", "--database-url", url, "--broker-url", "nats://127.0.0.1:4222", "--connect-timeout", "0")
		require.Equal(t, exitFailed, code, errOut)
		require.Contains(t, errOut, "127.0.0.1:1")
		require.NotContains(t, errOut, "s3cr3tpw")
	}
}

// A relay started while its broker is down keeps trying for an explicit
// --connect-timeout, saying so, then exits 1; no log line or error shows
// the password.
func TestRelayLogsRedactBrokerPassword(t *testing.T) {
	t.Parallel()
	db := "sqlite:///" + t.TempDir() + "/x.db"
	code, _, errOut := ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	code, _, errOut = ferryCLI(t, "relay", "--database-url", db,
		"--broker-url", "nats://user:s3cr3tpw@127.0.0.1:1", "--connect-timeout", "1s")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "cannot reach the broker; retrying")
	require.Contains(t, errOut, "127.0.0.1:1")
	require.NotContains(t, errOut, "s3cr3tpw")
}

func TestMigratePrintsSQL(t *testing.T) {
	t.Parallel()
	code, out, errOut := ferryCLI(t, "migrate", "--print", "--database-url", "sqlite:///"+t.TempDir()+"/x.db", "--table", "my_outbox")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `CREATE TABLE IF NOT EXISTS "my_outbox"`)
}

// The seed article's own SQL, run verbatim on MariaDB against the table
// `ferry migrate` created, is delivered by `ferry relay`.
func TestSeedInsertIsDelivered(t *testing.T) {
	t.Parallel()
	admin := testsvc.MySQL(t)
	ctx := testsvc.Context(t, 2*time.Minute)
	dbName := testsvc.Name("ferry_seed_")
	_, err := admin.ExecContext(ctx, "CREATE DATABASE "+dbName)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE " + dbName) })
	dbURL := strings.Replace(testsvc.URL(testsvc.EnvMySQL), "/test", "/"+dbName, 1)

	code, out, errOut := ferryCLI(t, "migrate", "--database-url", dbURL)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "outbox table outbox_event (mysql): applied 0001_outbox, 0002_discard, 0003_relay, 0004_dead, 0005_log, 0006_lease\n",
		out, "one line: what ran")
	code, out, errOut = ferryCLI(t, "migrate", "--database-url", dbURL)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "outbox table outbox_event (mysql): up to date, nothing to apply\n", out, "a second run applies nothing")

	cfg, err := ferrymysql.ParseURL(dbURL)
	require.NoError(t, err)
	cfg.InterpolateParams = false // the seed's statements, as a mysql client sends them
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, stmt := range []string{
		"CREATE TABLE purchase_order (\nid BIGINT PRIMARY KEY,\nstatus VARCHAR(16) NOT NULL\n) ENGINE=InnoDB",
		"START TRANSACTION",
		"INSERT INTO purchase_order VALUES(42,'NEW')",
		"INSERT INTO outbox_event\n(event_id,aggregate_id,event_type,payload,status,available_at,created_at)\nVALUES\n" +
			"('order-42-created-v1',42,'OrderCreated',\nJSON_OBJECT('orderId',42,'version',1),'NEW',NOW(6),NOW(6))",
		"COMMIT",
	} {
		_, err := conn.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	nc := testsvc.EmbeddedNATS(t)
	stream := testsvc.Name("SEED_")
	code, out, errOut = ferryCLI(t, "relay", "--drain", "--database-url", dbURL, "--broker-url", nc.ConnectedUrl(),
		"--stream", stream, "--subjects", "OrderCreated", "--declare", "--poll-interval", "50ms")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "1 published")
	got := testsvc.ReadStream(t, nc, stream, 1, 30*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, "order-42-created-v1", got[0].ID)
	require.Equal(t, "OrderCreated", got[0].Subject, "no destination: the event type is the subject")
	require.Equal(t, "42", got[0].AggregateID)
	require.JSONEq(t, `{"orderId":42,"version":1}`, string(got[0].Data))
}

// A relay process killed with SIGKILL at a crash point loses nothing: the
// next relay publishes every event, with the same ids; the broker reports
// the ones the dead relay had already published as duplicates.
func TestRelayProcessKilledAtCrashPoint(t *testing.T) {
	testsvc.Slow(t, "a relay process killed at every crash point")
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		for _, c := range []struct {
			point     string
			duplicate bool
		}{
			{ferryfault.RelayAfterClaim, false},
			{ferryfault.RelayAfterPublish, true},
		} {
			t.Run(kind+"/"+c.point, func(t *testing.T) {
				st := testsvc.Store(t, kind)
				ctx := testsvc.Context(t, 2*time.Minute)
				ob, err := ferry.NewOutbox(st.Driver, nil)
				require.NoError(t, err)
				nc := testsvc.NATS(t)
				stream, prefix := testsvc.JetStreamStream(t, nc)
				const total = 50
				tx, err := st.DB.BeginTx(ctx, nil)
				require.NoError(t, err)
				ids, err := ob.EnqueueTx(ctx, tx, paidEvents(total, prefix+".paid")...)
				require.NoError(t, err)
				require.NoError(t, tx.Commit())

				args := []string{"relay", "--database-url", kindURL(kind), "--table", st.Driver.Table(),
					"--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream, "--lanes", "1",
					"--lease", "1s", "--publish-timeout", "800ms", "--retry-initial", "10ms"}
				cmd, out := child(t, []string{envTestCrashAt + "=" + c.point}, args...)
				requireKilled(t, cmd, out)
				stats, err := st.Driver.Stats(ctx)
				require.NoError(t, err)
				require.Equal(t, int64(total), stats.Sending, "the dead relay's claim holds every event")

				cmd, out = child(t, nil, append(args, "--drain")...)
				require.NoError(t, cmd.Wait(), out.String())
				dups := 0
				if c.duplicate {
					dups = total
				}
				require.Contains(t, out.String(), fmt.Sprintf("%d published (%s dropped by the broker)", total, plural(dups, "duplicate")))
				require.Contains(t, out.String(), "left: 0 new, 0 sending, 0 dead")
				got := testsvc.ReadStream(t, nc, stream, total, 30*time.Second)
				require.Len(t, got, total)
				for i, id := range ids {
					row, err := st.Driver.Get(ctx, id)
					require.NoError(t, err)
					require.Equal(t, ferrytype.StatusSent, row.Status, "event %d", i)
					require.Equal(t, 2, row.Attempt, "event %d", i)
				}
			})
		}
	}
}

// Of two relay processes on a table, the older leads maintenance, alone:
// killed with SIGKILL in the middle of a sweep, after it read the expired
// leases of a relay that died before it, it leaves them expired; the other
// relay takes the lead once the dead leader's heartbeat is stale, returns
// them and publishes every event, once.
func TestMaintenanceLeaderKilledMidSweep(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := testsvc.Store(t, kind)
			ctx := testsvc.Context(t, 2*time.Minute)
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			args := []string{"relay", "--database-url", kindURL(kind), "--table", st.Driver.Table(),
				"--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream, "--lanes", "1",
				"--heartbeat", "200ms", "--sweep-interval", "100ms", "--retry-initial", "10ms"}
			leader := func() (lead string, alive int) {
				rs, err := ferryadmin.Relays(ctx, st.Driver, 600*time.Millisecond)
				require.NoError(t, err)
				for _, r := range rs {
					if r.Alive {
						alive++
					}
					if r.Leader {
						lead = r.ID
					}
				}
				return lead, alive
			}
			a, aOut := child(t, []string{envTestCrashAt + "=" + ferryfault.RelayMidSweep}, append(args, "--relay-id", "a")...)
			testsvc.WaitFor(t, 30*time.Second, func() bool { l, _ := leader(); return l == "a" }, nil)
			b, bOut := childLive(t, nil, append(args, "--relay-id", "b")...)
			t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })
			testsvc.WaitFor(t, 30*time.Second, func() bool { _, n := leader(); return n == 2 }, nil)
			l, _ := leader()
			require.Equal(t, "a", l, "the older relay leads")

			// Events a relay that died had claimed, their leases over: in
			// one transaction, so that no relay sees them NEW.
			ob, err := ferry.NewOutbox(st.Driver, nil)
			require.NoError(t, err)
			const total = 50
			tx, err := st.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			ids, err := ob.EnqueueTx(ctx, tx, paidEvents(total, prefix+".paid")...)
			require.NoError(t, err)
			expire := "UPDATE `" + st.Driver.Table() + "` SET status = 'SENDING', lease_token = 'gone', attempts = 1," +
				" locked_until = NOW(6) - INTERVAL 1 SECOND"
			if kind == "postgres" {
				expire = `UPDATE "` + st.Driver.Table() + `" SET status = 'SENDING', lease_token = 'gone', attempts = 1,` +
					` locked_until = now() - interval '1 second'`
			}
			_, err = tx.ExecContext(ctx, expire)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())

			requireKilled(t, a, aOut)
			require.Contains(t, aOut.String(), "crash point "+ferryfault.RelayMidSweep+" reached")
			require.NotContains(t, bOut.String(), "returned expired leases", "b swept while a led:\n%s", bOut)

			testsvc.WaitFor(t, time.Minute, func() bool {
				s, err := st.Driver.Stats(ctx)
				require.NoError(t, err)
				return s.New+s.Sending == 0
			}, func() string { return bOut.String() })
			got := testsvc.ReadStream(t, nc, stream, total, 30*time.Second)
			require.Len(t, got, total)
			for i, id := range ids {
				row, err := st.Driver.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusSent, row.Status, "event %d", i)
				require.Equal(t, 2, row.Attempt, "event %d: the lost attempt, then b's", i)
			}
			out := bOut.String()
			require.Contains(t, out, "leading the table's maintenance")
			require.Less(t, strings.Index(out, "leading the table's maintenance"), strings.Index(out, "returned expired leases"),
				"b swept once it led:\n%s", out)
			l, _ = leader()
			require.Equal(t, "b", l)
		})
	}
}

func TestDrainTimeoutExitsIncomplete(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbURL := "sqlite:///" + filepath.Join(dir, "x.db")
	code, _, errOut := ferryCLI(t, "migrate", "--database-url", dbURL)
	require.Equal(t, exitOK, code, errOut)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "x.db"))
	require.NoError(t, err)
	defer db.Close()
	// An event for a subject no stream takes: returned, retried, pending.
	_, err = db.Exec(`INSERT INTO outbox_event (event_id, aggregate_id, event_type, payload) VALUES ('e1', '1', 'Nowhere', '{}')`)
	require.NoError(t, err)
	code, out, errOut := ferryCLI(t, "relay", "--drain", "--drain-timeout", "1s", "--database-url", dbURL,
		"--broker-url", testsvc.EmbeddedNATS(t).ConnectedUrl(), "--retry-initial", "10ms", "--poll-interval", "20ms")
	require.Equal(t, exitIncomplete, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "drain incomplete")
	require.Contains(t, out, "left: 1 new")
}

// SIGTERM stops the daemon cleanly: exit code 0, nothing left SENDING.
func TestRelaySIGTERMStopsCleanly(t *testing.T) {
	t.Parallel()
	st := testsvc.Store(t, "postgres")
	ctx := testsvc.Context(t, 2*time.Minute)
	ob, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	nc := testsvc.NATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	for i := 0; i < 20; i++ {
		tx, err := st.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		events := make([]ferry.Event, 100)
		for j := range events {
			events[j] = ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{}`), Destination: prefix + ".paid"}
		}
		_, err = ob.EnqueueTx(ctx, tx, events...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
	}
	cmd, out := child(t, nil, "relay", "--database-url", testsvc.URL(testsvc.EnvPostgres), "--table", st.Driver.Table(),
		"--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream, "--batch-size", "20")
	// Stop it mid-stream, as soon as some events arrived.
	testsvc.ReadStream(t, nc, stream, 1, 30*time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Equal(t, 1, strings.Count(out.String(), "relay stopped"), "logged once, with its counts: %s", out.String())
	require.Contains(t, out.String(), "confirmed=")
	stats, err := st.Driver.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Sending, "batches in flight were finished and recorded")
}

func TestMigrateInboxTables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbURL := "sqlite:///" + dir + "/points.db"
	code, out, errOut := ferryCLI(t, "migrate", "--inbox", "--database-url", dbURL, "--marker-table", "points_marker")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "inbox tables points_marker, ferry_conflict, ferry_version, ferry_idempotency_key (sqlite): created\n", out)
	code, out, errOut = ferryCLI(t, "migrate", "--inbox", "--database-url", dbURL, "--marker-table", "points_marker")
	require.Equal(t, exitOK, code, "a second run is a no-op: %s", errOut)
	require.Equal(t, "inbox tables points_marker, ferry_conflict, ferry_version, ferry_idempotency_key (sqlite): up to date\n", out)
	code, out, errOut = ferryCLI(t, "migrate", "--inbox", "--print", "--database-url", dbURL)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `CREATE TABLE IF NOT EXISTS "consumed_operation"`)
	code, _, errOut = ferryCLI(t, "migrate", "--inbox", "--database-url", dbURL, "--marker-table", "bad-name")
	require.Equal(t, exitUsage, code, errOut)
	// The tables work: conflicts lists none.
	code, out, errOut = ferryCLI(t, "conflicts", "list", "--database-url", dbURL, "--marker-table", "points_marker")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, out, "points-award")
}

// TestBenchRunsOnTheEmbeddedDefault runs ferry bench with no URLs (a
// temporary SQLite file and an embedded NATS server) at a tiny size and
// checks its JSON report; it times nothing.
func TestBenchRunsOnTheEmbeddedDefault(t *testing.T) {
	testsvc.Slow(t, "a bench run on the embedded default")
	t.Parallel()
	code, out, errOut := ferryCLI(t, "bench", "--json", "--events", "200", "--repeat", "1", "--relays", "1",
		"--live-rate", "100", "--live-for", "500ms", "--retained", "1000", "--claim-rounds", "10", "--scenarios", "raw-db,relay,plain,live,claim")
	require.Equal(t, exitOK, code, errOut)
	var rep struct {
		Database string  `json:"database"`
		Broker   string  `json:"broker"`
		RawDB    float64 `json:"raw_db_per_second"`
		Relay    []struct {
			Rate float64 `json:"events_per_second"`
		} `json:"relay"`
		RelayProcess []struct {
			Rate float64 `json:"events_per_second"`
			CPU  struct {
				Relay *float64 `json:"relay_us_per_event"`
			} `json:"cpu"`
		} `json:"relay_process"`
		Plain []struct {
			Rate float64 `json:"events_per_second"`
		} `json:"plain"`
		Live struct {
			Events int `json:"events"`
		} `json:"live"`
		LiveProcess struct {
			Events int    `json:"events"`
			Mode   string `json:"mode"`
		} `json:"live_process"`
		LivePlain struct {
			Events int `json:"events"`
		} `json:"live_plain"`
		Targets []struct {
			Name string `json:"name"`
		} `json:"targets"`
		Ratios []struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		} `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.True(t, strings.HasPrefix(rep.Database, "sqlite "), rep.Database)
	require.True(t, strings.HasPrefix(rep.Broker, "nats "), rep.Broker)
	require.Positive(t, rep.RawDB)
	require.Len(t, rep.Relay, 2) // unordered and ordered
	require.Equal(t, 50, rep.Live.Events)
	require.NotEmpty(t, rep.Ratios)
	// The relay as deployed: ferry relay processes, and the plain relay.
	require.Len(t, rep.RelayProcess, 2)
	for _, f := range rep.RelayProcess {
		require.Positive(t, f.Rate)
		require.NotNil(t, f.CPU.Relay)
	}
	require.Len(t, rep.Plain, 1)
	require.Positive(t, rep.Plain[0].Rate)
	require.Equal(t, "process", rep.LiveProcess.Mode)
	require.Equal(t, 50, rep.LiveProcess.Events)
	require.Equal(t, 50, rep.LivePlain.Events)
	require.NotEmpty(t, rep.Targets)
}

// A multi-line error (pgx lists each host it tried on a "\n\t"-indented
// line) is logged on one line, its password still redacted.
func TestLoggedErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	g := &globals{logLevel: "info", logFormat: "text"}
	log, err := g.logger(&buf)
	require.NoError(t, err)
	log.Error("cannot reach the database", "error",
		errors.New("failed to connect to `user=app database=shop`:\n\t127.0.0.1:5432 (db): dial error: connection refused\n\t[::1]:5432 (db): postgres://app:s3cr3tpw@db/shop refused"))
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "\n"), out)
	require.NotContains(t, out, `\n`)
	require.NotContains(t, out, `\t`)
	require.Contains(t, out, "dial error: connection refused; [::1]:5432")
	require.NotContains(t, out, "s3cr3tpw")
}

// A relay killed with SIGKILL while it holds claims gets them back within a
// few heartbeats, not after their lease: its heartbeat row records the
// prefix of its claim tokens, and once it missed four beats the relay
// that maintains the table returns them. Here the lease is five minutes,
// so nothing but that return can bring the events back before the test
// ends. The first relay beats, claims every event and dies at its crash
// point; the second starts only then, so that no share of the lanes
// (which a relay that cannot read the heartbeat rows gives up) can let it
// claim first.
func TestRelayKilledHoldingClaimsIsReturnedWithinHeartbeats(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := testsvc.Store(t, kind)
			ctx := testsvc.Context(t, 2*time.Minute)
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			args := []string{"relay", "--database-url", kindURL(kind), "--table", st.Driver.Table(),
				"--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream, "--table-lanes", "1",
				"--lease", "5m", "--retry-initial", "10ms"}
			row := func(id string) (ferrystore.RelayBeat, bool) {
				rs, err := st.Driver.Relays(ctx)
				require.NoError(t, err)
				for _, r := range rs {
					if r.ID == id {
						return r, true
					}
				}
				return ferrystore.RelayBeat{}, false
			}
			a, aOut := child(t, []string{envTestCrashAt + "=" + ferryfault.RelayAfterClaim}, append(args, "--relay-id", "a")...)
			t.Cleanup(func() { _ = a.Process.Kill() })
			testsvc.WaitFor(t, 30*time.Second, func() bool { _, ok := row("a"); return ok }, nil)
			ob, err := ferry.NewOutbox(st.Driver, nil)
			require.NoError(t, err)
			const total = 50
			tx, err := st.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			ids, err := ob.EnqueueTx(ctx, tx, paidEvents(total, prefix+".paid")...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			requireKilled(t, a, aOut)
			killed := time.Now()
			held, _ := row("a")
			require.NotEmpty(t, held.Claims, "a records the prefix of its claims")
			stats, err := st.Driver.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(total), stats.Sending, "the dead relay holds every event")
			b, bOut := childLive(t, nil, append(args, "--relay-id", "b")...)
			t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })

			testsvc.WaitFor(t, time.Minute, func() bool {
				s, err := st.Driver.Stats(ctx)
				require.NoError(t, err)
				return s.New+s.Sending == 0
			}, func() string {
				s, err := st.Driver.Stats(ctx)
				return fmt.Sprintf("%+v %v\n%s", s, err, bOut.String())
			})
			t.Logf("%s: SIGKILL → every event SENT by the other relay in %s (lease 5m, heartbeat %s)", kind,
				time.Since(killed).Round(10*time.Millisecond), ferry.DefaultHeartbeat)
			for i, id := range ids {
				r, err := st.Driver.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, 2, r.Attempt, "event %d: the dead relay's attempt, then b's", i)
				require.Contains(t, r.LastError, "relay a stopped beating", "event %d", i)
			}
			require.Len(t, testsvc.ReadStream(t, nc, stream, total, 30*time.Second), total)
			require.Contains(t, bOut.String(), "returned the claims of a relay that stopped beating")
		})
	}
}
