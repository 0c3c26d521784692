package main

import (
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A relay daemon on a table nobody migrated does not spin on "table
// doesn't exist": /readyz answers 503 naming the table and the fix, and
// the relay starts by itself once ferry migrate ran.
func TestRelayWaitsForMigrations(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			table := testsvc.Name("fresh_")
			var (
				url string
				db  *sql.DB
				drv ferrystore.Driver[*sql.Tx]
				err error
			)
			switch kind {
			case "mysql":
				db, url = testsvc.MySQL(t), testsvc.URL(testsvc.EnvMySQL)
				drv, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
			case "postgres":
				db, url = testsvc.PostgresSQL(t), testsvc.URL(testsvc.EnvPostgres)
				drv, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
			}
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, q := range []string{"DROP TABLE IF EXISTS " + table + "_lease", "DROP TABLE IF EXISTS " + table + "_relay", "DROP TABLE IF EXISTS " + table + "_seq", "DROP TABLE IF EXISTS " + table,
					"DELETE FROM ferry_migration WHERE component = 'outbox:" + table + "'"} {
					if _, err := db.Exec(q); err != nil {
						t.Logf("%s: %v", q, err)
					}
				}
			})
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			addr := freePort(t)
			args := []string{"--database-url", url, "--table", table}
			cmd, out := child(t, nil, append([]string{"relay", "--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream,
				"--http-addr", addr, "--poll-interval", "20ms", "--metrics-interval", "100ms"}, args...)...)
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			base := "http://" + addr

			var code int
			var body string
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				code, body = get(t, base+"/readyz")
				return code == 503 && strings.Contains(body, "run ferry migrate")
			}, func() string { return fmt.Sprintf("unready, naming the fix: %d %s", code, body) })
			require.Contains(t, body, table+" does not exist")
			require.Contains(t, body, "0001_outbox")
			code, _ = get(t, base+"/healthz")
			require.Equal(t, 200, code)

			c, _, errOut := ferryCLI(t, append([]string{"migrate"}, args...)...)
			require.Equal(t, exitOK, c, errOut)
			testsvc.WaitFor(t, 30*time.Second, func() bool { code, body = get(t, base+"/readyz"); return code == 200 },
				func() string { return fmt.Sprintf("ready once migrated: %d %s", code, body) })

			// And it relays: an event enqueued now is published.
			ob, err := ferry.NewOutbox(drv, nil)
			require.NoError(t, err)
			ctx := testsvc.Context(t, time.Minute)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = ob.EnqueueTx(ctx, tx, orderPaid("1", prefix+".paid"))
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			testsvc.ReadStream(t, nc, stream, 1, 30*time.Second)

			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, cmd.Wait(), out.String())
			require.Contains(t, out.String(), "outbox table not ready")
		})
	}
}

// --drain on a table nobody migrated exits 7 at once, naming the table and
// the fix, instead of logging errors and exiting 0 with "0 published".
func TestDrainOnMissingTableExitsSchema(t *testing.T) {
	t.Parallel()
	db := "sqlite:///" + t.TempDir() + "/x.db"
	start := time.Now()
	code, out, errOut := ferryCLI(t, "relay", "--drain", "--drain-timeout", "10s", "--database-url", db,
		"--broker-url", testsvc.EmbeddedNATS(t).ConnectedUrl())
	require.Equal(t, exitSchema, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "outbox table outbox_event does not exist")
	require.Contains(t, errOut, "run ferry migrate")
	require.NotContains(t, out, "published")
	require.Less(t, time.Since(start), 20*time.Second, "no waiting for a table that will not come")
}

// --drain that leaves events DEAD exits 6, not 0.
func TestDrainWithDeadEventsExitsDeadLeft(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	stream, prefix := testsvc.JetStreamStream(t, testsvc.NATS(t))
	b.enqueue(t, orderPaid("1", prefix+".paid"))
	b.enqueue(t, orderPaid("2", "nowhere."+prefix)) // no stream takes this subject
	code, out, errOut := b.cli(t, "relay", "--drain", "--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream,
		"--max-attempts", "1", "--poll-interval", "20ms", "--publish-timeout", "2s")
	require.Equal(t, exitDeadLeft, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "1 published")
	require.Contains(t, out, "1 dead")
	require.Contains(t, errOut, "1 event went DEAD")
}

