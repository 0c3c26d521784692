package ferryprom_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// consumerBundle is a consumer's database with migrated inbox tables, the
// seed's points_account and a registry with the consumer metrics.
type consumerBundle struct {
	ctx      context.Context
	kind     string
	db       *sql.DB
	store    ferrystore.InboxDriver[*sql.Tx]
	accounts string
	reg      *prometheus.Registry
	m        *ferryprom.ConsumerMetrics
}

func setupConsumer(t *testing.T, kind string) *consumerBundle {
	t.Helper()
	b := &consumerBundle{ctx: testsvc.Context(t, 3*time.Minute), kind: kind, reg: prometheus.NewRegistry()}
	mt, ct, vt := testsvc.InboxTables()
	var err error
	switch kind {
	case "mysql":
		b.db = testsvc.MySQL(t)
		b.store, err = ferrymysql.NewInbox(b.db, &ferrymysql.InboxConfig{MarkerTable: mt, ConflictTable: ct, VersionTable: vt})
	case "postgres":
		b.db = testsvc.PostgresSQL(t)
		b.store, err = ferrypg.NewStdlibInbox(b.db, &ferrypg.InboxConfig{MarkerTable: mt, ConflictTable: ct, VersionTable: vt})
	case "sqlite":
		b.db = testsvc.SQLite(t)
		b.store, err = ferrysqlite.NewInbox(b.db, &ferrysqlite.InboxConfig{MarkerTable: mt, ConflictTable: ct, VersionTable: vt})
	}
	require.NoError(t, err)
	exec := func(q string) error { _, err := b.db.Exec(q); return err }
	testsvc.MigratedInbox(t, b.store, exec, mt, mt, ct, vt)
	b.accounts = mt + "_points"
	require.NoError(t, exec("CREATE TABLE "+b.accounts+" (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + b.accounts) })
	require.NoError(t, exec("INSERT INTO "+b.accounts+" VALUES (7, 0)"))
	b.m, err = ferryprom.NewConsumerMetrics(b.reg, nil)
	require.NoError(t, err)
	return b
}

type paidPayload struct {
	OrderID int64 `json:"order_id"`
	UserID  int64 `json:"user_id"`
	Amount  int64 `json:"amount"`
}

// pointsHandler is the reference points consumer: an OrderPaid delivery
// awards its points through the inbox, keyed by the order's payment.
func (b *consumerBundle) pointsHandler(t *testing.T, in *ferry.Inbox[*sql.Tx]) ferrybroker.Handler {
	q := "UPDATE " + b.accounts + " SET points = points + ? WHERE user_id = ?"
	if b.kind == "postgres" {
		q = "UPDATE " + b.accounts + " SET points = points + $1 WHERE user_id = $2"
	}
	return ferry.InboxHandler(in, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		var p paidPayload
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return ferry.Operation{}, err
		}
		return ferry.Operation{Key: fmt.Sprintf("order:%d:paid", p.OrderID), Fields: map[string]int64{"user_id": p.UserID,
			"amount": p.Amount}, Aggregate: "user:" + fmt.Sprint(p.UserID), Version: d.Sequence, Guard: guard(d.Sequence)}, nil
	}, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var p paidPayload
		_ = json.Unmarshal(d.Payload, &p)
		return ferry.ExpectResult(tx.ExecContext(ctx, q, p.Amount, p.UserID))
	})
}

// guard turns on the version guard for deliveries that carry a sequence.
func guard(seq int64) ferry.VersionGuard {
	if seq > 0 {
		return ferry.GuardNewer
	}
	return ferry.GuardNone
}

func delivery(id string, seq int64, p paidPayload) *ferrybroker.Delivery {
	body, _ := json.Marshal(p)
	return &ferrybroker.Delivery{MessageID: id, Type: "OrderPaid", Sequence: seq, Payload: body}
}

