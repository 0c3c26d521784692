package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// runBounded runs the ferry CLI as a child process and returns its exit
// code and output; a child still running after d is killed and fails the
// test, so that a relay that should have exited cannot hang the suite.
func runBounded(t *testing.T, d time.Duration, args ...string) (int, string) {
	t.Helper()
	cmd, out := childLive(t, nil, args...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("wait for ferry %v: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), out.String()
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("ferry %v still ran after %s:\n%s", args, d, out)
		return 0, ""
	}
}

// logBundle is an outbox table on a database that keeps a change log, and
// a JetStream stream for its events.
type logBundle struct {
	*opsBundle
	stream, prefix string
	nc             *nats.Conn
}

// setupLog returns a logBundle of kind. On PostgreSQL the replication
// slot and the publication the relays create (the defaults, ferry_<table>)
// are dropped when the test ends, after the relays it started exited
// (cleanups run last-registered first: start the relays after setupLog).
func setupLog(t *testing.T, kind string) *logBundle {
	t.Helper()
	if kind == "mysql" {
		testsvc.BinlogLock(t, false) // the relays resume the binlog from a checkpoint
	}
	st, url := testsvc.LogStore(t, kind)
	b := &logBundle{opsBundle: &opsBundle{ctx: testsvc.Context(t, 3*time.Minute), st: st, url: url}}
	var err error
	b.ob, err = ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	b.args = []string{"--database-url", url, "--table", st.Driver.Table()}
	if kind == "postgres" {
		name := "ferry_" + strings.ToLower(st.Driver.Table())
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// pg_drop_replication_slot fails while a walsender holds the
			// slot: the server notices a killed relay's connection shortly.
			for {
				_, err := st.DB.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"+
					" WHERE slot_name = $1 AND NOT active", name)
				var n int
				cerr := st.DB.QueryRowContext(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&n)
				if err == nil && cerr == nil && n == 0 {
					break
				}
				if ctx.Err() != nil {
					t.Errorf("replication slot %s not dropped: %v %v", name, err, cerr)
					break
				}
				time.Sleep(50 * time.Millisecond) // polling the slot's release, bounded by ctx
			}
			if _, err := st.DB.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name); err != nil {
				t.Errorf("drop publication %s: %v", name, err)
			}
		})
	}
	b.nc = testsvc.NATS(t)
	b.stream, b.prefix = testsvc.JetStreamStream(t, b.nc)
	return b
}

// relayArgs are the arguments of a --source log relay on the bundle's
// table and stream.
func (b *logBundle) relayArgs(extra ...string) []string {
	args := append([]string{"relay", "--source", "log", "--broker-url", testsvc.URL(testsvc.EnvNATS),
		"--stream", b.stream}, b.args...)
	return append(args, extra...)
}

// logState reads the table's log lease and checkpoint; ok is false while
// none exists.
func (b *logBundle) logState(t *testing.T) (ferrystore.LeaseState, bool) {
	t.Helper()
	st, ok, err := b.st.Driver.LeaseState(b.ctx, ferrystore.LeaseLog)
	require.NoError(t, err)
	return st, ok
}

// owner is the relay that holds the log reader's lease, "" when none does.
func (b *logBundle) owner(t *testing.T) string {
	t.Helper()
	st, ok := b.logState(t)
	if !ok || st.LeaseLeft <= 0 {
		return ""
	}
	return st.Owner
}

// enqueueN commits n events in transactions of 5.
func (b *logBundle) enqueueN(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i += 5 {
		ids = append(ids, b.enqueue(t, paidEvents(min(5, n-i), b.prefix+".paid")...)...)
	}
	return ids
}

// waitSent waits until every event of ids is SENT.
func (b *logBundle) waitSent(t *testing.T, ids []string, d time.Duration, logs func() string) {
	t.Helper()
	var left []string
	testsvc.WaitFor(t, d, func() bool {
		left = left[:0]
		for _, id := range ids {
			if b.status(t, id) != ferrytype.StatusSent {
				left = append(left, id)
			}
		}
		return len(left) == 0
	}, func() string {
		return fmt.Sprintf("%d of %d events not SENT: %v\n%s", len(left), len(ids), left, logs())
	})
}