// status, dead list and purge --discarded on a table an older ferry
// migrated (0001 only) name the missing migration and the fix, exit 7,
// instead of a raw "Unknown column 'discarded_at'"; after ferry migrate
// they work.
func TestAdminCommandsOnOldSchema(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			b := setupOps(t, kind)
			table := b.st.Driver.Table()
			// Back to the first migration: 0002_discard's columns and record go.
			for _, q := range []string{
				"ALTER TABLE " + table + " DROP COLUMN discard_reason",
				"ALTER TABLE " + table + " DROP COLUMN discarded_at",
				"DELETE FROM ferry_migration WHERE component = 'outbox:" + table + "' AND version = 2",
			} {
				_, err := b.st.DB.ExecContext(b.ctx, q)
				require.NoError(t, err, q)
			}
			for _, args := range [][]string{{"status"}, {"dead", "list"}, {"purge", "--discarded", "--older-than", "1h"}} {
				code, out, errOut := b.cli(t, args...)
				require.Equal(t, exitSchema, code, "%v: %s\n%s", args, out, errOut)
				require.Contains(t, errOut, "lacks migration 0002_discard", args)
				require.Contains(t, errOut, "run ferry migrate", args)
				require.NotContains(t, strings.ToLower(errOut), "column", args)
			}
			code, _, errOut := b.cli(t, "migrate")
			require.Equal(t, exitOK, code, errOut)
			for _, args := range [][]string{{"status"}, {"dead", "list"}, {"purge", "--discarded", "--older-than", "1h"}} {
				code, out, errOut := b.cli(t, args...)
				require.Equal(t, exitOK, code, "%v: %s\n%s", args, out, errOut)
			}
		})
	}
}

// A table an older ferry migrated (up to 0002, without the relays'
// heartbeat table; 0004 kept, as by a ferry that had it, and 0005 and
// 0006, which change the heartbeat table, removed): status and relay
// --drain name the missing migrations and exit 7; ferry migrate adds the
// tables in place, in order, keeping the events, and both work.
func TestCommandsOnTableWithoutHeartbeats(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			b := setupOps(t, kind)
			table := b.st.Driver.Table()
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			id := b.enqueue(t, orderPaid("1", prefix+".paid"))[0]
			for _, q := range []string{"DROP TABLE " + table + "_relay", "DROP TABLE " + table + "_lease",
				"DELETE FROM ferry_migration WHERE component = 'outbox:" + table + "' AND version IN (3, 5, 6)"} {
				_, err := b.st.DB.ExecContext(b.ctx, q)
				require.NoError(t, err, q)
			}
			relay := []string{"relay", "--drain", "--drain-timeout", "30s", "--broker-url", testsvc.URL(testsvc.EnvNATS),
				"--stream", stream, "--poll-interval", "20ms"}
			for _, args := range [][]string{{"status"}, relay} {
				code, out, errOut := b.cli(t, args...)
				require.Equal(t, exitSchema, code, "%v: %s\n%s", args, out, errOut)
				require.Contains(t, errOut, "lacks migrations 0003_relay, 0005_log, 0006_lease (it has 0001_outbox, 0002_discard, 0004_dead): run ferry migrate", args)
			}
			code, _, errOut := b.cli(t, "migrate")
			require.Equal(t, exitOK, code, errOut)
			code, out, errOut := b.cli(t, "status")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "relays: none recorded")
			require.Contains(t, out, "no relay alive: 1 event pending")
			code, out, errOut = b.cli(t, relay...)
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Equal(t, ferrytype.StatusSent, b.status(t, id), "the event written before the upgrade is delivered")
			code, out, errOut = b.cli(t, "status")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "relays: none recorded", "the drained relay deleted its row as it stopped")
		})
	}
}

