package ferrywatermill_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/open"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The relay's Redis Streams publisher (ferry relay --broker-url redis://)
// through a Redis cut off the network: its probe sees the outage, the
// relay stops claiming and spends no event's attempts, and once Redis is
// back every event reaches its stream, none dead.
func TestRelayToRedisStreamsThroughAnOutage(t *testing.T) {
	t.Parallel()
	reader := redisClient(t, testsvc.URL(testsvc.EnvRedis))
	url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvRedis))
	ctx := testsvc.Context(t, 2*time.Minute)
	pub, err := open.Publisher(ctx, url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	conn, ok := pub.(ferrybroker.Connectivity)
	require.True(t, ok, "%T has no connectivity probe", pub)

	st := testsvc.Store(t, "mysql")
	wake := ferry.NewWakeup()
	outbox, err := ferry.NewOutbox(st.Driver, &ferry.OutboxConfig{Wakeup: wake})
	require.NoError(t, err)
	stream := testsvc.Name("ferry.wm.stream.")
	t.Cleanup(func() { reader.Del(context.Background(), stream) })
	enqueue := func(from, n int) {
		tx, err := st.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		var evs []ferry.Event
		for i := from; i < from+n; i++ {
			evs = append(evs, ferry.Event{Type: "OrderPaid", AggregateType: "order", AggregateID: fmt.Sprint(i % 5),
				Destination: stream, Payload: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
		_, err = outbox.EnqueueTx(ctx, tx, evs...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
	}
	relay, err := ferry.NewRelay(st.Driver, pub, &ferry.RelayConfig{Wakeup: wake, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	})

	enqueue(0, 25)
	testsvc.WaitFor(t, time.Minute, func() bool { return relay.Stats().Confirmed == 25 },
		func() string { return fmt.Sprintf("%+v", relay.Stats()) })
	proxy.Cut()
	testsvc.WaitFor(t, 30*time.Second, func() bool { return !conn.Connected() },
		func() string { return "the probe does not see Redis cut off" })
	require.ErrorContains(t, conn.Disconnected(), "redis unreachable")
	enqueue(25, 25)
	testsvc.WaitFor(t, 30*time.Second, func() bool { return relay.Stats().Outages >= 1 },
		func() string { return fmt.Sprintf("%+v", relay.Stats()) })
	require.Equal(t, int64(25), relay.Stats().Confirmed, "nothing confirmed while Redis is unreachable")
	proxy.Restore()

	ids := map[string]bool{}
	testsvc.WaitFor(t, time.Minute, func() bool {
		xs, err := reader.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		for _, x := range xs {
			msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(x.Values)
			require.NoError(t, err)
			ids[msg.UUID] = true
		}
		return len(ids) == 50
	}, func() string { return fmt.Sprintf("%d of 50 events in the stream; %+v", len(ids), relay.Stats()) })
	testsvc.WaitFor(t, time.Minute, func() bool { return relay.Stats().Confirmed >= 50 },
		func() string { return fmt.Sprintf("%+v", relay.Stats()) })
	require.Zero(t, relay.Stats().Dead, "%+v", relay.Stats())
}
