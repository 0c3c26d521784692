package chaos_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/chaos"
	"github.com/ferrydev/ferry/internal/testsvc"
)

var shopBin, kfakeBin, natsClusterBin string

// natsServer is the nats-server each NATS row runs of its own, so that
// rows side by side do not share the shop's fixed stream and subjects.
var natsServer = chaos.NATSServer()

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// TestScenarios skips itself: building the binaries is not worth it.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ferry-chaos-test-")
	if err != nil {
		panic(err)
	}
	shopBin, err = chaos.BuildShop(context.Background(), dir)
	if err != nil {
		panic(err)
	}
	kfakeBin, err = chaos.BuildKfake(context.Background(), dir)
	if err != nil {
		panic(err)
	}
	natsClusterBin, err = chaos.BuildNATSServer(context.Background(), dir)
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// combos are the (database, broker) pairs a scenario may run on
// (Scenario.Applies). The suite runs each scenario on every database and
// every broker, not on every pair (Scenario.InSuite): with Kafka on one
// database (Scenario.KafkaDB: MariaDB for kill, crashpoints, pause,
// broker-restart, duplicate-storm and poison, PostgreSQL for network,
// payments and consumer-pause, which runs on Kafka alone) and with
// RabbitMQ on the other. FERRY_CHAOS_FULL=1 runs every
// pair that applies: 34 rows rather than 26 (27 while a Kafka row is a
// known stall: knownStalls), about four minutes more on
// two cores.
var combos = []struct{ db, broker string }{
	{"mysql", "amqp"},
	{"postgres", "amqp"},
	{"sqlite", "nats"},
	{"mysql", "kafka"},
	{"postgres", "kafka"},
}

// TestScenarios runs every scenario at a reduced size (400 orders over
// ten seconds of faults; pause: 1,000 over 25) with the same checker as
// the full run. The rows run side by side (go test -parallel; scripts/test.sh
// runs two at a time): each has its own tables, streams, queues, topics,
// proxies and processes. FERRY_CHAOS_LOG=dir keeps each row's process
// output there. The RabbitMQ restart stops the tests' own node
// (testsvc.DisruptRabbitMQ), never the shared server the other rows use.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not part of the quick tier (-short): scripts/test.sh runs it")
	}
	full := os.Getenv("FERRY_CHAOS_FULL") == "1"
	type row struct {
		sc         *chaos.Scenario
		db, broker string
	}
	var rows []row
	for _, sc := range chaos.Scenarios {
		for _, c := range combos {
			if sc.Applies(c.db, c.broker) && (full || inSuite(sc, c.db, c.broker)) {
				rows = append(rows, row{sc, c.db, c.broker})
			}
		}
	}
	// The longest rows first (rowCost), so that the last to end is a short
	// one rather than a long one running alone. The rows do not call
	// t.Parallel, whose paused tests start in no set order: go test
	// -parallel workers take them from a queue in this order, and run each
	// with t.Run (which several goroutines may call at once).
	slices.SortStableFunc(rows, func(a, b row) int {
		return cmp.Compare(rowCost(b.sc.Name, b.db, b.broker), rowCost(a.sc.Name, a.db, a.broker))
	})
	queue := make(chan row)
	var workers sync.WaitGroup
	for range min(parallel(), len(rows)) {
		workers.Go(func() {
			for r := range queue {
				t.Run(r.sc.Name+"/"+r.db+"+"+r.broker, func(t *testing.T) { runRow(t, r.sc, r.db, r.broker, full) })
			}
		})
	}
	for _, r := range rows {
		queue <- r
	}
	close(queue)
	workers.Wait()
}

// parallel is go test's -parallel (default GOMAXPROCS).
func parallel() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, ok := f.Value.(flag.Getter).Get().(int); ok && n > 0 {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}