// With the broker unreachable at start, the daemon serves at once:
// /healthz 200, /metrics with the backlog gauge and ferry_broker_connected
// 0, /readyz 503 naming the broker; it keeps trying instead of exiting,
// and once the broker answers it is connected, ready and relays.
func TestRelayServesBeforeTheBrokerAnswers(t *testing.T) {
	// serial: it holds the broker's network cut while the relay starts.
	b := setupOps(t, "postgres")
	nc := testsvc.NATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	b.enqueue(t, orderPaid("1", prefix+".paid"))
	natsURL, natsProxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
	natsURL = strings.Replace(natsURL, "nats://", "nats://ferry:s3cr3tpw@", 1)
	natsProxy.Cut()
	addr := freePort(t)
	cmd, out := child(t, nil, append([]string{"relay", "--broker-url", natsURL, "--stream", stream, "--http-addr", addr,
		"--metrics-interval", "100ms", "--poll-interval", "20ms", "--ready-timeout", "1s"}, b.args...)...)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := "http://" + addr
	table := b.st.Driver.Table()

	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, base+"/healthz"); return code == 200 },
		func() string { return "healthz while the broker is down" })
	var metrics string
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		_, metrics = get(t, base+"/metrics")
		return strings.Contains(metrics, `ferry_outbox_events{status="new",table="`+table+`"} 1`) &&
			strings.Contains(metrics, `ferry_outbox_oldest_pending_age_seconds{table="`+table+`"}`)
	}, func() string { return "the backlog gauges while the broker is down:\n" + metrics })
	require.Contains(t, metrics, `ferry_broker_connected{broker="nats"} 0`)
	var code int
	var body string
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		code, body = get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, `"broker":{"ok":false,"error":"broker not connected: `)
	}, func() string { return fmt.Sprintf("unready naming the broker: %d %s", code, body) })
	require.Contains(t, body, `"database":{"ok":true}`)
	require.NotContains(t, body, "s3cr3tpw")
	// Still trying, not exited.
	code, _ = get(t, base+"/healthz")
	require.Equal(t, 200, code, "the relay did not exit")

	natsProxy.Restore()
	testsvc.WaitFor(t, 60*time.Second, func() bool { code, body = get(t, base+"/readyz"); return code == 200 },
		func() string { return fmt.Sprintf("ready once the broker answers: %d %s", code, body) })
	_, metrics = get(t, base+"/metrics")
	require.Contains(t, metrics, `ferry_broker_connected{broker="nats"} 1`)
	require.Len(t, testsvc.ReadStream(t, nc, stream, 1, 30*time.Second), 1)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "cannot reach the broker; retrying")
	require.NotContains(t, out.String(), "s3cr3tpw")
}

// connectedPub is a real publisher whose Connected answer the test sets,
// as the AMQP and NATS publishers report a connection down or blocked.
type connectedPub struct {
	ferrybroker.Publisher
	up atomic.Bool
}

func (p *connectedPub) Connected() bool { return p.up.Load() }

// A publisher that reports its connection down makes /readyz 503 naming
// the broker and ferry_broker_connected 0, even while its check answers;
// back up, both recover.
func TestReadinessFollowsPublisherConnected(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	ctx := testsvc.Context(t, time.Minute)
	pub, err := ferrynats.Dial(ctx, testsvc.EmbeddedNATS(t).ConnectedUrl(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	cp := &connectedPub{Publisher: pub}
	deps := &relayDeps{}
	reg := prometheus.NewRegistry()
	require.NoError(t, ferryprom.RegisterBrokerConnected(reg, "nats", deps.brokerConnected, nil))
	gauge := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, mfs, 1)
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}

	ready, checks := readiness(ctx, deps, time.Second)
	require.False(t, ready)
	require.Equal(t, "database not open yet", checks["database"].Error)
	require.Equal(t, "broker not connected yet", checks["broker"].Error)
	require.Zero(t, gauge())

	deps.setStore(b.st.Driver, nil)
	deps.setSchema(nil, "")
	deps.setPublisher(cp, nil)
	ready, checks = readiness(ctx, deps, time.Second)
	require.False(t, ready)
	require.True(t, checks["database"].OK)
	require.Contains(t, checks["broker"].Error, "broker not connected")
	require.Zero(t, gauge())

	cp.up.Store(true)
	ready, checks = readiness(ctx, deps, time.Second)
	require.True(t, ready, "%+v", checks)
	require.Equal(t, float64(1), gauge())
}
