package bench_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/testsvc"
)

var ferryBinary struct {
	once sync.Once
	path string
	err  error
}

// relayBinary returns a ferry binary for the relay-process figures:
// FERRY_BENCH_BINARY, or one built once into a temporary directory.
func relayBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FERRY_BENCH_BINARY"); p != "" {
		return p
	}
	ferryBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-bench-test-")
		if err != nil {
			ferryBinary.err = err
			return
		}
		ferryBinary.path = filepath.Join(dir, "ferry")
		out, err := exec.Command("go", "build", "-o", ferryBinary.path, "github.com/ferrydev/ferry/cmd/ferry").CombinedOutput()
		if err != nil {
			ferryBinary.err = fmt.Errorf("go build ./cmd/ferry: %w: %s", err, out)
		}
	})
	require.NoError(t, ferryBinary.err)
	return ferryBinary.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ferryBinary.path != "" {
		os.RemoveAll(filepath.Dir(ferryBinary.path))
	}
	os.Exit(code)
}

// TestRunMeasuresEveryScenario runs every scenario at a tiny size on each
// database the tests reach, and checks that each produced its figures and
// ratios and that the bench removed its tables. It times nothing.
func TestRunMeasuresEveryScenario(t *testing.T) {
	cases := []struct {
		name string
		db   func(t *testing.T) (url string, conn *sql.DB)
		amqp bool
	}{
		{"sqlite+nats", func(t *testing.T) (string, *sql.DB) {
			path := filepath.Join(t.TempDir(), "bench.db")
			db, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return "sqlite:///" + path, db
		}, false},
		{"mysql+amqp", func(t *testing.T) (string, *sql.DB) { return testsvc.URL(testsvc.EnvMySQL), testsvc.MySQL(t) }, true},
		{"postgres+amqp", func(t *testing.T) (string, *sql.DB) {
			return testsvc.URL(testsvc.EnvPostgres), testsvc.PostgresSQL(t)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, db := c.db(t)
			broker := testsvc.URL(testsvc.EnvAMQP)
			if c.amqp {
				testsvc.RabbitMQ(t)
			} else {
				srv, err := natsembed.Start(t.TempDir())
				require.NoError(t, err)
				t.Cleanup(srv.Shutdown)
				broker = srv.ClientURL()
			}
			ctx := testsvc.Context(t, 5*time.Minute)
			var progress bytes.Buffer
			rep, err := bench.Run(ctx, bench.Config{
				DatabaseURL: url, BrokerURL: broker, Events: 400, Repeat: 1, Batch: 50,
				Relays: []int{1, 2}, LiveRate: 200, LiveFor: time.Second, Retained: 100001,
				ClaimRounds: 10, ProducerTxs: 100, InboxOps: 100, RelayBinary: relayBinary(t), IdleFor: time.Second,
			}, &progress)
			require.NoError(t, err, progress.String())

			require.Positive(t, rep.RawBroker)
			require.Positive(t, rep.RawDB)
			require.Len(t, rep.Relay, 4)
			for _, f := range rep.Relay {
				require.Positive(t, f.Rate, "%+v", f)
			}
			require.Len(t, rep.RelayProcess, 4)
			require.Len(t, rep.Plain, 2)
			// The servers' CPU is measured in every drain or in none: on
			// SQLite and the embedded NATS server (the bench's own process)
			// in none; on local services where /proc shows their sockets.
			all := append(append(slices.Clone(rep.Relay), rep.RelayProcess...), rep.Plain...)
			dbCPU, brokerCPU := all[0].CPU.DB != nil, all[0].CPU.Broker != nil
			if !c.amqp {
				require.False(t, dbCPU || brokerCPU, "%+v", all[0].CPU)
			}
			for _, f := range all {
				require.Positive(t, f.Rate, "%+v", f)
				require.NotNil(t, f.CPU.Relay, "%+v", f)
				require.GreaterOrEqual(t, *f.CPU.Relay, 0.0)
				require.Equal(t, dbCPU, f.CPU.DB != nil, "database CPU %+v", f)
				require.Equal(t, brokerCPU, f.CPU.Broker != nil, "broker CPU %+v", f)
				for _, v := range []*float64{f.CPU.DB, f.CPU.Broker} {
					if v != nil {
						require.GreaterOrEqual(t, *v, 0.0)
					}
				}
			}
			for _, l := range []*bench.LiveResult{rep.Live, rep.LiveProcess, rep.LivePlain} {
				require.NotNil(t, l)
				require.Equal(t, 200, l.Events, l.Mode)
				require.Positive(t, l.P99, l.Mode)
				require.LessOrEqual(t, l.P50, l.P99, l.Mode)
				require.LessOrEqual(t, l.P99, l.Max, l.Mode)
			}
			require.Equal(t, []string{bench.LiveInProcess, bench.LiveProcess, bench.LivePlain},
				[]string{rep.Live.Mode, rep.LiveProcess.Mode, rep.LivePlain.Mode})
			require.Len(t, rep.Targets, 10)
			require.NotNil(t, rep.Idle)
			require.GreaterOrEqual(t, rep.Idle.CPUPercent, 0.0)
			require.Positive(t, rep.Idle.Seconds)
			if strings.HasPrefix(url, "sqlite") {
				require.Nil(t, rep.Idle.QueriesPerSecond, "SQLite counts no statements")
			} else {
				require.NotNil(t, rep.Idle.QueriesPerSecond)
				require.GreaterOrEqual(t, *rep.Idle.QueriesPerSecond, 0.0)
			}
			require.Len(t, rep.Producer, 2)
			require.Len(t, rep.Inbox, 2)
			for _, p := range rep.Producer {
				require.True(t, p.Business > 0 && p.Hand > 0 && p.Enqueue > 0 && p.NoSeq > 0, "%+v", p)
			}
			for _, in := range rep.Inbox {
				require.True(t, in.Bare > 0 && in.Inbox > 0, "%+v", in)
			}
			require.NotNil(t, rep.Claim)
			require.Positive(t, rep.Claim.EmptyP99)
			require.Positive(t, rep.Claim.FullP99)
			names := map[string]bool{}
			for _, r := range rep.Ratios {
				names[r.Name] = true
			}
			for _, want := range []string{"relay (2, unordered) / raw claim+mark", "relay (2, ordered) / raw publish",
				"EnqueueTx / hand INSERT, 16 writer(s)", "inbox / bare, 8 worker(s)", "claim p99 with 100001 SENT rows / empty",
				"ferry (2, process) / plain (2 loops), rate", "ferry (2, process) / plain (2 loops), relay CPU per event",
				"live process / plain, commit→delivery p99"} {
				require.True(t, names[want], "ratio %q missing from %v", want, names)
			}
			var text bytes.Buffer
			rep.WriteText(&text)
			for _, want := range []string{"raw claim + mark SENT", "ferry relay processes, 2, unordered", "plain relay loops, 2, unordered",
				"ferry relay process, defaults: rate; p50 / p99 / max", "targets for the relay as deployed"} {
				require.Contains(t, text.String(), want)
			}

			// The bench dropped every table it created.
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'ferry_bench_%'"
			if strings.HasPrefix(url, "sqlite") {
				q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'ferry_bench_%'"
			}
			var left int
			require.NoError(t, db.QueryRowContext(context.Background(), q).Scan(&left))
			require.Zero(t, left, "tables left behind")
		})
	}
}
