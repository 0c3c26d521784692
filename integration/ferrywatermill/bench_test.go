package ferrywatermill_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

const benchN = 5000

var benchPayload = []byte(`{"orderId":42,"pad":"` + strings.Repeat("x", 1000) + `"}`)

// BenchmarkBridgeVsNative publishes the same 5,000 messages (1 KiB JSON,
// persistent, to one quorum queue), in one run, three ways, and reports
// each in messages per second and the ratios between them:
//
//	go test -run '^$' -bench BridgeVsNative -benchtime 3x ./ferrywatermill/
//
// raw: a bare amqp091-go loop with pipelined confirms (window 1000), the
// broker's own figure; native: ferryamqp's Publisher, 2 callers each
// publishing batches of 100 (a relay's 2 lanes); bridge: ferrywatermill's
// Publisher over watermill-amqp with confirms and a pool of 64 channels,
// the same 2 callers and batches.
func BenchmarkBridgeVsNative(b *testing.B) {
	conn := testsvc.RabbitMQ(b)
	q := testsvc.RabbitMQQueue(b, conn, "quorum", nil)
	url := testsvc.URL(testsvc.EnvAMQP)

	native, err := ferryamqp.Dial(testsvc.Context(b, 10*time.Second), url, &ferryamqp.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = native.Close() })
	cfg := amqpConfig(url)
	cfg.Publish.ChannelPoolSize = 64
	wpub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	require.NoError(b, err)
	bridge, err := ferrywatermill.NewPublisher(wpub, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored})
	require.NoError(b, err)
	b.Cleanup(func() { _ = bridge.Close() })

	var raw, nat, brg time.Duration
	round := 0
	for b.Loop() {
		round++
		raw += timed(b, conn, q.Name, func() { rawPublish(b, conn, q.Name, round) })
		// ferryamqp publishes to amq.topic, where the queue is bound;
		// watermill-amqp's queue config to the default exchange.
		nat += timed(b, conn, q.Name, func() { publishAll(b, native, q.RoutingKey, fmt.Sprintf("n%d", round)) })
		brg += timed(b, conn, q.Name, func() { publishAll(b, bridge, q.Name, fmt.Sprintf("b%d", round)) })
	}
	rate := func(d time.Duration) float64 { return float64(benchN*round) / d.Seconds() }
	b.ReportMetric(rate(raw), "raw-msg/s")
	b.ReportMetric(rate(nat), "native-msg/s")
	b.ReportMetric(rate(brg), "bridge-msg/s")
	b.ReportMetric(rate(brg)/rate(nat), "bridge/native")
	b.ReportMetric(rate(brg)/rate(raw), "bridge/raw")
}

// timed purges queue, then times fn.
func timed(b *testing.B, conn *amqp.Connection, queue string, fn func()) time.Duration {
	ch, err := conn.Channel()
	require.NoError(b, err)
	_, err = ch.QueuePurge(queue, false)
	require.NoError(b, err)
	_ = ch.Close()
	start := time.Now()
	fn()
	return time.Since(start)
}

func rawPublish(b *testing.B, conn *amqp.Connection, queue string, round int) {
	ch, err := conn.Channel()
	require.NoError(b, err)
	defer ch.Close()
	require.NoError(b, ch.Confirm(false))
	ctx := context.Background()
	window := make(chan *amqp.DeferredConfirmation, 1000)
	done := make(chan error, 1)
	go func() {
		for c := range window {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				done <- fmt.Errorf("confirm: %v %v", ok, err)
				for range window {
				}
				return
			}
		}
		done <- nil
	}()
	for i := range benchN {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			MessageId: fmt.Sprintf("r%d-%d", round, i), DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: benchPayload, Headers: amqp.Table{ferrybroker.HeaderEventID: fmt.Sprintf("r%d-%d", round, i)}})
		require.NoError(b, err)
		window <- c
	}
	close(window)
	require.NoError(b, <-done)
}

// publishAll publishes benchN messages through p: 2 callers, batches of 100.
func publishAll(b *testing.B, p ferrybroker.Publisher, route, prefix string) {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := c * benchN / 2; start < (c+1)*benchN/2; start += 100 {
				msgs := make([]ferrytype.Message, 100)
				for i := range msgs {
					n := start + i
					msgs[i] = ferrytype.Message{ID: fmt.Sprintf("%s-%d", prefix, n), Type: "OrderPaid", AggregateType: "order",
						AggregateID: fmt.Sprint(n % 2000), Sequence: int64(n/2000 + 1), Payload: benchPayload, Destination: route,
						Attempt: 1, CreatedAt: time.Now()}
				}
				for _, r := range p.Publish(context.Background(), msgs) {
					if r.Outcome != ferrytype.OutcomeConfirmed {
						errs <- fmt.Errorf("%s: %v", r.Outcome, r.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}
