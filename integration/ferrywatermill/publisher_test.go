// Package ferrywatermill_test runs ferrywatermill's adapters against real
// brokers through Watermill's own adapters: RabbitMQ (watermill-amqp) and
// Redis Streams (watermill-redisstream), through ferry's publisher and
// consumer conformance suites, a relay from the outbox, a router with the
// inbox, and Watermill's universal pub/sub tests.
package ferrywatermill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// amqpConfig is watermill-amqp's durable queue config (the topic is the
// queue) with publisher confirms, reconnecting quickly.
func amqpConfig(url string) wamqp.Config {
	cfg := wamqp.NewDurableQueueConfig(url)
	cfg.Publish.ConfirmDelivery = true
	cfg.Connection.Reconnect = &wamqp.ReconnectConfig{BackoffInitialInterval: 20 * time.Millisecond,
		BackoffRandomizationFactor: 0.2, BackoffMultiplier: 2, BackoffMaxInterval: 200 * time.Millisecond}
	return cfg
}

// amqpPublisher returns a watermill-amqp publisher with confirms, closed
// when the test ends.
func amqpPublisher(t *testing.T, url string) *wamqp.Publisher {
	t.Helper()
	p, err := wamqp.NewPublisher(amqpConfig(url), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// ferryPublisher wraps pub for the relay, closed when the test ends.
func ferryPublisher(t *testing.T, pub message.Publisher, g ferrywatermill.Guarantee) *ferrywatermill.Publisher {
	t.Helper()
	p, err := ferrywatermill.NewPublisher(pub, &ferrywatermill.PublisherConfig{Guarantee: g})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func receivedAMQP(ds []amqp.Delivery) []ferrybrokertest.Received {
	out := make([]ferrybrokertest.Received, 0, len(ds))
	for _, d := range ds {
		h := map[string]string{}
		for k, v := range d.Headers {
			if s, ok := v.(string); ok {
				h[k] = s
			}
		}
		out = append(out, ferrybrokertest.Received{ID: h[wamqp.DefaultMessageUUIDHeaderKey], Route: d.RoutingKey, Payload: d.Body, Headers: h})
	}
	return out
}

const noUnroutableAMQP = "watermill-amqp cannot report an unroutable message: RabbitMQ confirms it " +
	"after dropping it, and Watermill's Publish returns nil (docs/watermill.md: declare the queue first, or use ferryamqp)"

// upstreamRace says why the tests that sever watermill-amqp's connections
// run only without -race (scripts/test.sh runs them so, after the -race
// run): watermill-amqp v3.0.2's reconnect loop replaces a channel field
// without a lock while IsConnected, called by its own Publish, reads it
// (connection.go:139 against :114), and the race detector fails the test
// binary on that, whatever the test checks.
const upstreamRace = "watermill-amqp v3.0.2 races on its connection state when a connection drops " +
	"(connection.go:139 vs :114, inside its own Publish): this subtest runs in the run without -race"

// RabbitMQ through watermill-amqp with publisher confirms: Stored.
// watermill-amqp offers no race-free connectivity probe (see upstreamRace),
// so the outage subtest is skipped.
func TestPublisherConformanceRabbitMQ(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, ferrybrokertest.Harness{
		New: func(t *testing.T) ferrybrokertest.Setup {
			url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvAMQP))
			reader := testsvc.RabbitMQ(t)
			q := testsvc.RabbitMQQueue(t, reader, "quorum", nil)
			s := ferrybrokertest.Setup{
				Publisher:    ferryPublisher(t, amqpPublisher(t, url), ferrywatermill.Stored),
				Route:        q.Name,
				NoUnroutable: noUnroutableAMQP,
				Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
					return receivedAMQP(testsvc.ReadRabbitMQQueue(t, reader, q.Name, want, d))
				},
				// The proxy cut closes the publisher's connection; it
				// stays cut for the rest of the subtest.
				Break: func(*testing.T) { proxy.Cut() },
			}
			if raceBuild {
				s.Break, s.NoBreak = nil, upstreamRace
			}
			return s
		},
		NoConnectivity: "watermill-amqp's IsConnected is its only connectivity signal, and it is racy (" + upstreamRace + ")",
	})
}

// redisClient returns a client of the Redis at url, skipping (or failing, with
// FERRY_REQUIRE_SERVICES=1) when it is unreachable.
func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	opt.MaxRetries = -1 // a command that failed is not sent again by the client
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		testsvc.Unavailable(t, "Redis at "+url, err)
	}
	return rdb
}

// Redis Streams through watermill-redisstream: XADD answered is Stored (as
// durable as the server's persistence settings). Every stream name is
// routable; the redisstream publisher has no connectivity probe.
func TestPublisherConformanceRedisStreams(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, ferrybrokertest.Harness{
		New: func(t *testing.T) ferrybrokertest.Setup {
			reader := redisClient(t, testsvc.URL(testsvc.EnvRedis))
			url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvRedis))
			rdb := redisClient(t, url)
			stream := testsvc.Name("ferry.wm.")
			t.Cleanup(func() { reader.Del(context.Background(), stream) })
			pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, watermill.NopLogger{})
			require.NoError(t, err)
			return ferrybrokertest.Setup{
				Publisher:    ferryPublisher(t, pub, ferrywatermill.Stored),
				Route:        stream,
				NoUnroutable: "Redis Streams route every message: XADD creates the stream",
				Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
					return readStream(t, reader, stream, want, d)
				},
				Break: func(*testing.T) { proxy.Cut() },
			}
		},
		NoConnectivity: "watermill-redisstream's publisher cannot say whether Redis is reachable " +
			"(a PublisherConfig.Connected probe could: go-redis has none without a round trip)",
	})
}

// readStream reads the messages of a Redis stream, waiting up to d for at
// least want of them.
func readStream(t *testing.T, rdb *redis.Client, stream string, want int, d time.Duration) []ferrybrokertest.Received {
	t.Helper()
	var out []ferrybrokertest.Received
	deadline := time.Now().Add(d)
	last := "0"
	for len(out) < want {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		// XREAD BLOCK returns as soon as entries past last arrive, or
		// redis.Nil when left passes without any.
		xs, err := rdb.XRead(context.Background(), &redis.XReadArgs{Streams: []string{stream, last}, Count: 1000, Block: left}).Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		require.NoError(t, err)
		for _, x := range xs[0].Messages {
			msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(x.Values)
			require.NoError(t, err)
			out = append(out, ferrybrokertest.Received{ID: msg.UUID, Route: stream, Payload: msg.Payload, Headers: msg.Metadata})
			last = x.ID
		}
	}
	return out
}
