package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// opsBundle is an outbox table on a real database, reachable by the CLI.
type opsBundle struct {
	ctx  context.Context
	st   testsvc.SQLStore
	ob   *ferry.Outbox[*sql.Tx]
	url  string // the database URL the CLI uses
	args []string
}

func setupOps(t *testing.T, kind string) *opsBundle {
	t.Helper()
	b := &opsBundle{ctx: testsvc.Context(t, 3*time.Minute), st: testsvc.Store(t, kind)}
	switch kind {
	case "mysql":
		b.url = testsvc.URL(testsvc.EnvMySQL)
	case "postgres":
		b.url = testsvc.URL(testsvc.EnvPostgres)
	case "sqlite":
		var file string
		require.NoError(t, b.st.DB.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file))
		b.url = "sqlite://" + file
	}
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	b.args = []string{"--database-url", b.url, "--table", b.st.Driver.Table()}
	return b
}

// cli runs a ferry command on the bundle's table.
func (b *opsBundle) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return ferryCLI(t, append(args, b.args...)...)
}

func (b *opsBundle) enqueue(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := b.ob.EnqueueTx(b.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return ids
}

func (b *opsBundle) relay(t *testing.T, natsURL, stream string, cfg ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	pub, err := ferrynats.Dial(b.ctx, natsURL, &ferrynats.DialConfig{Config: ferrynats.Config{Stream: stream}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	r, err := ferry.NewRelay(b.st.Driver, pub, &cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func (b *opsBundle) status(t *testing.T, id string) ferrytype.Status {
	t.Helper()
	row, err := b.st.Driver.Get(b.ctx, id)
	require.NoError(t, err)
	return row.Status
}

func orderPaid(agg, dest string) ferry.Event {
	return ferry.Event{AggregateType: "order", AggregateID: agg, Type: "OrderPaid", Payload: json.RawMessage(`{}`), Destination: dest}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// Flags beat the environment, which beats the config file, which beats the
// defaults; --print-config says where each value came from.
func TestConfigPrecedence(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	cfg := writeFile(t, "ferry.yaml", `
database_url: postgres://app:filepw@db.example:5432/app
table: from_file
log_level: debug
relay:
  batch_size: 7
  lanes: 3
  subjects: [orders.>, invoices.>]
  http_addr: 127.0.0.1:9999
`)
	t.Setenv("FERRY_LANES", "5")
	t.Setenv("FERRY_TABLE", "from_env")
	code, out, errOut := ferryCLI(t, "relay", "--config", cfg, "--table", "from_flag", "--print-config")
	require.Equal(t, exitOK, code, errOut)
	line := func(key string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == key {
				return strings.Join(f[1:], " ")
			}
		}
		t.Fatalf("%s not printed:\n%s", key, out)
		return ""
	}
	require.Equal(t, "from_flag flag --table", line("table"))
	require.Equal(t, "5 env FERRY_LANES", line("relay.lanes"))
	require.Equal(t, "7 file "+cfg+":6", line("relay.batch_size"))
	require.Equal(t, "debug file "+cfg+":4", line("log_level"))
	require.Equal(t, "orders.>,invoices.> file "+cfg+":8", line("relay.subjects"))
	require.Equal(t, "127.0.0.1:9999 file "+cfg+":9", line("relay.http_addr"))
	require.Equal(t, "30s default", line("relay.lease"))
	require.Contains(t, line("database_url"), "postgres://app:xxxxx@db.example:5432/app")
	require.NotContains(t, out, "filepw", "passwords from the file are redacted")

	// FERRY_CONFIG names the file when --config does not.
	t.Setenv(envConfig, cfg)
	code, out, errOut = ferryCLI(t, "status", "--print-config")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "from_env")

	t.Run("Errors", func(t *testing.T) {
		t.Setenv(envConfig, "")
		for _, c := range []struct{ name, yaml, want string }{
			{"UnknownSetting", "relay:\n  batchsize: 7\n", "line 2: unknown setting relay.batchsize (relay settings: batch_size,"},
			{"UnknownSection", "relais:\n  batch_size: 7\n", "line 1: unknown section relais"},
			{"BadValue", "relay:\n  batch_size: many\n", "line 2: relay.batch_size: \"many\""},
			{"NotYAML", "relay: [\n", "config"},
			{"BadCheckIdentifier", "reconcile:\n  checks:\n    - {table: \"orders; drop\", key_column: id, time_column: t, event_type: E}\n",
				"reconcile.checks[0].table"},
			{"CheckMissingField", "reconcile:\n  checks:\n    - {table: orders, key_column: id, event_type: E}\n",
				"reconcile.checks[0].time_column is required"},
			{"CheckUnknownField", "reconcile:\n  checks:\n    - {table: orders, key: id}\n", "unknown field key"},
		} {
			t.Run(c.name, func(t *testing.T) {
				code, _, errOut := ferryCLI(t, "relay", "--config", writeFile(t, "f.yaml", c.yaml), "--print-config")
				require.Equal(t, exitUsage, code, errOut)
				require.Contains(t, errOut, c.want)
			})
		}
		code, _, errOut := ferryCLI(t, "status", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "missing.yaml")
	})
}

// What ferry status shows for a relay whose broker is down: the events
// wait NEW and the oldest one's age grows, but no attempt is spent on the
// outage (the relay claims nothing while its publisher is disconnected),
// so nothing is listed as failed; --max-pending-age still flags the
// backlog.
func TestStatusShowsABrokerOutage(t *testing.T) {
	// serial: it cuts the broker's network and reads the outage back.
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			b := setupOps(t, kind)
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			natsURL, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
			r := b.relay(t, natsURL, stream, ferry.RelayConfig{
				PollInterval:   20 * time.Millisecond,
				Lease:          2 * time.Second,
				PublishTimeout: 100 * time.Millisecond,
				Retry:          ferry.ExponentialBackoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
				Heartbeat:      ferry.HeartbeatConfig{Interval: 20 * time.Millisecond, Version: "v7.7.7", Broker: natsURL},
			})
			proxy.Cut()
			testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Outages == 1 }, func() string { return "the relay sees the outage" })
			b.enqueue(t, orderPaid("1", prefix+".paid"), orderPaid("2", prefix+".paid"), orderPaid("3", prefix+".shipped"))

			// The relay is alive, and its heartbeat says its broker is down.
			var code int
			var out, errOut string
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				code, out, errOut = b.cli(t, "status")
				return code == exitOK && strings.Contains(out, "relays: 1 alive of 1 recorded") && strings.Contains(out, " DOWN")
			}, func() string {
				return fmt.Sprintf("ferry status shows the relay's broker down: %d\n%s\n%s", code, out, errOut)
			})
			t.Logf("ferry status, broker down:\n%s", out)
			require.Regexp(t, r.ID()+`\s+yes, leads\s+\S+\s+\d+\s+v7\.7\.7\s+`, out, "alive, and the table's one relay leads its maintenance")
			require.NotContains(t, out, "no relay alive")
			require.Regexp(t, `NEW\s+3 \(3 ready now\)`, out)
			require.Contains(t, out, "oldest pending event: ")
			require.Contains(t, out, ", NEW, attempts 0")
			require.Contains(t, out, prefix+".paid")
			require.NotContains(t, out, "last error:")
			require.NotContains(t, out, "events that failed")

			code, out, errOut = b.cli(t, "status", "--json")
			require.Equal(t, exitOK, code, errOut)
			var rep ferryadmin.StatusReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Equal(t, int64(3), rep.Counts["NEW"]+rep.Counts["SENDING"])
			require.Greater(t, rep.OldestPendingSeconds, 0.0)
			require.NotNil(t, rep.OldestPending)
			require.Zero(t, rep.OldestPending.Attempts)
			require.Len(t, rep.Destinations, 2)
			require.Equal(t, prefix+".paid", rep.Destinations[0].Destination)
			require.Equal(t, int64(2), rep.Destinations[0].New+rep.Destinations[0].Sending)
			require.Empty(t, rep.Failed)
			require.Len(t, rep.Relays, 1)
			require.Equal(t, r.ID(), rep.Relays[0].ID)
			require.True(t, rep.Relays[0].Alive)
			require.False(t, rep.Relays[0].BrokerConnected)
			require.NotEmpty(t, rep.Relays[0].BrokerError)

			// As a check: the oldest event is older than 1ms.
			code, _, errOut = b.cli(t, "status", "--check", "--max-pending-age", "1ms")
			require.Equal(t, exitFindings, code, errOut)
			require.Contains(t, errOut, "status check: 0 DEAD")

			proxy.Restore()
			testsvc.WaitFor(t, 60*time.Second, func() bool { return r.Stats().Confirmed == 3 }, func() string { return "delivered once the broker is back" })
			require.Zero(t, r.Stats().Unknown, "no attempt was spent on the outage")
			code, out, errOut = b.cli(t, "status", "--check", "--count-sent")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "none pending")
			require.Regexp(t, `SENT\s+3`, out)
			require.Contains(t, out, "nothing needs attention")
		})
	}
}

