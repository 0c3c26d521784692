package ferry_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/relaytest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The relay's behaviour tests are in internal/relaytest, each under its
// test's name less "Test"; the root package runs them on the in-memory
// store and broker, and the tests here run the same functions on MariaDB,
// PostgreSQL and SQLite and the real NATS JetStream. The tests that only a
// real server can run (LISTEN/NOTIFY, a pgx pool's size, a cut network, a
// table migrated by hand) are written here.

// relayBundle is one outbox table on a real database and one JetStream
// stream on the real NATS server: the Env the relay's behaviour tests
// run on, and the database and stream beneath it.
type relayBundle struct {
	*relaytest.Env[*sql.Tx]
	st     testsvc.SQLStore
	nc     *nats.Conn
	stream string
}

func setupRelay(t testing.TB, kind string) *relayBundle {
	t.Helper()
	b := &relayBundle{st: testsvc.Store(t, kind), nc: testsvc.NATS(t)}
	var prefix string
	b.stream, prefix = testsvc.JetStreamStream(t, b.nc)
	ob, err := ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	b.Env = &relaytest.Env[*sql.Tx]{
		Kind:   kind,
		Ctx:    testsvc.Context(t, 10*time.Minute),
		Store:  b.st.Driver,
		Outbox: ob,
		Begin: func(ctx context.Context) (*sql.Tx, func() error, func() error) {
			tx, err := b.st.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			return tx, tx.Commit, tx.Rollback
		},
		Destination: prefix + ".events",
		Publisher: func(t testing.TB) ferrybroker.Publisher {
			p, err := ferrynats.Dial(b.Ctx, testsvc.URL(testsvc.EnvNATS), &ferrynats.DialConfig{Config: ferrynats.Config{Stream: b.stream}})
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return p
		},
		Read: func(t testing.TB, want int, d time.Duration) []relaytest.Received {
			var out []relaytest.Received
			for _, m := range testsvc.ReadStream(t, b.nc, b.stream, want, d) {
				out = append(out, relaytest.Received{ID: m.ID, Route: m.Subject, AggregateID: m.AggregateID, Sequence: m.Sequence})
			}
			return out
		},
		// SQLite waits for its one writer: a claim blocks on the
		// enqueuer's transaction until its commit.
		ReadsBesideWriters: kind != "sqlite",
		InsertRaw:          b.insertRaw,
		SetLeaseToken: func(ctx context.Context, t testing.TB, id, token string) {
			_, err := b.st.DB.ExecContext(ctx, "UPDATE "+b.table()+" SET lease_token = "+b.param(1)+
				" WHERE event_id = "+b.param(2), token, id)
			require.NoError(t, err)
		},
		// A publisher dialled through a proxy to NATS: an outage is the
		// proxy cut.
		Outage: func(t testing.TB) (relaytest.ConnectedPublisher, func(), func()) {
			url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
			pub, err := ferrynats.Dial(b.Ctx, url, &ferrynats.DialConfig{
				Config:  ferrynats.Config{Stream: b.stream},
				Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)},
			})
			require.NoError(t, err)
			t.Cleanup(func() { pub.Close() })
			return pub, proxy.Cut, proxy.Restore
		},
		Metrics: func(t testing.TB) (ferry.Hook, func() map[string]float64) {
			reg := prometheus.NewRegistry()
			metrics, err := ferryprom.New(reg, nil)
			require.NoError(t, err)
			return metrics, func() map[string]float64 {
				families, err := reg.Gather()
				require.NoError(t, err)
				counters := map[string]float64{}
				for _, f := range families {
					for _, m := range f.GetMetric() {
						if m.GetCounter() != nil {
							counters[f.GetName()] += m.GetCounter().GetValue()
						}
					}
				}
				return counters
			}
		},
	}
	if kind == "sqlite" {
		// SQLite has one writer, for which the four relays contend
		// whatever the count, and its engine is Go code that -race slows
		// about fifty-fold: a quarter of the events exercises the same
		// contention in a quarter of the time.
		b.DrainEvents = 5000
		// Its writes queue behind the four relays' claims for seconds
		// under -race on loaded cores (beats waited past their 4 s in CI,
		// and live relays counted as dead had their claims returned):
		// beats of 10 s keep the dead relay's return out of a test that
		// is about draining, not dying.
		b.DrainHeartbeat = 10 * time.Second
		// SQLite's ordered claim reads past the rows of blocked
		// aggregates (no SKIP LOCKED, one writer): 10,000 events take
		// minutes under -race on two loaded cores. A quarter of them
		// exercises the same windows.
		b.OrderedAggregates = 250
	}
	return b
}