// ferry relay --source log checks the database's setup at start and
// exits 2 naming what is missing and the fix: MariaDB without its binlog,
// PostgreSQL below wal_level=logical, SQLite, which keeps no log at all.
// An unknown --source is a usage error too.
func TestRelaySourceLogSetupErrorsExit2(t *testing.T) {
	t.Parallel()
	nc := testsvc.NATS(t)
	stream, _ := testsvc.JetStreamStream(t, nc)
	broker := []string{"--broker-url", testsvc.URL(testsvc.EnvNATS), "--stream", stream}
	for _, c := range []struct {
		name, kind string
		want       []string
	}{
		{"MySQLWithoutBinlog", "mysql", []string{"log_bin=OFF", "start the server with log_bin, binlog_format=ROW and binlog_row_image=FULL"}},
		{"PostgresWithoutLogicalWAL", "postgres", []string{"wal_level is replica", "set wal_level = logical in postgresql.conf and restart the server"}},
		{"SQLite", "sqlite", []string{"SQLite keeps no change log", "--source poll"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The table is migrated and the broker answers: what fails is
			// the log.
			b := setupOps(t, c.kind)
			for _, args := range [][]string{{"relay", "--source", "log"}, {"relay", "--source", "log", "--drain"}} {
				code, out := runBounded(t, time.Minute, append(append(args, broker...), b.args...)...)
				require.Equal(t, exitUsage, code, "%v: %s", args, out)
				// The error line, the last one ferry writes on stderr.
				var line string
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, "ferry: ") {
						line = l
					}
				}
				for _, w := range c.want {
					require.Contains(t, line, w, "%v: %s", args, out)
				}
			}
		})
	}
	t.Run("UnknownSource", func(t *testing.T) {
		t.Parallel()
		code, _, errOut := ferryCLI(t, append([]string{"relay", "--source", "bogus", "--database-url", migratedSQLite(t)}, broker...)...)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `--source "bogus": want poll or log`)
	})
}

// Two ferry relay --source log processes on one table: one reads the log,
// holding the lease, the other stands by. Killed with SIGKILL, the reader
// gives up nothing; once its lease ends the standby takes it (within
// about two leases) and every committed event reaches the stream.
func TestRelaySourceLogStandbyTakesOverAfterKill(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupLog(t, kind)
			type proc struct {
				cmd *exec.Cmd
				out *testsvc.LogBuffer
			}
			procs := map[string]*proc{}
			for _, id := range []string{"a", "b"} {
				cmd, out := childLive(t, nil, b.relayArgs("--relay-id", id, "--log-lease", lease.String(),
					"--lease", "2s", "--publish-timeout", "1s", "--sweep-interval", "200ms", "--retry-initial", "10ms",
					"--poll-interval", "50ms", "--heartbeat", "500ms")...)
				procs[id] = &proc{cmd, out}
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			}
			logs := func() string {
				return fmt.Sprintf("--- a:\n%s\n--- b:\n%s", procs["a"].out, procs["b"].out)
			}
			var first string
			testsvc.WaitFor(t, 30*time.Second, func() bool { first = b.owner(t); return first != "" },
				func() string { return "a relay reads the log\n" + logs() })
			other := map[string]string{"a": "b", "b": "a"}[first]

			before := b.enqueueN(t, 30)
			b.waitSent(t, before, time.Minute, logs)
			require.Equal(t, first, b.owner(t), "the reader kept its lease")

			require.NoError(t, procs[first].cmd.Process.Kill())
			requireKilled(t, procs[first].cmd, procs[first].out)
			killed := time.Now()
			st, ok := b.logState(t)
			require.True(t, ok)
			require.NotEmpty(t, st.Position, "the reader saved a checkpoint")
			require.Equal(t, first, st.Owner, "a killed reader gives nothing up")
			after := b.enqueueN(t, 30)
			var now string
			testsvc.WaitFor(t, 2*lease+3*time.Second, func() bool { now = b.owner(t); return now == other },
				func() string {
					return fmt.Sprintf("%s did not take the lease within %s of the kill (owner %q)\n%s", other,
						time.Since(killed), now, logs())
				})
			t.Logf("%s took the log over %s after %s was killed", other, time.Since(killed), first)
			b.waitSent(t, after, time.Minute, logs)
			// The new reader streams from the dead one's checkpoint and
			// saves its own as the events' claims commit.
			var now2 ferrystore.LeaseState
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				now2, _ = b.logState(t)
				return now2.Owner == other && now2.Position != "" && now2.Position != st.Position
			}, func() string { return fmt.Sprintf("checkpoint %+v, at the kill %q\n%s", now2, st.Position, logs()) })

			committed := append(append([]string{}, before...), after...)
			got := testsvc.ReadStream(t, b.nc, b.stream, len(committed), 30*time.Second)
			seen := map[string]int{}
			for _, m := range got {
				seen[m.ID]++
			}
			for i, id := range committed {
				require.Positive(t, seen[id], "event %d (%s) never reached the stream", i, id)
			}
			require.Len(t, seen, len(committed), "no event reached the stream that was not committed")
			require.Equal(t, other, b.owner(t), "the standby reads the log")
			out := procs[other].out.String()
			standby, reading := strings.Index(out, "log relay: standing by"), strings.LastIndex(out, "log relay: reading the table's log")
			require.True(t, standby >= 0 && reading > standby, "%s stood by, then read the log:\n%s", other, out)
		})
	}
}

// statusJSON is the part of ferry status --json this file reads.
type statusJSON struct {
	Log *struct {
		Source   string   `json:"source"`
		Position string   `json:"position"`
		Owner    string   `json:"owner"`
		LagBytes *int64   `json:"lag_bytes"`
		Head     string   `json:"head"`
		Standbys []string `json:"standbys"`
	} `json:"log"`
	Relays []struct {
		ID      string `json:"id"`
		Source  string `json:"source"`
		LogRole string `json:"log_role"`
	} `json:"relays"`
}

