package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/natsembed"
)

type benchFlags struct {
	brokerURL   string
	relayBinary string
	scenarios   string
	json        bool
	cpuProfile  string
	relays      []int
	cfg         bench.Config
}

func newBench(g *globals) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the relay, the producer and the inbox against the raw broker and database, in one run",
		Long: `Measures ferry on your database and broker, next to what they can do at all,
in one process and one run, and prints each of ferry's figures as a ratio of
its raw limit (absolute figures drift between machines and runs; ratios
measured side by side do not):

  raw-broker  the broker's client library alone publishing persistent messages
              with confirms (RabbitMQ: a pipelined window; NATS: async publish;
              Kafka: franz-go's idempotent producer, acks=all, pipelined)
  raw-db      the relay's claim and mark-SENT statements alone, no broker
  relay       1, 4 and 8 relays draining pre-filled events, unordered and ordered:
              in the bench's process, and as ferry relay --drain processes
              with default settings (this binary, or --relay-binary)
  plain       a plain hand-written relay with the same protocol and the same
              loop counts, for comparison: ferry / plain ratios
  live        producers committing one event per transaction at --live-rate:
              commit → delivery at a consumer, p50 / p99 / max, for a relay in
              the bench's process, a ferry relay process with default
              settings, and the plain relay polling every 10ms
  idle        a ferry relay process with default settings on an empty table:
              the statements the database server counts per second and the
              relay's CPU, over --idle-for (the only client of the server)
  log         ferry relay --source log next to the polling relay (processes with
              defaults) on a server that keeps a change log (--log-mysql-url,
              --log-postgres-url, picked by --database-url's kind): live latency at
              --live-rate, a drain behind producers committing as fast as they
              can (first commit → last SENT), database CPU per event, and the
              statements per second of an idle log relay; skipped when that
              server cannot be reached, unless named in --scenarios
  producer    business tx alone, with a hand-written outbox INSERT, with EnqueueTx
  inbox       the seed's points award bare and inside the inbox, 1 and 8 workers
  claim       claim latency on an empty outbox and with --retained SENT rows

It works on tables and a queue, stream or topic of its own (ferry_bench_*,
ferrybench.*) and removes them; it never touches your outbox. Kafka cannot
empty a topic cheaply: each run counts and consumes the records past the
topic's end offsets at its start. Where the database and the
broker run on this machine, it reads their CPU time from /proc and reports
the CPU per event of the database, the broker and the relay. Without
--database-url and --broker-url it runs on a temporary SQLite file and an
embedded NATS server.`,
		Example: `  ferry bench --database-url mysql://root@127.0.0.1:3306/test --broker-url amqp://guest:guest@127.0.0.1:5672/
  ferry bench --database-url postgres://127.0.0.1:5432/test --broker-url amqp://guest:guest@127.0.0.1:5672/ --json
  ferry bench --database-url postgres://127.0.0.1:5432/test --broker-url kafka://127.0.0.1:9092
  ferry bench --scenarios claim --retained 10000000 --database-url ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.brokerURL, "broker-url", "", "broker URL: amqp://user:pass@host:5672/vhost, nats://host:4222 or kafka://host:9092[,host2:9092]")
	bindShared(fl, "broker-url", "FERRY_BROKER_URL", "relay.broker_url") // the relay's broker
	fl.StringVar(&f.scenarios, "scenarios", "all", "comma-separated: "+strings.Join(bench.AllScenarios, ", ")+"; or all")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fl.IntVar(&f.cfg.Events, "events", 20000, "events per drain")
	fl.IntVar(&f.cfg.Aggregates, "aggregates", bench.DefaultAggregates, "aggregates the drained events belong to (what an ordered drain can claim at once)")
	fl.IntVar(&f.cfg.Repeat, "repeat", 3, "runs per throughput figure; the median is reported")
	fl.IntVar(&f.cfg.Batch, "batch-size", 100, "events per claim")
	fl.IntVar(&f.cfg.Window, "window", 1000, "raw publisher's outstanding confirms")
	fl.IntSliceVar(&f.relays, "relays", []int{1, 4, 8}, "relay counts to drain with")
	fl.IntVar(&f.cfg.Lanes, "lanes", 0, "lanes per relay (0: the relay's default)")
	fl.IntVar(&f.cfg.LiveRate, "live-rate", 1000, "events per second committed in the live scenario")
	fl.DurationVar(&f.cfg.LiveFor, "live-for", 10*time.Second, "length of the live scenario")
	fl.DurationVar(&f.cfg.IdleFor, "idle-for", 20*time.Second, "length of the idle scenario's window")
	fl.IntVar(&f.cfg.Retained, "retained", 1000000, "SENT rows retained in the claim scenario")
	fl.IntVar(&f.cfg.ClaimRounds, "claim-rounds", 200, "claims timed per latency figure of the claim scenario")
	fl.StringVar(&f.cfg.QueueType, "queue-type", "quorum", "RabbitMQ queue type: quorum or classic")
	fl.StringVar(&f.cfg.LogMySQLURL, "log-mysql-url", bench.DefaultLogMySQLURL, "log scenario: MariaDB/MySQL with its binlog in ROW format")
	fl.StringVar(&f.cfg.LogPostgresURL, "log-postgres-url", bench.DefaultLogPostgresURL, "log scenario: PostgreSQL with wal_level=logical")
	fl.StringVar(&f.relayBinary, "relay-binary", "", `ferry binary run as relay processes (default: this one; "none" skips those figures)`)
	return cmd
}

func runBench(cmd *cobra.Command, g *globals, f *benchFlags) error {
	ctx := cmd.Context()
	cfg := f.cfg
	cfg.DatabaseURL, cfg.BrokerURL, cfg.Relays = g.databaseURL, f.brokerURL, f.relays
	switch f.relayBinary {
	case "":
		cfg.RelayBinary, cfg.RelayEnv = benchRelay()
	case "none":
	default:
		cfg.RelayBinary = f.relayBinary
	}
	if f.scenarios != "all" {
		for _, s := range strings.Split(f.scenarios, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(bench.AllScenarios, s) {
				return usageError{fmt.Errorf("--scenarios: unknown scenario %q (want %s, or all)", s, strings.Join(bench.AllScenarios, ", "))}
			}
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
		cfg.RequireLog = slices.Contains(cfg.Scenarios, bench.ScenarioLog)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--events", cfg.Events}, {"--repeat", cfg.Repeat}, {"--batch-size", cfg.Batch}, {"--window", cfg.Window},
		{"--live-rate", cfg.LiveRate}, {"--retained", cfg.Retained}, {"--claim-rounds", cfg.ClaimRounds}} {
		if v.n <= 0 {
			return usageError{fmt.Errorf("%s must be positive", v.name)}
		}
	}
	for _, n := range cfg.Relays {
		if n <= 0 {
			return usageError{fmt.Errorf("--relays must be positive counts")}
		}
	}
	needBroker := len(cfg.Scenarios) == 0 || slices.ContainsFunc(cfg.Scenarios, func(s string) bool {
		return s == bench.ScenarioRawBroker || s == bench.ScenarioRelay || s == bench.ScenarioPlain || s == bench.ScenarioLive ||
			s == bench.ScenarioLog
	})
	if cfg.DatabaseURL == "" || (cfg.BrokerURL == "" && needBroker) {
		dir, err := os.MkdirTemp("", "ferry-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cfg.DatabaseURL == "" {
			cfg.DatabaseURL = "sqlite:///" + filepath.Join(dir, "bench.db")
		}
		if cfg.BrokerURL == "" && needBroker {
			srv, err := natsembed.Start(filepath.Join(dir, "nats"))
			if err != nil {
				return err
			}
			defer srv.Shutdown()
			cfg.BrokerURL = srv.ClientURL()
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: database %s, broker %s\n", cfg.DatabaseURL, cmp.Or(cfg.BrokerURL, "none"))
	}
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, cfg, cmd.ErrOrStderr())
	if err != nil {
		if rep != nil && !f.json {
			fmt.Fprintln(cmd.OutOrStdout(), "the run failed; the scenarios completed before it:")
			rep.WriteText(cmd.OutOrStdout())
		}
		return err
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), rep)
	}
	rep.WriteText(cmd.OutOrStdout())
	return nil
}

// benchRelay returns the ferry binary the bench runs as ferry relay
// processes, and environment to add to theirs: this executable, unless it
// is a test binary (which runs tests, not ferry, when started with
// arguments); this package's tests set their own.
var benchRelay = func() (path string, env []string) {
	p, err := os.Executable()
	if err != nil || strings.HasSuffix(p, ".test") {
		return "", nil
	}
	return p, nil
}
