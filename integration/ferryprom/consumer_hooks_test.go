package ferryprom_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A broker consumer given ConsumerMetrics as a hook reports every
// delivery, handler call and settlement, with an unwrapped handler, and
// the series agree with the consumer's own stats.
func TestConsumerMetricsFromConsumerHooks(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, 2*time.Minute)
	nc := testsvc.NATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for i, id := range []string{"ok", "poison", "flaky"} {
		msg := nats.NewMsg(prefix + ".orders")
		msg.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	m, err := ferryprom.NewConsumerMetrics(reg, nil)
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	c, err := ferrynats.NewConsumer(js, func(ctx context.Context, d *ferrybroker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls[d.MessageID]++
		switch {
		case d.MessageID == "poison":
			return ferrytype.Poison(errors.New("unknown currency"))
		case d.MessageID == "flaky" && calls[d.MessageID] == 1:
			return errors.New("database unavailable")
		}
		return nil
	}, &ferrynats.ConsumerConfig{Stream: stream, Durable: "points", FilterSubjects: []string{prefix + ".orders"},
		Declare: true, ParkSubject: prefix + ".parked", ConsumerOptions: ferrybroker.ConsumerOptions{Name: "points-award", Hooks: []ferrybroker.Hook{m}, Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: time.Millisecond}},
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { s := c.Stats(); return s.Acked == 2 && s.Parked == 1 },
		func() string { return fmt.Sprintf("%+v", c.Stats()) })
	require.NoError(t, c.Stop(ctx))

	st := c.Stats()
	got := func(name string, labels ...string) float64 {
		return value(t, reg, name, append([]string{"consumer", "points-award"}, labels...)...)
	}
	require.Equal(t, float64(st.Delivered), got("ferry_consumer_received_total"))
	require.Equal(t, 4.0, got("ferry_consumer_received_total"))
	require.Equal(t, 2.0, got("ferry_consumer_settled_total", "action", "acked"))
	require.Equal(t, 1.0, got("ferry_consumer_settled_total", "action", "retried"))
	require.Equal(t, 1.0, got("ferry_consumer_settled_total", "action", "parked"))
	require.Equal(t, 0.0, got("ferry_consumer_settled_total", "action", "left"))
	require.Equal(t, 2.0, got("ferry_consumer_deliveries_total", "result", "ok"))
	require.Equal(t, 1.0, got("ferry_consumer_deliveries_total", "result", "poison"))
	require.Equal(t, 1.0, got("ferry_consumer_deliveries_total", "result", "transient"))
	require.Equal(t, 0.0, got("ferry_consumer_in_flight_deliveries"))
}