// A DEAD event, retried with ferry dead retry after its cause was fixed,
// is delivered to the real broker with its original id.
func TestDeadRetryDeliversTheSameEventID(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupOps(t, kind)
			nc := testsvc.NATS(t)
			subject := testsvc.Name("late") + ".paid"
			id := b.enqueue(t, orderPaid("42", subject))[0]
			r := b.relay(t, testsvc.URL(testsvc.EnvNATS), "", ferry.RelayConfig{PollInterval: 20 * time.Millisecond,
				Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2}})
			testsvc.WaitFor(t, 30*time.Second, func() bool { return b.status(t, id) == ferrytype.StatusDead }, func() string { return "the event dies: no stream" })

			code, out, errOut := b.cli(t, "dead", "list", "--json")
			require.Equal(t, exitOK, code, errOut)
			var list struct {
				Events []ferryadmin.Event `json:"events"`
				More   bool               `json:"more"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &list))
			require.Len(t, list.Events, 1)
			require.Equal(t, id, list.Events[0].ID)
			require.Equal(t, 2, list.Events[0].Attempts)
			require.Contains(t, list.Events[0].LastError, "attempt 2: returned")

			code, out, errOut = b.cli(t, "dead", "show", id)
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "status:         DEAD")
			require.Contains(t, out, `no JetStream stream is bound to subject "`+subject+`"`)
			require.Contains(t, out, "holds back:     0 later events of order:42")

			// The fix: the stream now exists. Then the retry.
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			stream := testsvc.Name("LATE_")
			_, err = js.CreateStream(b.ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
			code, out, errOut = b.cli(t, "dead", "retry", "--id", id)
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "retried 1 of 1 matching DEAD event in 1 batch: NEW again, attempts 0, same id; the relay publishes it on its next poll")

			testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Confirmed == 1 }, func() string { return "the retried event is published" })
			got := testsvc.ReadStream(t, nc, stream, 1, 30*time.Second)
			require.Len(t, got, 1)
			require.Equal(t, id, got[0].ID, "the broker message id is the original event id")
			require.Equal(t, id, got[0].Header.Get("Ferry-Event-Id"))
			row, err := b.st.Driver.Get(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusSent, row.Status)
			require.Equal(t, 1, row.Attempt, "attempts started over")

			code, _, errOut = b.cli(t, "dead", "retry", "--id", id)
			require.Equal(t, exitNoMatch, code, "the event is not DEAD any more: %s", errOut)
			code, _, _ = b.cli(t, "dead", "show", "no-such-event")
			require.Equal(t, exitNoMatch, code)
			code, _, errOut = b.cli(t, "dead", "retry")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "or pass --all")
		})
	}
}

// In ordered mode a DEAD event holds back its aggregate; discarding it
// (with a reason, kept in the row) lets the next event go.
func TestDeadDiscardUnblocksAnOrderedAggregate(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "postgres")
	nc := testsvc.NATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	ids := b.enqueue(t, orderPaid("7", testsvc.Name("nowhere")+".x"), orderPaid("7", prefix+".paid"))
	b.relay(t, testsvc.URL(testsvc.EnvNATS), "", ferry.RelayConfig{PollInterval: 20 * time.Millisecond, Ordered: true,
		Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 1}})
	testsvc.WaitFor(t, 30*time.Second, func() bool { return b.status(t, ids[0]) == ferrytype.StatusDead }, func() string { return "the first event dies" })
	require.Equal(t, ferrytype.StatusNew, b.status(t, ids[1]), "held back by the DEAD event")

	code, out, errOut := b.cli(t, "dead", "show", ids[0], "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"holds_back": 1`)
	code, _, errOut = b.cli(t, "dead", "discard", "--aggregate", "order:7")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--reason is required")
	code, out, errOut = b.cli(t, "dead", "discard", "--aggregate", "order:7", "--dry-run")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, ids[0])
	require.Equal(t, ferrytype.StatusDead, b.status(t, ids[0]), "a dry run changes nothing")

	code, out, errOut = b.cli(t, "dead", "discard", "--aggregate", "order:7", "--reason", "test event, ticket OPS-1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "discarded 1 of 1 matching DEAD event in 1 batch")
	got := testsvc.ReadStream(t, nc, stream, 1, 30*time.Second)
	require.Equal(t, ids[1], got[0].ID, "the aggregate moved on")
	row, err := b.st.Driver.Get(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDiscarded, row.Status)
	require.Contains(t, row.DiscardReason, "test event, ticket OPS-1 (by ")
	require.NotEmpty(t, row.LastError, "the failure stays on record")
}

