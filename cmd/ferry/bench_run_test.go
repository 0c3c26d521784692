package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The bench's own tests: they run its scenarios with this test binary as
// the ferry relay processes (TestMain), as ferry bench runs its own binary.

// TestRunMeasuresEveryScenario runs every scenario at a tiny size on each
// database the tests reach, and checks that each produced its figures and
// ratios and that the bench removed its tables. It times nothing.
func TestRunMeasuresEveryScenario(t *testing.T) {
	testsvc.Slow(t, "a bench run on every database")
	t.Parallel()
	cases := []struct {
		name string
		db   func(t *testing.T) (url string, conn *sql.DB)
		amqp bool
		// retained is the SENT rows the claim scenario writes first: a
		// few thousand, which produce the same figures as the bench's
		// million (the test times nothing) in a fraction of the time;
		// the one large run of the suite is the bulk test's
		// (integration/ferryadmin).
		retained int
	}{
		{"sqlite+nats", func(t *testing.T) (string, *sql.DB) {
			path := filepath.Join(t.TempDir(), "bench.db")
			db, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return "sqlite:///" + path, db
		}, false, 2001},
		{"mysql+amqp", func(t *testing.T) (string, *sql.DB) { return testsvc.URL(testsvc.EnvMySQL), testsvc.MySQL(t) }, true, 10001},
		{"postgres+amqp", func(t *testing.T) (string, *sql.DB) {
			return testsvc.URL(testsvc.EnvPostgres), testsvc.PostgresSQL(t)
		}, true, 5001},
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
				Relays: []int{1, 2}, LiveRate: 200, LiveFor: time.Second, Retained: c.retained,
				ClaimRounds: 10, ProducerTxs: 100, InboxOps: 100, RelayBinary: os.Args[0], RelayEnv: []string{envExecMain + "=1"}, IdleFor: time.Second,
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
			require.Len(t, rep.Targets, 13)
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
				"EnqueueTx / hand INSERT, 16 writer(s)", "inbox / bare, 8 worker(s)", fmt.Sprintf("claim p99 with %d SENT rows / empty", c.retained),
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

			// The bench dropped every table it created (its own: a run
			// killed earlier may have left others).
			require.True(t, strings.HasPrefix(rep.Tables, "ferry_bench_"), rep.Tables)
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE '" + rep.Tables + "%'"
			if strings.HasPrefix(url, "sqlite") {
				q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE '" + rep.Tables + "%'"
			}
			var left int
			require.NoError(t, db.QueryRowContext(context.Background(), q).Scan(&left))
			require.Zero(t, left, "tables left behind")
		})
	}
}

// TestBenchOnKafka runs the broker scenarios at a tiny size on a SQLite
// outbox and an in-process Kafka cluster (kfake): the raw franz-go
// producer, the relay in the bench's process and as ferry relay
// processes, the plain relay, and the live scenario, whose consumer reads
// the topic from the offsets the bench took as its baseline. It checks
// that each produced its figures and the relay / raw publish ratio, and
// that the bench deleted its topic. It times nothing: kfake shares the
// test's cores.
func TestBenchOnKafka(t *testing.T) {
	testsvc.Slow(t, "a bench run on Kafka")
	t.Parallel()
	seeds := testsvc.Kafka(t)
	ctx := testsvc.Context(t, 2*time.Minute)
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		DatabaseURL: "sqlite:///" + filepath.Join(t.TempDir(), "bench.db"),
		BrokerURL:   "kafka://" + strings.Join(seeds, ","),
		Scenarios:   []string{bench.ScenarioRawBroker, bench.ScenarioRelay, bench.ScenarioPlain, bench.ScenarioLive},
		Events:      300, Repeat: 1, Batch: 50, Relays: []int{1}, LiveRate: 100, LiveFor: 500 * time.Millisecond,
		RelayBinary: os.Args[0], RelayEnv: []string{envExecMain + "=1"},
	}, &progress)
	require.NoError(t, err, progress.String())
	t.Log("\n" + progress.String())

	require.True(t, strings.HasPrefix(rep.Broker, "kafka "), rep.Broker)
	require.Positive(t, rep.RawBroker)
	require.Len(t, rep.Relay, 2) // unordered and ordered
	require.Len(t, rep.RelayProcess, 2)
	require.Len(t, rep.Plain, 1)
	for _, f := range append(append(rep.Relay, rep.RelayProcess...), rep.Plain...) {
		require.Positive(t, f.Rate, "%+v", f)
	}
	for _, l := range []*bench.LiveResult{rep.Live, rep.LiveProcess, rep.LivePlain} {
		require.NotNil(t, l)
		require.Equal(t, 50, l.Events, l.Mode)
		require.Positive(t, l.P99, l.Mode)
	}
	ratios := map[string]float64{}
	for _, r := range rep.Ratios {
		ratios[r.Name] = r.Value
	}
	for _, name := range []string{"relay (1, unordered) / raw publish", "relay (1, ordered) / raw publish"} {
		require.Positive(t, ratios[name], "ratio %q in %v", name, ratios)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	require.Contains(t, text.String(), "raw publish with confirms")
	require.Contains(t, text.String(), "relay (1, unordered) / raw publish")

	// The bench deleted its topic.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	require.NoError(t, err)
	for _, name := range topics.Names() {
		require.False(t, strings.HasPrefix(name, "ferrybench."), "topic %s left behind", name)
	}
}
