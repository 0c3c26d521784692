package bench_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestLogScenario runs the log scenario at a tiny size with the relays in
// the test's process (the ferry binary's processes are cmd/ferry's
// TestRunMeasuresEveryScenario): on each server that keeps a change log,
// it checks that the log relay and the polling relay each produced their
// live latencies and drains, and that every target has a row. It times
// nothing.
func TestLogScenario(t *testing.T) {
	testsvc.Slow(t, "a bench run of the log relay")
	testsvc.RabbitMQ(t)
	testsvc.BinlogLock(t, false)
	for _, c := range []struct{ name, url, logURL string }{
		{"mysql", testsvc.URL(testsvc.EnvMySQL), testsvc.URL(testsvc.EnvMySQLBinlog)},
		{"postgres", testsvc.URL(testsvc.EnvPostgres), testsvc.URL(testsvc.EnvPostgresLogical)},
	} {
		t.Run(c.name, func(t *testing.T) {
			testsvc.LogStore(t, c.name) // skips (fails when required) without the server
			ctx := testsvc.Context(t, 3*time.Minute)
			var progress bytes.Buffer
			rep, err := bench.Run(ctx, bench.Config{
				DatabaseURL: c.url, BrokerURL: testsvc.URL(testsvc.EnvAMQP), Scenarios: []string{bench.ScenarioLog},
				Events: 300, Repeat: 1, Batch: 50, LiveRate: 100, LiveFor: 500 * time.Millisecond,
				LogMySQLURL: testsvc.URL(testsvc.EnvMySQLBinlog), LogPostgresURL: testsvc.URL(testsvc.EnvPostgresLogical), RequireLog: true,
			}, &progress)
			require.NoError(t, err, progress.String())
			l := rep.Log
			require.NotNil(t, l, progress.String())
			require.False(t, l.Processes)
			require.Positive(t, l.RawBroker)
			for _, x := range []*bench.LiveResult{l.Live, l.LivePoll} {
				require.NotNil(t, x)
				require.Equal(t, 50, x.Events, x.Mode)
				require.LessOrEqual(t, x.P50, x.P99, x.Mode)
			}
			require.Equal(t, []string{"log in-process", "poll in-process"}, []string{l.Live.Mode, l.LivePoll.Mode})
			for _, f := range []bench.RelayFigure{l.ProducersAlone, l.Drain, l.DrainPoll} {
				require.Positive(t, f.Rate, "%+v", f)
			}
			require.Nil(t, l.Idle, "the idle log relay runs as a process only")
			require.Len(t, rep.LogTargets, 8)
			var text bytes.Buffer
			rep.WriteText(&text)
			for _, want := range []string{"targets for the log relay (ferry relay --source log)", "drain behind producers, log relay / polling relay",
				"first commit → last event SENT"} {
				require.Contains(t, text.String(), want)
			}
		})
	}
}

// TestLogScenarioSkipsWithoutLog: on SQLite, which keeps no change log,
// the log scenario is skipped with its reason.
func TestLogScenarioSkipsWithoutLog(t *testing.T) {
	ctx := testsvc.Context(t, time.Minute)
	testsvc.NATS(t)
	rep, err := bench.Run(ctx, bench.Config{DatabaseURL: "sqlite:///" + t.TempDir() + "/bench.db", BrokerURL: testsvc.URL(testsvc.EnvNATS),
		Scenarios: []string{bench.ScenarioLog}, Repeat: 1}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Nil(t, rep.Log)
	require.Equal(t, []string{"log relay: sqlite keeps no change log a relay can read"}, rep.Skipped)
}