// runRow runs scenario sc on db and broker and checks its result.
func runRow(t *testing.T, sc *chaos.Scenario, db, broker string, full bool) {
	if why := knownStalls[sc.Name+"/"+db+"+"+broker]; why != "" && !full {
		t.Skip("a known stall, not yet fixed: " + why + " (FERRY_CHAOS_FULL=1 runs it)")
	}
	switch db {
	case "mysql":
		testsvc.MySQL(t)
	case "postgres":
		testsvc.Postgres(t)
	}
	amqpURL, amqpNode := testsvc.URL(testsvc.EnvAMQP), ""
	switch {
	case broker == "nats" && natsServer == "":
		testsvc.NATS(t) // the rows take the shared server in turn
	case broker == "nats":
		// The harness runs a NATS server of the row's own.
	case broker == "kafka":
		// The harness runs kfake itself (cmd/kfake).
	case sc.Name == "broker-restart":
		// It stops RabbitMQ: the tests' own node, which the other
		// tests that stop it or alarm it wait for meanwhile; never
		// the shared server.
		node := testsvc.DisruptRabbitMQ(t)
		amqpURL, amqpNode = node.URL, node.Name
	default:
		testsvc.RabbitMQ(t)
	}
	// 400 orders, 20 a second from each of the two order
	// services: the load lasts the ten seconds of faults every
	// run has at least (MinFaults).
	orders, rate := 400, 20
	if sc.Name == "pause" {
		// Pauses land only while events flow (about one every
		// 4 s): a longer load (25 s) gives each run several.
		orders = 1000
	}
	// Liveness bounds, not timings: a row's load took up to 108 s
	// beside two CPU hogs (48 s alone), and fails only when no
	// order commits for a minute; a Kafka row once did not go
	// quiet within a 2 min settle (its groups rebalancing after
	// the kills, as far as is known); the run's default settle
	// of 3 min, and the error says what was left. 8 min in all.
	ctx := testsvc.Context(t, 8*time.Minute)
	// FERRY_CHAOS_LOG names a directory for each row's process
	// output (a file a row, each line with its time in the row).
	plog := processLog(t, sc.Name+"-"+db+"+"+broker)
	res, err := chaos.Run(ctx, chaos.Options{
		DB: db, Broker: broker, Orders: orders, Rate: rate, Bin: shopBin, KfakeBin: kfakeBin, Out: testWriter{t}, Log: plog,
		MinFaults: 10 * time.Second, Settle: 3 * time.Minute,
		MySQLURL: testsvc.URL(testsvc.EnvMySQL), PostgresURL: testsvc.URL(testsvc.EnvPostgres),
		NATSURL: testsvc.URL(testsvc.EnvNATS), NATSServer: natsServer, AMQPURL: amqpURL, AMQPNode: amqpNode,
	}, sc)
	require.NoError(t, err)
	t.Log("\n" + res.String())
	require.True(t, res.OK(), "violations: %v", res.Violations)
}

// TestLogRelayScenarios runs the log relay (--source log) through the
// suite's faults on the servers that keep a change log (a MariaDB with a
// ROW binlog, a PostgreSQL with wal_level=logical): its reader killed
// (the standby takes over from the checkpoint), the replication
// connection cut and slowed by the proxy, RabbitMQ stopped and started
// under it, the services' COMMITs cut off before their answer (in the
// log, unknown to the writer), the log lost under it (log-gap), lost
// confirms in every row (the relays' --lose-confirm-pct). Same checker:
// every order's effects once.
func TestLogRelayScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not part of the quick tier (-short): scripts/test.sh runs it")
	}
	rows := []struct {
		sc *chaos.Scenario
		db string
	}{
		// On the tests' own RabbitMQ node; the others on the shared one.
		{chaos.ScenarioByName("broker-restart"), "postgres"},
		{chaos.ScenarioByName("kill"), "mysql"},
		{chaos.ScenarioByName("commit-reset"), "mysql"},
		{chaos.ScenarioByName("network"), "postgres"},
		{chaos.LogGap, "mysql"},
		{chaos.LogGap, "postgres"},
	}
	queue := make(chan int)
	var workers sync.WaitGroup
	for range min(parallel(), len(rows)) {
		workers.Go(func() {
			for i := range queue {
				r := rows[i]
				t.Run(r.sc.Name+"/"+r.db+"-log+amqp", func(t *testing.T) {
					if r.db == "mysql" {
						testsvc.BinlogLock(t, r.sc == chaos.LogGap) // a purge holds the binlog alone
					}
					testsvc.LogStore(t, r.db) // the server is up
					amqpURL, amqpNode := testsvc.URL(testsvc.EnvAMQP), ""
					if r.sc.Name == "broker-restart" {
						node := testsvc.DisruptRabbitMQ(t) // the tests' own node
						amqpURL, amqpNode = node.URL, node.Name
					} else {
						testsvc.RabbitMQ(t)
					}
					ctx := testsvc.Context(t, 8*time.Minute)
					plog := processLog(t, r.sc.Name+"-"+r.db+"-log+amqp")
					res, err := chaos.Run(ctx, chaos.Options{
						DB: r.db, Broker: "amqp", Orders: 400, Rate: 20, Bin: shopBin, Out: testWriter{t}, Log: plog,
						MinFaults: 10 * time.Second, Settle: 3 * time.Minute, LogRelay: true,
						MySQLURL: testsvc.URL(testsvc.EnvMySQLBinlog), PostgresURL: testsvc.URL(testsvc.EnvPostgresLogical),
						AMQPURL: amqpURL, AMQPNode: amqpNode,
					}, r.sc)
					require.NoError(t, err)
					t.Log("\n" + res.String())
					require.True(t, res.OK(), "violations: %v", res.Violations)
					c := res.Counters
					t.Logf("log relays: %d events read from the log, %d gaps found", c.LogEventsRead, c.LogGapsSeen)
					require.Positive(t, c.LogEventsRead, "vacuous: the relays read nothing from the log")
					if r.sc == chaos.LogGap {
						require.Positive(t, c.LogGapsSeen, "vacuous: no relay found the gap")
					}
				})
			}
		})
	}
	for i := range rows {
		queue <- i
	}
	close(queue)
	workers.Wait()
}

