package ferry_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats/ferrynatstest"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// unmigrated returns a store and an inbox of kind on fresh table names
// that no migration created.
func unmigrated(t *testing.T, kind string) (*sql.DB, ferrystore.Driver[*sql.Tx], ferrystore.InboxDriver[*sql.Tx]) {
	t.Helper()
	table := testsvc.Name("fu_")
	m, c, v := testsvc.InboxTables()
	var (
		db  *sql.DB
		drv ferrystore.Driver[*sql.Tx]
		ib  ferrystore.InboxDriver[*sql.Tx]
		err error
	)
	switch kind {
	case "mysql":
		db = testsvc.MySQL(t)
		drv, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
		require.NoError(t, err)
		ib, err = ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "postgres":
		db = testsvc.PostgresSQL(t)
		drv, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
		require.NoError(t, err)
		ib, err = ferrypg.NewStdlibInbox(db, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "sqlite":
		db = testsvc.SQLite(t)
		drv, err = ferrysqlite.New(db, &ferrysqlite.Config{Table: table})
		require.NoError(t, err)
		ib, err = ferrysqlite.NewInbox(db, &ferrysqlite.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	}
	require.NoError(t, err)
	return db, drv, ib
}

// On a database whose ferry tables were never migrated, the outbox and the
// inbox fail with ferrytype.ErrSchemaOutdated and say to run ferry
// migrate, rather than with the driver's bare "table does not exist".
func TestUnmigratedTablesSayRunFerryMigrate(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := testsvc.Context(t, time.Minute)
			db, drv, ib := unmigrated(t, kind)

			outbox, err := ferry.NewOutbox(drv, nil)
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "1", Type: "OrderPaid",
				Payload: json.RawMessage(`{}`)})
			require.NoError(t, tx.Rollback())
			require.ErrorIs(t, err, ferrytype.ErrSchemaOutdated)
			require.ErrorIs(t, err, ferrytype.ErrUndefinedTable)
			require.ErrorContains(t, err, "run ferry migrate --table "+drv.Table())

			inbox, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points"})
			require.NoError(t, err)
			noop := func(context.Context, *sql.Tx) error { return nil }
			for _, op := range []ferry.Operation{
				{Key: "order:1:paid", Fields: map[string]int{"points": 10}},
				{Key: "order:2:paid", Fields: map[string]int{"points": 10}, Aggregate: "account:7", Version: 1, Guard: ferry.GuardNewer},
			} {
				_, err = inbox.Process(ctx, op, noop)
				require.ErrorIs(t, err, ferrytype.ErrSchemaOutdated, "guard %v", op.Guard)
				require.ErrorContains(t, err, "run ferry migrate --inbox")
			}
		})
	}
}

// A consumer whose inbox tables are missing keeps the message (retried at
// a growing delay, far past MaxDeliveries, never parked) and applies it
// once someone migrates.
func TestConsumerKeepsMessagesUntilTheInboxIsMigrated(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, 2*time.Minute)
	_, _, ib := unmigrated(t, "sqlite")
	nc := ferrynatstest.NATS(t)
	stream, prefix := ferrynatstest.JetStreamStream(t, nc)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	inbox, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points"})
	require.NoError(t, err)
	var applied atomic.Int64
	handler := ferry.InboxHandler(inbox, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		return ferry.Operation{Key: "order:" + d.AggregateID + ":paid", Fields: json.RawMessage(d.Payload)}, nil
	}, func(context.Context, *sql.Tx, *ferrybroker.Delivery) error { applied.Add(1); return nil })
	c, err := ferrynats.NewConsumer(js, handler, &ferrynats.ConsumerConfig{
		Stream: stream, Durable: "points", FilterSubjects: []string{prefix + ".paid"}, Declare: true,
		ParkSubject: prefix + ".parked", ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1, Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond}},
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer c.Stop(context.WithoutCancel(ctx))

	msg := &nats.Msg{Subject: prefix + ".paid", Data: []byte(`{"points":10}`), Header: nats.Header{}}
	msg.Header.Set(ferrybroker.HeaderEventID, "e-1")
	msg.Header.Set(ferrybroker.HeaderAggregateID, "42")
	_, err = js.PublishMsg(ctx, msg)
	require.NoError(t, err)

	// Five failed deliveries, more than twice MaxDeliveries, and none parked
	// (before the fix, the second delivery was parked).
	stats := func() ferrybroker.ConsumerStats { return c.Stats() }
	require.Eventually(t, func() bool { st := stats(); return st.Retried >= 5 || st.Parked > 0 }, time.Minute, 5*time.Millisecond)
	require.Zero(t, stats().Parked, "parked while the inbox was not migrated: %+v", stats())
	require.NoError(t, ib.(interface{ Migrate(context.Context) error }).Migrate(ctx))
	require.Eventually(t, func() bool { st := stats(); return st.Acked == 1 || st.Parked > 0 }, time.Minute, 5*time.Millisecond)
	require.Equal(t, int64(1), stats().Acked, "%+v", stats())
	require.Zero(t, stats().Parked, "%+v", stats())
	require.Equal(t, int64(1), applied.Load())
}

// A relay on an outbox table no migration created says, in its log, to
// run ferry migrate, and claims nothing meanwhile.
func TestRelayOnAnUnmigratedTableSaysRunFerryMigrate(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)
	_, drv, _ := unmigrated(t, "sqlite")
	var buf syncBuffer
	pub, err := ferrynats.New(ctx, testsvc.EmbeddedNATS(t), nil)
	require.NoError(t, err)
	relay, err := ferry.NewRelay(drv, pub, &ferry.RelayConfig{Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	defer relay.Stop(context.WithoutCancel(ctx))
	testsvc.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(buf.String(), "run ferry migrate --table "+drv.Table()) },
		func() string { return buf.String() })
	require.Zero(t, relay.Stats().Confirmed)
}