// Every inbox outcome and every handler result moves its own series, on
// each store, through a real inbox transaction.
func TestConsumerMetricsCountInboxOutcomesAndHandlerResults(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupConsumer(t, kind)
			in, err := ferry.NewInbox(b.store, &ferry.InboxConfig{Consumer: "points-award", Hooks: []ferry.Hook{b.m}})
			require.NoError(t, err)
			h := b.m.Handler("points-award", b.pointsHandler(t, in))
			ops := func(outcome string) float64 {
				return value(t, b.reg, "ferry_inbox_operations_total", "consumer", "points-award", "outcome", outcome)
			}
			handled := func(result string) float64 {
				return value(t, b.reg, "ferry_consumer_deliveries_total", "consumer", "points-award", "result", result)
			}
			for _, o := range []string{"applied", "duplicate", "conflict", "stale"} {
				require.Zero(t, ops(o), "%s exists at zero before the first delivery", o)
			}

			require.NoError(t, h(b.ctx, delivery("e1", 0, paidPayload{1, 7, 10})))
			require.Equal(t, 1.0, ops("applied"))
			require.NoError(t, h(b.ctx, delivery("e1-again", 0, paidPayload{1, 7, 10})))
			require.Equal(t, 1.0, ops("duplicate"), "a redelivery is a duplicate")
			err = h(b.ctx, delivery("e2", 0, paidPayload{1, 7, 99}))
			require.ErrorIs(t, err, ferry.ErrConflict)
			require.Equal(t, 1.0, ops("conflict"))
			require.NoError(t, h(b.ctx, delivery("e3", 5, paidPayload{2, 7, 1})))
			require.NoError(t, h(b.ctx, delivery("e4", 4, paidPayload{3, 7, 1})))
			require.Equal(t, 1.0, ops("stale"), "version 4 after 5")
			require.Equal(t, 2.0, ops("applied"))
			require.Equal(t, 2.0, value(t, b.reg, "ferry_inbox_operation_duration_seconds", "consumer", "points-award",
				"outcome", "applied"), "one latency sample per applied operation")
			require.Greater(t, histSum(t, b.reg, "ferry_inbox_operation_duration_seconds", "consumer", "points-award",
				"outcome", "applied"), 0.0)

			// Handler results: ok for applied, duplicate and stale; poison for
			// the conflict and an undecodable payload; transient for an
			// operation without effect (no such account: rolled back);
			// canceled when the context ended.
			require.Equal(t, 4.0, handled("ok"))
			require.Equal(t, 1.0, handled("poison"))
			err = h(b.ctx, &ferrybroker.Delivery{MessageID: "bad", Payload: []byte("{")})
			require.ErrorIs(t, err, ferrytype.ErrPoison)
			require.Equal(t, 2.0, handled("poison"))
			err = h(b.ctx, delivery("e5", 0, paidPayload{4, 8, 1}))
			require.ErrorIs(t, err, ferry.ErrNoEffect)
			require.Equal(t, 1.0, handled("transient"))
			require.Equal(t, 2.0, ops("applied"), "a rolled-back operation has no inbox outcome")
			canceled, cancel := context.WithCancel(b.ctx)
			cancel()
			require.Error(t, h(canceled, delivery("e6", 0, paidPayload{5, 7, 1})))
			require.Equal(t, 1.0, handled("canceled"))
			var calls float64
			for _, r := range []string{"ok", "transient", "poison", "canceled"} {
				calls += value(t, b.reg, "ferry_consumer_handle_duration_seconds", "consumer", "points-award", "result", r)
			}
			require.Equal(t, 8.0, calls,
				"one latency sample per call")
			require.Zero(t, value(t, b.reg, "ferry_consumer_in_flight_deliveries", "consumer", "points-award"))
		})
	}
}