// rowCost is a row's rough length in seconds, for the order the rows
// start in: each row's time in a CI run of the suite (scripts/test.sh,
// two rows at a time), rounded. Only the order matters: a wrong figure
// costs time, never a check.
func rowCost(scenario, db, broker string) int {
	cost := map[string]int{"crashpoints": 55, "payments": 50, "commit-reset": 45, "pause": 40, "duplicate-storm": 25,
		"broker-restart": 30, "poison": 25, "network": 30, "kill": 20, "consumer-pause": 20}[scenario]
	switch {
	case broker == "kafka":
		cost += 15
	case db == "postgres":
		cost += 10
	}
	return cost
}

// knownStalls are the rows that fail, now and then, for a reason found
// and not yet fixed. Each is skipped with its reason, and the scenario
// then runs on RabbitMQ with both SQL databases instead (inSuite), so it
// still meets each of them.
var knownStalls = map[string]string{
	"kill/mysql+kafka": "after the kills, a partition of the points group stops being committed " +
		"(\"group points behind on partition 1: committed 5 of 96\" for 3 min, both consumers " +
		"running; 1 run in 3 with three such rows side by side); whether ferrykafka or kfake's " +
		"group coordinator is at fault is not known yet",
}

// inSuite is Scenario.InSuite, but for a scenario whose Kafka row is a
// known stall: that one runs on RabbitMQ with both SQL databases.
func inSuite(sc *chaos.Scenario, db, broker string) bool {
	if broker == "amqp" && sc.Applies(db, broker) && knownStalls[sc.Name+"/"+sc.KafkaDB+"+kafka"] != "" {
		return true
	}
	return sc.InSuite(db, broker)
}

// lockedWriter writes a row's process output, each line with its time
// since the row's start.
type lockedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.w, "[%6.2fs] ", time.Since(w.start).Seconds())
	return w.w.Write(p)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// TestSuiteCoversEveryDatabaseAndBroker checks the reduced matrix: each
// scenario still runs on every database and every broker it applies to.
func TestSuiteCoversEveryDatabaseAndBroker(t *testing.T) {
	t.Parallel()
	rows := 0
	for _, sc := range chaos.Scenarios {
		all, suite := map[string]bool{}, map[string]bool{}
		for _, c := range combos {
			if inSuite(sc, c.db, c.broker) {
				require.True(t, sc.Applies(c.db, c.broker), "%s: %s+%s in the suite but does not apply", sc.Name, c.db, c.broker)
				suite[c.db], suite[c.broker] = true, true
				rows++
			}
			if sc.Applies(c.db, c.broker) {
				all[c.db], all[c.broker] = true, true
			}
		}
		require.Equal(t, all, suite, "%s: the databases and brokers it runs on", sc.Name)
	}
	require.Equal(t, 26+len(knownStalls), rows, "the suite's rows (the doc of combos says how many)")
}

// processLog returns the writer of a row's process output when
// FERRY_CHAOS_LOG names a directory (a file a row, each line with its time
// in the row), or nil.
func processLog(t *testing.T, row string) io.Writer {
	d := os.Getenv("FERRY_CHAOS_LOG")
	if d == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(d, row+".log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return &lockedWriter{w: f, start: time.Now()}
}