// A business row committed without its event is found, and the command
// exits non-zero; rows with their event are not.
func TestReconcileFindsABusinessRowWithoutItsEvent(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			b := setupOps(t, kind)
			biz := b.st.Driver.Table() + "_orders"
			timeType, now := map[string]string{"mysql": "DATETIME(6)", "postgres": "timestamptz", "sqlite": "TEXT"}[kind],
				map[string]string{"mysql": "NOW(6) - INTERVAL 5 MINUTE", "postgres": "now() - interval '5 minutes'",
					"sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-5 minutes')"}[kind]
			_, err := b.st.DB.Exec("CREATE TABLE " + biz + " (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL, placed_at " +
				timeType + " NOT NULL)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = b.st.DB.Exec("DROP TABLE " + biz) })
			place := func(id int, withEvent bool) {
				tx, err := b.st.DB.BeginTx(b.ctx, nil)
				require.NoError(t, err)
				_, err = tx.Exec(fmt.Sprintf("INSERT INTO %s (id, status, placed_at) VALUES (%d, 'NEW', %s)", biz, id, now))
				require.NoError(t, err)
				if withEvent {
					_, err = b.ob.EnqueueTx(b.ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(id),
						Type: "OrderPlaced", Payload: json.RawMessage(`{}`)})
					require.NoError(t, err)
				}
				require.NoError(t, tx.Commit())
			}
			place(1, true)
			place(2, false) // a code path that skipped the outbox
			place(3, true)
			cfg := writeFile(t, "ferry.yaml", fmt.Sprintf(`
reconcile:
  window: 1h
  checks:
    - name: orders-placed
      table: %s
      key_column: id
      time_column: placed_at
      aggregate_type: order
      event_type: OrderPlaced
`, biz))
			code, out, errOut := b.cli(t, "reconcile", "--config", cfg, "--pending-older-than", "0")
			require.Equal(t, exitFindings, code, "%s\n%s", out, errOut)
			t.Logf("ferry reconcile:\n%s", out)
			require.Regexp(t, `check orders-placed: .* 1 row without a OrderPlaced event`, out)
			require.Contains(t, errOut, "reconcile: 1 finding")

			code, out, errOut = b.cli(t, "reconcile", "--config", cfg, "--json", "--pending-older-than", "1ms")
			require.Equal(t, exitFindings, code, errOut)
			var rep ferryadmin.ReconcileReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Len(t, rep.Checks, 1)
			require.Equal(t, []string{"2"}, keysOf(rep.Checks[0].Missing))
			require.NotNil(t, rep.Stuck)
			require.Len(t, rep.Stuck.Events, 2, "no relay runs: both events are pending")
			require.Equal(t, 3, rep.Findings)

			// Once the missing event exists, and nothing is stuck, the run is clean.
			tx, err := b.st.DB.BeginTx(b.ctx, nil)
			require.NoError(t, err)
			_, err = b.ob.EnqueueTx(b.ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "2", Type: "OrderPlaced",
				Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			code, out, errOut = b.cli(t, "reconcile", "--config", cfg, "--pending-older-than", "1h")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "nothing found")

			// A window longer than the relay's retention would report purged events.
			t.Setenv("FERRY_RETENTION", "30m")
			code, _, errOut = b.cli(t, "reconcile", "--config", cfg)
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "longer than the relay's retention")
		})
	}
}

