package chaos_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/chaos"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestClusterScenarios runs the suite's checker on replicated servers
// with nodes dying under the system: a database primary killed and its
// synchronous replica promoted (db-failover, on a primary and replica of
// the row's own, started from the server's binaries); the broker
// node that leads the shop's stream or queues killed and started again
// (node-kill: JetStream, three nats-servers of the row's own built from
// the module proxy's nats-server, the stream R3 with sync_interval
// always; RabbitMQ, the tests' own three-node cluster, quorum queues), or
// stopped and let go on (node-pause, JetStream). The RabbitMQ row holds
// the cluster (ferryamqptest.RabbitMQCluster), so that no other test
// kills a node under it.
func TestClusterScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not part of the quick tier (-short): scripts/test.sh runs it")
	}
	rows := []struct {
		sc         *chaos.Scenario
		db, broker string
		failover   bool
	}{
		// The longest first (80, 75, 60, 35, 30 s in a run of the rows
		// alone), so that a short one ends the test.
		{chaos.NodeKill, "mysql", "amqp", false},
		{chaos.NodePause, "sqlite", "nats", false},
		{chaos.NodeKill, "postgres", "nats", false},
		{chaos.DBFailover, "postgres", "amqp", true},
		{chaos.DBFailover, "mysql", "amqp", true},
	}
	queue := make(chan int)
	var workers sync.WaitGroup
	for range min(parallel(), len(rows)) {
		workers.Go(func() {
			for i := range queue {
				r := rows[i]
				name := r.sc.Name + "/" + r.db + "+" + r.broker
				t.Run(name, func(t *testing.T) {
					var cluster *ferryamqptest.Cluster
					switch {
					case r.broker == "amqp" && !r.failover:
						cluster = ferryamqptest.RabbitMQCluster(t) // held until the row ends
					case r.broker == "amqp":
						testsvc.RabbitMQ(t)
					}
					switch r.db {
					case "mysql":
						testsvc.MySQL(t)
					case "postgres":
						testsvc.Postgres(t)
					}
					// node-kill and node-pause: 800 orders, about 20 s
					// of load, for several faults (each waits until the
					// node faulted before is back and current).
					orders := 400
					if r.sc != chaos.DBFailover {
						orders = 800
					}
					ctx := testsvc.Context(t, 8*time.Minute)
					res, err := chaos.Run(ctx, chaos.Options{
						DB: r.db, Broker: r.broker, Orders: orders, Rate: 20, Bin: shopBin, KfakeBin: kfakeBin,
						Out: testWriter{t}, Log: processLog(t, r.sc.Name+"-"+r.db+"+"+r.broker),
						MinFaults: 10 * time.Second, Settle: 3 * time.Minute, Failover: r.failover, Cluster: !r.failover,
						MySQLURL: testsvc.URL(testsvc.EnvMySQL), PostgresURL: testsvc.URL(testsvc.EnvPostgres),
						AMQPURL: testsvc.URL(testsvc.EnvAMQP), NATSURL: testsvc.URL(testsvc.EnvNATS), NATSServer: natsClusterBin, AMQPCluster: cluster,
					}, r.sc)
					require.NoError(t, err)
					t.Log("\n" + res.String())
					require.True(t, res.OK(), "violations: %v", res.Violations)
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