func (b *logBundle) statusJSON(t *testing.T) statusJSON {
	t.Helper()
	code, out, errOut := b.cli(t, "status", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// ferry status shows the log relay's reader of the table: none before a
// log relay ran; after a --source log --drain run, which exits once the
// table is drained and gives the lease up, its checkpoint without a
// reader; while a log relay runs, that relay, its lease, the checkpoint
// and the log the database retains for it (lag_bytes in --json); once it
// stopped on SIGTERM, no reader again.
func TestStatusShowsTheLogRelay(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupLog(t, kind)
			code, out, errOut := b.cli(t, "status")
			require.Equal(t, exitOK, code, errOut)
			require.NotContains(t, out, "log relay:", "no log relay ever ran")
			require.Nil(t, b.statusJSON(t).Log)

			ids := b.enqueueN(t, 10)
			code, out = runBounded(t, 2*time.Minute, b.relayArgs("--drain", "--drain-timeout", "60s", "--relay-id", "drainer")...)
			require.Equal(t, exitOK, code, out)
			require.Contains(t, out, "10 published")
			require.Contains(t, out, "left: 0 new, 0 sending, 0 dead")
			for i, id := range ids {
				require.Equal(t, ferrytype.StatusSent, b.status(t, id), "event %d", i)
			}
			ls, ok := b.logState(t)
			require.True(t, ok, "the drain run took the log lease:\n%s", out)
			require.Equal(t, "", b.owner(t), "the drain run gave the lease up as it stopped")
			code, out, errOut = b.cli(t, "status")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "\nlog relay: "+ls.Source+"\n")
			require.Contains(t, out, "none (the lease ended or was given up)")

			cmd, relayOut := childLive(t, nil, b.relayArgs("--relay-id", "reader", "--log-lease", "30s")...)
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			testsvc.WaitFor(t, 30*time.Second, func() bool { return b.owner(t) == "reader" },
				func() string { return "the relay reads the log:\n" + relayOut.String() })
			// A second log relay stands by: it polls the lease, and
			// ferry status names it.
			standby, standbyOut := childLive(t, nil, b.relayArgs("--relay-id", "standby", "--log-lease", "30s")...)
			t.Cleanup(func() { _ = standby.Process.Kill(); _ = standby.Wait() })
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				st := b.statusJSON(t)
				return st.Log != nil && slices.Equal(st.Log.Standbys, []string{"standby"})
			}, func() string { return "the standby beats:\n" + standbyOut.String() })
			more := b.enqueueN(t, 10)
			b.waitSent(t, more, time.Minute, relayOut.String)
			// The checkpoint moves past the new events' transactions.
			var now ferrystore.LeaseState
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				now, _ = b.logState(t)
				return now.Position != "" && now.Position != ls.Position
			}, func() string { return fmt.Sprintf("checkpoint %q, was %q\n%s", now.Position, ls.Position, relayOut) })

			code, out, errOut = b.cli(t, "status")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "\nlog relay: "+now.Source+"\n")
			require.Contains(t, out, "READER")
			require.Contains(t, out, "CHECKPOINT")
			require.Regexp(t, `reader \(lease \S+ left\)`, out)
			require.Contains(t, out, " bytes of log retained (head ", "the lag was measured")
			st := b.statusJSON(t)
			require.NotNil(t, st.Log, "status --json has the log object")
			require.Equal(t, now.Source, st.Log.Source)
			require.Equal(t, "reader", st.Log.Owner)
			require.NotEmpty(t, st.Log.Position)
			require.NotNil(t, st.Log.LagBytes)
			require.GreaterOrEqual(t, *st.Log.LagBytes, int64(0))
			require.NotEmpty(t, st.Log.Head)
			require.Equal(t, []string{"standby"}, st.Log.Standbys)
			roles := map[string]string{}
			for _, r := range st.Relays {
				require.Equal(t, "log", r.Source, "relay %s", r.ID)
				roles[r.ID] = r.LogRole
			}
			require.Equal(t, map[string]string{"reader": "reader", "standby": "standby"}, roles)
			require.Regexp(t, `(?m)^\s+reader\s.*\slog, reader\s`, out, "the relays table marks the reader")
			require.Regexp(t, `(?m)^\s+standby\s.*\slog, standby\s`, out, "and the standby")
			require.Regexp(t, `STANDBY\n.*\sstandby\n`, out, "the log section names the standby")

			// The standby stops first: the reader keeps the lease.
			require.NoError(t, standby.Process.Signal(syscall.SIGTERM))
			require.NoError(t, standby.Wait(), standbyOut.String())
			require.Equal(t, "reader", b.owner(t))
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, cmd.Wait(), relayOut.String())
			require.Equal(t, "", b.owner(t), "a relay stopped by SIGTERM gives the lease up")
			st = b.statusJSON(t)
			require.NotNil(t, st.Log)
			require.Empty(t, st.Log.Owner)
			require.NotEmpty(t, st.Log.Position, "the checkpoint stays")
		})
	}
}
