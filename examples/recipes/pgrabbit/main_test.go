package main

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The recipe runs as written against PostgreSQL and RabbitMQ: the order's
// event is published (the relay started before the consumer, and nothing
// came back unroutable) and applied once; delivered a second time, after a
// lost confirm, it is a duplicate, and the points are still awarded once.
func TestRecipe(t *testing.T) {
	testsvc.Postgres(t) // skips, or fails with FERRY_REQUIRE_SERVICES=1, when a service is absent
	testsvc.RabbitMQ(t)
	databaseURL, brokerURL := testsvc.URL(testsvc.EnvPostgres), testsvc.URL(testsvc.EnvAMQP)

	t.Run("AppliedOnce", func(t *testing.T) {
		ctx := testsvc.Context(t, time.Minute)
		var out bytes.Buffer
		sum, err := run(ctx, &out, databaseURL, brokerURL)
		require.NoError(t, err)
		require.Equal(t, "order 42 paid; user 7 has 10 points (deliveries: 1, applied: 1)\n", out.String())
		require.Equal(t, summary{Points: 10, Markers: 1, Published: 1, Deliveries: 1}, sum)
	})
	t.Run("DeliveredTwiceAppliedOnce", func(t *testing.T) {
		// The relay loses its first confirm: the event is unknown to it,
		// published again with the same id, and delivered twice.
		var lost atomic.Bool
		ctx := ferryfault.With(testsvc.Context(t, time.Minute), func(_ context.Context, point string) error {
			if point == ferryfault.RelayLoseConfirm && lost.CompareAndSwap(false, true) {
				return context.DeadlineExceeded
			}
			return nil
		})
		var out bytes.Buffer
		sum, err := run(ctx, &out, databaseURL, brokerURL)
		require.NoError(t, err)
		require.True(t, lost.Load())
		require.Equal(t, "order 42 paid; user 7 has 10 points (deliveries: 2, applied: 1)\n", out.String())
		require.Equal(t, summary{Points: 10, Markers: 1, Published: 2, Deliveries: 2}, sum)
	})
}

// What the start order of docs/recipes.md guards against: a relay whose
// publisher declares no queue, started before the consumer, has its first
// publish returned as unroutable. The relay retries it (after about a
// second, then doubling), never counts it as sent, and delivers it once
// the consumer has declared and bound its queue.
func TestUnroutableIsRetriedUntilTheQueueExists(t *testing.T) {
	testsvc.Postgres(t)
	testsvc.RabbitMQ(t)
	ctx := testsvc.Context(t, time.Minute)
	fresh := testsvc.Name("")
	schema, exchange, queue := "recipe_"+fresh, "orders_"+fresh, ferryamqp.Queue{Name: "points_" + fresh}
	databaseURL, cleanup, err := prepare(ctx, testsvc.URL(testsvc.EnvPostgres), testsvc.URL(testsvc.EnvAMQP), schema, exchange, queue.Name)
	require.NoError(t, err)
	t.Cleanup(cleanup)

	pool, store, err := openOrders(ctx, databaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	outbox, err := ferry.NewOutbox(store, nil)
	require.NoError(t, err)
	pub, err := ferryamqp.Dial(ctx, testsvc.URL(testsvc.EnvAMQP), &ferryamqp.Config{Exchange: exchange, Declare: true}) // no queue
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	relay, err := ferry.NewRelay(store, pub, nil)
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { relay.Stop(context.WithoutCancel(ctx)) })

	require.NoError(t, payOrder(ctx, pool, outbox, "42"))
	testsvc.WaitFor(t, 10*time.Second, func() bool { return relay.Stats().Returned > 0 }, nil)
	require.Zero(t, relay.Stats().Confirmed, "an unroutable publish is never sent")

	consumer, inboxStore, err := startPoints(ctx, databaseURL, testsvc.URL(testsvc.EnvAMQP), exchange, queue)
	require.NoError(t, err)
	t.Cleanup(func() { inboxStore.Close() })
	t.Cleanup(func() { consumer.Stop(context.WithoutCancel(ctx)) })
	testsvc.WaitFor(t, 20*time.Second, func() bool { return consumer.Stats().Acked == 1 },
		func() string { return fmt.Sprintf("relay %+v, consumer %+v", relay.Stats(), consumer.Stats()) })
	st := relay.Stats()
	require.Equal(t, int64(1), st.Confirmed)
	require.Zero(t, st.Dead)
	var points int
	require.NoError(t, inboxStore.Pool().QueryRow(ctx, `SELECT points FROM points WHERE user_id = 7`).Scan(&points))
	require.Equal(t, 10, points)
}
