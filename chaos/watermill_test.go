package chaos_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/chaos"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestWatermillSideBySide runs the reference flow — an order pays, its
// points are awarded — through Watermill's own outbox (watermill-sql, the
// forwarder, the deduplicator) and through ferry's bridge (ferrywatermill's
// OutboxPublisher, ferry's relay publishing through watermill-amqp, the
// RouterHandler over ferry's inbox), each in processes of its own, under
// the same faults drawn from the same seed: kill -9 of the publishing
// process and of the consumer, RabbitMQ connections cut, the consumer's
// database connections cut. The checker counts, in the database, every
// committed order without its effect (lost), every effect past the first
// (duplicate) and every effect of an order rolled back (phantom).
//
// ferry's way must show none of the three; Watermill's figures are
// reported, not asserted (docs/watermill.md has a full-size run). Size:
// FERRY_CHAOS_WM_ORDERS (default 300) orders over FERRY_CHAOS_WM_FAULTS
// (default 12s) of faults; FERRY_CHAOS_WM_SEED picks the faults.
func TestWatermillSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not part of the quick tier (-short): scripts/test.sh runs it")
	}
	t.Parallel()
	testsvc.MySQL(t) // skips, or fails with FERRY_REQUIRE_SERVICES=1, without MariaDB
	testsvc.RabbitMQ(t)
	bin, err := chaos.BuildWMFlow(context.Background(), t.TempDir())
	require.NoError(t, err)
	orders := envInt(t, "FERRY_CHAOS_WM_ORDERS", 300)
	faults := 12 * time.Second
	if v := os.Getenv("FERRY_CHAOS_WM_FAULTS"); v != "" {
		faults, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	seed := uint64(envInt(t, "FERRY_CHAOS_WM_SEED", int(time.Now().UnixNano()%1_000_000)))
	t.Logf("seed %d (FERRY_CHAOS_WM_SEED)", seed)
	for _, way := range []string{chaos.WatermillWay, chaos.FerryWay} {
		t.Run(way, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), faults+5*time.Minute)
			defer cancel()
			log, err := os.CreateTemp(t.TempDir(), way+"-*.log")
			require.NoError(t, err)
			defer log.Close()
			res, err := chaos.RunWatermill(ctx, chaos.WatermillOptions{Way: way, Bin: bin,
				MySQLURL: testsvc.URL(testsvc.EnvMySQL), AMQPURL: testsvc.URL(testsvc.EnvAMQP),
				Orders: orders, Faults: faults, FaultEvery: 1500 * time.Millisecond, Seed: seed, Log: log})
			require.NoError(t, err)
			t.Log(res)
			if way == chaos.FerryWay && (res.Lost > 0 || res.Duplicates > 0 || res.Phantoms > 0) {
				out, _ := os.ReadFile(log.Name())
				t.Logf("the processes' output, last 4 KiB:\n%s", out[max(0, len(out)-4096):])
			}
			if way == chaos.FerryWay {
				require.Zero(t, res.Lost, "%s", res)
				require.Zero(t, res.Duplicates, "%s", res)
				require.Zero(t, res.Phantoms, "%s", res)
			}
		})
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}