// The in-flight gauge counts a delivery while its handler runs.
func TestConsumerMetricsInFlight(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := ferryprom.NewConsumerMetrics(reg, nil)
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	h := m.Handler("sms", func(ctx context.Context, d *ferrybroker.Delivery) error {
		close(entered)
		<-release
		return nil
	})
	done := make(chan error)
	go func() { done <- h(context.Background(), &ferrybroker.Delivery{MessageID: "x"}) }()
	<-entered
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_in_flight_deliveries", "consumer", "sms"))
	close(release)
	require.NoError(t, <-done)
	require.Zero(t, value(t, reg, "ferry_consumer_in_flight_deliveries", "consumer", "sms"))
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_deliveries_total", "consumer", "sms", "result", "ok"))

	_, err = ferryprom.NewConsumerMetrics(reg, nil)
	require.ErrorContains(t, err, "create it once")
	_, err = ferryprom.NewConsumerMetrics(nil, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
}

// Task executions are counted by type and result by the wrapped handlers,
// and by task table through the relay hooks of the task worker.
func TestConsumerMetricsCountTaskExecutions(t *testing.T) {
	t.Parallel()
	st := testsvc.Store(t, "sqlite")
	ctx := testsvc.Context(t, time.Minute)
	reg := prometheus.NewRegistry()
	m, err := ferryprom.NewConsumerMetrics(reg, nil)
	require.NoError(t, err)
	relayMetrics, err := ferryprom.New(reg, nil)
	require.NoError(t, err)
	var flaky atomic.Int32
	handlers := m.Tasks(map[string]ferry.TaskHandler{
		"SendSMS": func(context.Context, ferry.Task) error { return nil },
		"Charge": func(context.Context, ferry.Task) error {
			return ferrytype.Poison(errors.New("card refused"))
		},
		"Notify": func(context.Context, ferry.Task) error {
			if flaky.Add(1) == 1 {
				return errors.New("gateway: 503")
			}
			return nil
		},
	})
	tasks, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	tx, err := st.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tasks.EnqueueTx(ctx, tx,
		ferry.Event{ID: "sms:order:1:paid", Type: "SendSMS", Payload: json.RawMessage(`{}`)},
		ferry.Event{ID: "sms:order:2:paid", Type: "SendSMS", Payload: json.RawMessage(`{}`)},
		ferry.Event{ID: "charge:order:3", Type: "Charge", Payload: json.RawMessage(`{}`)},
		ferry.Event{ID: "notify:order:4", Type: "Notify", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	worker, err := ferry.NewTaskWorker(st.Driver, handlers, &ferry.TaskWorkerConfig{Relay: ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond, Hooks: []ferry.Hook{relayMetrics},
		Retry: ferry.ExponentialBackoff{Initial: 10 * time.Millisecond, Jitter: -1}}})
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { _ = worker.Stop(context.Background()) })
	table := st.Driver.Table()
	waitFor(t, 30*time.Second, func() bool {
		return value(t, reg, "ferry_relay_sent_total", "table", table) == 3 &&
			value(t, reg, "ferry_relay_dead_total", "table", table) == 1
	}, func() string { return "three tasks done and one DEAD" })

	tasksBy := func(typ, result string) float64 {
		return value(t, reg, "ferry_task_executions_total", "type", typ, "result", result)
	}
	require.Equal(t, 2.0, tasksBy("SendSMS", "ok"))
	require.Equal(t, 1.0, tasksBy("Charge", "poison"))
	require.Equal(t, 1.0, tasksBy("Notify", "transient"), "the first execution failed")
	require.Equal(t, 1.0, tasksBy("Notify", "ok"), "and the retry succeeded")
	require.Equal(t, 2.0, value(t, reg, "ferry_task_duration_seconds", "type", "SendSMS", "result", "ok"))
	require.Equal(t, 1.0, value(t, reg, "ferry_relay_retries_total", "table", table), "the relay hooks see the retry")
	require.Equal(t, 2.0, value(t, reg, "ferry_relay_publish_outcomes_total", "table", table, "outcome", "rejected"),
		"to the relay, a failed execution is a rejected publish")
}

// The open-conflicts gauge rises when the inbox records a conflict and
// stays up until a person resolves it, polled in the background.
func TestConflictCollectorKeepsOpenConflictsUntilResolved(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupConsumer(t, kind)
			k, err := ferryprom.NewConflictCollector(b.reg, b.store, &ferryprom.ConflictConfig{
				// Each poll has 450 ms: the test asserts that none fails,
				// which a tight timeout on a loaded machine would break.
				Interval: 500 * time.Millisecond, Timeout: 450 * time.Millisecond,
				Consumers: []string{"points-award", "sms"}})
			require.NoError(t, err)
			open := func(consumer string) float64 {
				return value(t, b.reg, "ferry_inbox_open_conflicts", "consumer", consumer)
			}
			require.Equal(t, -1.0, open("points-award"), "absent before the first poll")
			require.Zero(t, value(t, b.reg, "ferry_inbox_conflicts_up"))
			require.NoError(t, k.Start(b.ctx))
			t.Cleanup(func() { _ = k.Stop(context.Background()) })
			waitFor(t, 10*time.Second, func() bool { return open("points-award") == 0 && open("sms") == 0 },
				func() string { return "the configured consumers at 0" })
			require.Equal(t, 1.0, value(t, b.reg, "ferry_inbox_conflicts_up"))
			require.InDelta(t, float64(time.Now().Unix()), value(t, b.reg, "ferry_inbox_conflicts_last_poll_timestamp_seconds"), 60)
			require.Zero(t, value(t, b.reg, "ferry_inbox_conflicts_poll_errors_total"))

			in, err := ferry.NewInbox(b.store, &ferry.InboxConfig{Consumer: "points-award", Hooks: []ferry.Hook{b.m}})
			require.NoError(t, err)
			h := b.pointsHandler(t, in)
			require.NoError(t, h(b.ctx, delivery("e1", 0, paidPayload{1, 7, 10})))
			require.ErrorIs(t, h(b.ctx, delivery("e2", 0, paidPayload{1, 7, 99})), ferry.ErrConflict)
			waitFor(t, 10*time.Second, func() bool { return open("points-award") == 1 },
				func() string { return fmt.Sprintf("one open conflict, have %v", open("points-award")) })
			require.Zero(t, open("sms"))

			cs, err := b.store.Conflicts(b.ctx, ferrystore.ConflictFilter{})
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.NoError(t, b.store.ResolveConflict(b.ctx, cs[0].ID, ferrystore.Resolution{Decision: "keep-stored", By: "test", Note: "x"}))
			waitFor(t, 10*time.Second, func() bool { return open("points-award") == 0 },
				func() string { return "back to 0 once resolved" })
			require.NoError(t, k.Stop(b.ctx))
			require.NoError(t, k.Stop(b.ctx), "stopping twice is safe")
		})
	}
}

// A failed poll says so: up 0, the gauge absent rather than stale.
func TestConflictCollectorReportsAFailedPoll(t *testing.T) {
	t.Parallel()
	db := testsvc.SQLite(t)
	store, err := ferrysqlite.NewInbox(db, nil) // tables never migrated
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	k, err := ferryprom.NewConflictCollector(reg, store, &ferryprom.ConflictConfig{Consumers: []string{"points-award"}})
	require.NoError(t, err)
	require.ErrorContains(t, k.Poll(context.Background()), "poll open conflicts")
	require.Zero(t, value(t, reg, "ferry_inbox_conflicts_up"))
	require.Equal(t, 1.0, value(t, reg, "ferry_inbox_conflicts_poll_errors_total"))
	require.Equal(t, -1.0, value(t, reg, "ferry_inbox_open_conflicts", "consumer", "points-award"))
	_, err = ferryprom.NewConflictCollector(reg, store, &ferryprom.ConflictConfig{Interval: time.Second, Timeout: time.Second})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
}
