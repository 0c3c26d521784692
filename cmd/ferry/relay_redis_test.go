package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// ferry relay --broker-url redis:// publishes each event to the Redis
// stream named by its destination, through Watermill's redisstream
// publisher: the event id is the Watermill message UUID, the ferry
// headers its metadata. An unreachable Redis at start is a clear error.
func TestRelayCLIToRedisStreams(t *testing.T) {
	t.Parallel()
	url := testsvc.URL(testsvc.EnvRedis)
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testsvc.Context(t, time.Minute)
	if err := rdb.Ping(ctx).Err(); err != nil {
		testsvc.Unavailable(t, "Redis at "+url, err)
	}

	t.Run("Drain", func(t *testing.T) {
		b := setupOps(t, "sqlite")
		stream := testsvc.Name("ferry.stream.")
		t.Cleanup(func() { rdb.Del(context.Background(), stream) })
		var events []ferry.Event
		for i := range 30 {
			events = append(events, orderPaid(fmt.Sprint(i%4), stream))
		}
		ids := b.enqueue(t, events...)
		code, out, errOut := b.cli(t, "relay", "--broker-url", url, "--poll-interval", "50ms", "--drain", "--drain-timeout", "1m")
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "30 published")
		require.Contains(t, out, "left: 0 new, 0 sending, 0 dead")

		xs, err := rdb.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, xs, 30)
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
		}
		for _, x := range xs {
			msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(x.Values)
			require.NoError(t, err)
			require.True(t, want[msg.UUID], "message %s", msg.UUID)
			delete(want, msg.UUID)
			require.Equal(t, msg.UUID, msg.Metadata.Get(ferrybroker.HeaderEventID))
			require.Equal(t, "OrderPaid", msg.Metadata.Get(ferrybroker.HeaderEventType))
		}
		require.Empty(t, want)
	})

	t.Run("Unreachable", func(t *testing.T) {
		b := setupOps(t, "sqlite")
		code, out, errOut := b.cli(t, "relay", "--broker-url", "redis://:s3cr3tpw@127.0.0.1:1/0?dial_timeout=1s",
			"--drain", "--connect-timeout", "2s")
		require.Equal(t, exitFailed, code, "unreachable after --connect-timeout: %s\n%s", out, errOut)
		require.Contains(t, errOut, "redis at redis://")
		require.NotContains(t, errOut+out, "s3cr3tpw")
	})
}
