package main

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The recipe runs as written against MariaDB and RabbitMQ: the order's
// event is published (the relay started before the consumer, and nothing
// came back unroutable) and applied once; delivered a second time, after a
// lost confirm, it is a duplicate, and the points are still awarded once.
func TestRecipe(t *testing.T) {
	testsvc.MySQL(t) // skips, or fails with FERRY_REQUIRE_SERVICES=1, when a service is absent
	testsvc.RabbitMQ(t)
	databaseURL, brokerURL := testsvc.URL(testsvc.EnvMySQL), testsvc.URL(testsvc.EnvAMQP)

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