// sqlSetup returns the Setup of the relay's behaviour tests on kind.
func sqlSetup(kind string) relaytest.Setup[*sql.Tx] {
	return func(t *testing.T) *relaytest.Env[*sql.Tx] { return setupRelay(t, kind).Env }
}

// onKinds runs test on each of kinds, as a subtest named after it; in
// parallel when parallel is true.
func onKinds(t *testing.T, kinds []string, parallel bool, test func(t *testing.T, setup relaytest.Setup[*sql.Tx])) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			test(t, sqlSetup(kind))
		})
	}
}

// table is the outbox table's name, quoted for its dialect.
func (b *relayBundle) table() string {
	if b.st.Kind == "mysql" {
		return "`" + b.st.Driver.Table() + "`"
	}
	return `"` + b.st.Driver.Table() + `"`
}

// param is the n-th query parameter's placeholder in the dialect.
func (b *relayBundle) param(n int) string {
	if b.st.Kind == "postgres" {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// insertRaw writes a row by hand, next to the relay's well-formed events:
// its values are SQL text literals.
func (b *relayBundle) insertRaw(t testing.TB, id string, cols, vals []string, unchecked bool) {
	t.Helper()
	lits := make([]string, len(vals))
	for i, v := range vals {
		lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	q := fmt.Sprintf("INSERT INTO %s (event_id, %s) VALUES ('%s', %s)", b.table(), strings.Join(cols, ", "), id,
		strings.Join(lits, ", "))
	switch {
	case unchecked && b.st.Kind == "mysql":
		q = "SET STATEMENT check_constraint_checks = 0 FOR " + q
	case unchecked && b.st.Kind == "sqlite":
		q = "PRAGMA ignore_check_constraints = ON; " + q + "; PRAGMA ignore_check_constraints = OFF"
	}
	_, err := b.st.DB.ExecContext(b.Ctx, q)
	require.NoError(t, err, q)
}

// Four relays drain 20,000 events (SQLite: 5,000) of 997 aggregates: each
// event is handed to the broker once and stored once, none is lost.
func TestRelayFourRelaysDrainEveryEventOnce(t *testing.T) {
	testsvc.Slow(t, "a 20,000-event drain")
	t.Parallel()
	onKinds(t, testsvc.Kinds, true, relaytest.RelayFourRelaysDrainEveryEventOnce)
}

func TestRelayLateMarkIsFenced(t *testing.T) {
	t.Parallel()
	onKinds(t, testsvc.Kinds, true, relaytest.RelayLateMarkIsFenced)
}

func TestRelayCrashWindows(t *testing.T) {
	t.Parallel()
	onKinds(t, testsvc.Kinds, true, relaytest.RelayCrashWindows)
}

func TestRelayOrderedUnderFailures(t *testing.T) {
	t.Parallel()
	onKinds(t, testsvc.Kinds, true, relaytest.RelayOrderedUnderFailures)
}

func TestRelayDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	relaytest.RelayDeadAfterMaxAttempts(t, sqlSetup("sqlite"))
}

func TestRelayStopFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	relaytest.RelayStopFinishesInFlightBatch(t, sqlSetup("sqlite"))
}

func TestRelayRetentionPurgesSentRowsOnly(t *testing.T) {
	t.Parallel()
	relaytest.RelayRetentionPurgesSentRowsOnly(t, sqlSetup("sqlite"))
}

func TestRelayIdleProbesOncePerInterval(t *testing.T) {
	t.Parallel()
	relaytest.RelayIdleProbesOncePerInterval(t, sqlSetup("sqlite"))
}

func TestRelayProbeFindsEventsOfAnotherProcess(t *testing.T) {
	t.Parallel()
	onKinds(t, []string{"mysql", "postgres"}, false, relaytest.RelayProbeFindsEventsOfAnotherProcess)
}

func TestRelayClaimsWhileABatchIsInFlight(t *testing.T) {
	t.Parallel()
	onKinds(t, []string{"mysql", "postgres", "sqlite"}, false, relaytest.RelayClaimsWhileABatchIsInFlight)
}

func TestRelayOrderedProbeWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	relaytest.RelayOrderedProbeWaitsForTheBatchInFlight(t, sqlSetup("mysql"))
}