func keysOf(m []ferrystore.MissingEvent) []string {
	out := make([]string, len(m))
	for i := range m {
		out[i] = m[i].Key
	}
	return out
}

// Purge deletes old SENT (and, asked, DISCARDED) events in batches and
// never a NEW, SENDING or DEAD one, however old.
func TestPurgeLeavesPendingEventsAlone(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupOps(t, kind)
			a := b.st.Driver
			claim := func(n int) ([]string, string) {
				tok := testsvc.Name("tok-")
				msgs, err := a.Claim(b.ctx, ferrystore.ClaimParams{Limit: n, Token: tok, Lease: time.Minute})
				require.NoError(t, err)
				require.Len(t, msgs, n)
				ids := make([]string, n)
				for i, m := range msgs {
					ids[i] = m.ID
				}
				return ids, tok
			}
			dead := b.enqueue(t, orderPaid("d1", "x"), orderPaid("d2", "x"))
			ids, tok := claim(2)
			_, err := a.MarkFailed(b.ctx, []ferrystore.Failure{{ID: ids[0], Token: tok, Dead: true, Error: "x"},
				{ID: ids[1], Token: tok, Dead: true, Error: "x"}})
			require.NoError(t, err)
			code, _, errOut := b.cli(t, "dead", "discard", "--id", dead[0], "--reason", "test")
			require.Equal(t, exitOK, code, errOut)
			sent := b.enqueue(t, orderPaid("s1", "x"), orderPaid("s2", "x"), orderPaid("s3", "x"))
			ids, tok = claim(3)
			_, err = a.MarkSent(b.ctx, tok, ids)
			require.NoError(t, err)
			sending := b.enqueue(t, orderPaid("p1", "x"))
			claim(1)
			pending := b.enqueue(t, orderPaid("n1", "x"))

			code, _, errOut = b.cli(t, "purge")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "--older-than is required")
			code, out, errOut := b.cli(t, "purge", "--older-than", "1h")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "deleted 0 SENT events")

			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut = b.cli(t, "purge", "--older-than", "1ms", "--discarded", "--dry-run")
				require.Equal(t, exitOK, code, errOut)
				return strings.Contains(out, "would delete 3 SENT events") && strings.Contains(out, "would delete 1 DISCARDED event")
			}, func() string { return "sent_at and discarded_at fall behind the database clock: " + out })
			require.Contains(t, out, "(dry run: nothing deleted)")
			for _, id := range sent {
				require.Equal(t, ferrytype.StatusSent, b.status(t, id), "a dry run deletes nothing")
			}

			var res struct {
				Results []struct {
					Kind       string `json:"kind"`
					Deleted    int64  `json:"deleted"`
					Statements int    `json:"statements"`
				} `json:"results"`
			}
			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut = b.cli(t, "purge", "--older-than", "1ms", "--batch", "2", "--discarded", "--json",
					"--progress-interval", "1ns")
				require.Equal(t, exitOK, code, errOut)
				require.NoError(t, json.Unmarshal([]byte(out), &res))
				return res.Results[0].Deleted > 0
			}, func() string { return "sent_at falls behind the database clock" })
			require.Equal(t, int64(3), res.Results[0].Deleted)
			require.Equal(t, 2, res.Results[0].Statements, "batches of 2")
			require.Contains(t, errOut, "ferry: purge sent: 2 deleted in 1 statement", "progress on stderr, JSON on stdout")
			require.Contains(t, errOut, "ferry: purge sent: 3 deleted in 2 statements")
			require.Equal(t, "discarded", res.Results[1].Kind)
			require.Equal(t, int64(1), res.Results[1].Deleted)
			for _, id := range sent {
				_, err := a.Get(b.ctx, id)
				require.ErrorIs(t, err, ferrytype.ErrNotFound)
			}
			require.Equal(t, ferrytype.StatusDead, b.status(t, dead[1]))
			require.Equal(t, ferrytype.StatusSending, b.status(t, sending[0]))
			require.Equal(t, ferrytype.StatusNew, b.status(t, pending[0]))
		})
	}
}