func TestRelayWakesOnEnqueueBeforeCommit(t *testing.T) {
	t.Parallel()
	relaytest.RelayWakesOnEnqueueBeforeCommit(t, sqlSetup("mysql")) // SQLite would block the look on the writer's lock until the commit
}

func TestRelayFencedFailureCountsNeitherDeadNorRetried(t *testing.T) {
	t.Parallel()
	relaytest.RelayFencedFailureCountsNeitherDeadNorRetried(t, sqlSetup("sqlite"))
}

// TestRelaysOnASmallPgxPoolAllProgress: relays sharing one pgx pool
// listen on connections of their own, so more relays than the pool has
// connections still claim and mark (each used to pin a pool connection
// in LISTEN: with three relays on two connections, nothing moved).
func TestRelaysOnASmallPgxPoolAllProgress(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	cfg, err := pgxpool.ParseConfig(testsvc.URL(testsvc.EnvPostgres))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := ferrypg.New(pool, &ferrypg.Config{Table: b.st.Driver.Table()})
	require.NoError(t, err)
	var relays []*ferry.Relay
	for range 3 {
		r, err := ferry.NewRelay(store, b.CountingPublisher(t), nil)
		require.NoError(t, err)
		require.NoError(t, r.Start(b.Ctx))
		t.Cleanup(func() {
			// Bounded: a relay starved of connections would never stop.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = r.Stop(ctx)
		})
		relays = append(relays, r)
	}
	b.Enqueue(t, 300, func(i int) string { return fmt.Sprint(i) })
	b.WaitSettled(t, time.Minute)
	// A relay counts a batch as confirmed once its mark has returned: the
	// rows are SENT a moment before the counter moves.
	sent := func() int64 {
		var n int64
		for _, r := range relays {
			n += r.Stats().Confirmed
		}
		return n
	}
	testsvc.WaitFor(t, 10*time.Second, func() bool { return sent() >= 300 },
		func() string { return fmt.Sprintf("%d of 300 events counted as confirmed", sent()) })
	require.Equal(t, int64(300), sent())
}

func TestRelayWakesOnPostgresNotify(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	// The application's outbox notifies; the relay listens.
	notifying, err := ferrypg.NewStdlib(b.st.DB, &ferrypg.Config{Table: b.st.Driver.Table(), Notify: true})
	require.NoError(t, err)
	b.Outbox, err = ferry.NewOutbox(notifying, nil)
	require.NoError(t, err)
	r := b.Relay(t, b.CountingPublisher(t), &ferry.RelayConfig{PollInterval: time.Hour, MinPollInterval: time.Hour})
	for i := 1; i <= 3; i++ {
		b.Enqueue(t, 1, func(int) string { return "1" })
		testsvc.WaitFor(t, 5*time.Second, func() bool { return r.Stats().Confirmed == int64(i) },
			func() string { return fmt.Sprintf("%+v", r.Stats()) })
	}
}