// ferry.example.yaml documents every setting a config file can hold, and
// every command accepts it.
func TestExampleConfigIsCompleteAndValid(t *testing.T) {
	t.Parallel()
	const path = "../../ferry.example.yaml"
	root := newRoot()
	cf, err := loadConfig(root, path)
	require.NoError(t, err)
	for key := range knownKeys(root) {
		switch key {
		case "reconcile.checks":
			require.NotEmpty(t, cf.checks, "ferry.example.yaml shows a reconcile check")
			continue
		case "reconcile.effects":
			require.NotEmpty(t, cf.effects, "ferry.example.yaml shows a reconcile effect")
			continue
		}
		require.Contains(t, cf.values, key, "ferry.example.yaml documents %s", key)
	}
	for _, c := range []string{"relay", "status", "reconcile", "purge", "migrate", "conflicts list", "conflicts show 1", "console"} {
		code, out, errOut := ferryCLI(t, append(strings.Fields(c), "--config", path, "--print-config")...)
		require.Equal(t, exitOK, code, "%s: %s", c, errOut)
		require.NotContains(t, out, " default\n", "%s: every setting comes from the file", c)
	}
}

// Retry by filter works through every matching DEAD event in bounded
// batches and leaves the others alone.
func TestDeadRetryByFilterInBatches(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "mysql")
	events := []ferry.Event{}
	for i := 0; i < 5; i++ {
		events = append(events, orderPaid(fmt.Sprint(i), "orders.paid"))
	}
	other := orderPaid("9", "orders.refunded")
	other.Type = "OrderRefunded"
	ids := b.enqueue(t, append(events, other)...)
	msgs, err := b.st.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "tok", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 6)
	fails := make([]ferrystore.Failure, len(msgs))
	for i, m := range msgs {
		fails[i] = ferrystore.Failure{ID: m.ID, Token: "tok", Dead: true, Error: "attempt 1: rejected"}
	}
	_, err = b.st.Driver.MarkFailed(b.ctx, fails)
	require.NoError(t, err)

	code, out, errOut := b.cli(t, "dead", "retry", "--type", "OrderPaid", "--since", "1h", "--batch", "2", "--json")
	require.Equal(t, exitOK, code, errOut)
	var res struct {
		Changed int64    `json:"changed"`
		IDs     []string `json:"ids"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, int64(5), res.Changed)
	require.ElementsMatch(t, ids[:5], res.IDs)
	for _, id := range ids[:5] {
		require.Equal(t, ferrytype.StatusNew, b.status(t, id))
	}
	require.Equal(t, ferrytype.StatusDead, b.status(t, ids[5]), "another type is left alone")
	code, _, _ = b.cli(t, "dead", "retry", "--type", "OrderPaid")
	require.Equal(t, exitNoMatch, code)
}

// A row written by hand with headers that are not an object of strings
// ends DEAD on its first claim; `ferry dead list` lists it with its reason
// and `ferry dead show` shows the headers as stored.
func TestDeadShowsAMalformedRow(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	_, err := b.st.DB.ExecContext(b.ctx, `INSERT INTO "`+b.st.Driver.Table()+`" (event_id, aggregate_id, event_type, payload, headers)`+
		` VALUES ('hand-1', '7', 'OrderPaid', '{"n":1}', '{"retry":1}')`)
	require.NoError(t, err)
	msgs, err := b.st.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: "t", Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, msgs)

	code, out, errOut := b.cli(t, "dead", "list")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "hand-1")
	require.Contains(t, out, "malformed row: headers: json: cannot unmarshal number")

	code, out, errOut = b.cli(t, "dead", "show", "hand-1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "status:         DEAD")
	require.Contains(t, out, `headers:        {"retry":1} (as stored)`)
	require.Contains(t, out, `payload:        {"n":1}`)
}
