package ferryamqp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// benchPayload is a 1 KiB JSON payload, as in LIMITS.md.
var benchPayload = json.RawMessage(`{"orderId":42,"pad":"` + strings.Repeat("x", 1000) + `"}`)

const benchEvents = 20000

// BenchmarkPublish compares, in one run and on the same quorum queue
// setup, what RabbitMQ takes from a bare amqp091-go loop with pipelined
// confirms against ferryamqp's Publisher alone and against the whole
// relay (claim from the database, publish, mark SENT), in messages or
// events per second:
//
//	go test -run '^$' -bench Publish -benchtime 3x ./ferrybroker/ferryamqp/
//
// raw/window=N: amqp091-go, one channel, at most N confirms outstanding.
// publisher/callers=N: ferryamqp.Publisher, N concurrent callers each
// publishing batches of 100 (the relay's default batch).
// relay/STORE/relays=N: N relays (2 lanes, batch 100) draining 20,000
// pre-filled events from STORE.
func BenchmarkPublish(b *testing.B) {
	for _, window := range []int{100, 1000} {
		b.Run(fmt.Sprintf("raw/window=%d", window), func(b *testing.B) { benchRaw(b, window) })
	}
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("publisher/callers=%d", callers), func(b *testing.B) { benchPublisher(b, callers) })
	}
	for _, kind := range []string{"mysql", "postgres"} {
		for _, relays := range []int{1, 2} {
			b.Run(fmt.Sprintf("relay/%s/relays=%d", kind, relays), func(b *testing.B) { benchRelay(b, kind, relays) })
		}
	}
}

func benchMsgs(n int, route string) []ferrytype.Message {
	msgs := make([]ferrytype.Message, n)
	prefix := testsvc.Name("bench-")
	for i := range msgs {
		msgs[i] = ferrytype.Message{ID: fmt.Sprintf("%s-%d", prefix, i), AggregateType: "order", AggregateID: fmt.Sprint(i % 2000),
			Sequence: int64(i/2000 + 1), Type: "OrderPaid", Payload: benchPayload, Destination: route, Attempt: 1,
			Headers:   map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			CreatedAt: time.Now()}
	}
	return msgs
}

func purge(b *testing.B, conn *amqp.Connection, queue string) {
	ch, err := conn.Channel()
	require.NoError(b, err)
	defer ch.Close()
	_, err = ch.QueuePurge(queue, false)
	require.NoError(b, err)
}

// benchRaw publishes the same messages (properties and headers as
// ferryamqp sets them) with a bare amqp091-go loop.
func benchRaw(b *testing.B, window int) {
	conn := testsvc.RabbitMQ(b)
	q := testsvc.RabbitMQQueue(b, conn, "quorum", nil)
	msgs := benchMsgs(benchEvents, q.RoutingKey)
	pubs := make([]amqp.Publishing, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		h := amqp.Table{"traceparent": m.Headers["traceparent"]}
		for _, kv := range ferrybroker.MetadataHeaders(m) {
			h[kv[0]] = kv[1]
		}
		pubs[i] = amqp.Publishing{Headers: h, ContentType: "application/json", DeliveryMode: amqp.Persistent,
			MessageId: m.ID, Type: m.Type, Timestamp: m.CreatedAt, Body: m.Payload}
	}
	ch, err := conn.Channel()
	require.NoError(b, err)
	defer ch.Close()
	require.NoError(b, ch.Confirm(false))
	var elapsed time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		start := time.Now()
		outstanding := make([]*amqp.DeferredConfirmation, 0, window)
		for i := range pubs {
			if len(outstanding) == window {
				require.True(b, outstanding[0].Wait())
				outstanding = outstanding[1:]
			}
			dc, err := ch.PublishWithDeferredConfirm("amq.topic", q.RoutingKey, true, false, pubs[i])
			require.NoError(b, err)
			outstanding = append(outstanding, dc)
		}
		for _, dc := range outstanding {
			require.True(b, dc.Wait())
		}
		elapsed += time.Since(start)
		b.StopTimer()
		purge(b, conn, q.Name)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEvents*b.N)/elapsed.Seconds(), "msgs/s")
}

// benchPublisher publishes through ferryamqp.Publisher from concurrent
// callers, in batches of 100.
func benchPublisher(b *testing.B, callers int) {
	conn := testsvc.RabbitMQ(b)
	q := testsvc.RabbitMQQueue(b, conn, "quorum", nil)
	ctx := testsvc.Context(b, 10*time.Minute)
	p, err := ferryamqp.Dial(ctx, testsvc.URL(testsvc.EnvAMQP), nil)
	require.NoError(b, err)
	defer p.Close()
	msgs := benchMsgs(benchEvents, q.RoutingKey)
	var elapsed time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		start := time.Now()
		var wg sync.WaitGroup
		per := len(msgs) / callers
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func(part []ferrytype.Message) {
				defer wg.Done()
				for i := 0; i < len(part); i += 100 {
					for _, r := range p.Publish(ctx, part[i:min(i+100, len(part))]) {
						if r.Outcome != ferrytype.OutcomeConfirmed {
							b.Errorf("outcome %s: %v", r.Outcome, r.Err)
							return
						}
					}
				}
			}(msgs[c*per : (c+1)*per])
		}
		wg.Wait()
		elapsed += time.Since(start)
		b.StopTimer()
		purge(b, conn, q.Name)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEvents*b.N)/elapsed.Seconds(), "msgs/s")
}

// benchRelay measures relays draining pre-filled events to the queue.
func benchRelay(b *testing.B, kind string, relays int) {
	conn := testsvc.RabbitMQ(b)
	q := testsvc.RabbitMQQueue(b, conn, "quorum", nil)
	st := testsvc.Store(b, kind)
	ctx := testsvc.Context(b, 30*time.Minute)
	ob, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(b, err)
	var elapsed time.Duration
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for start := 0; start < benchEvents; start += 100 {
			tx, err := st.DB.BeginTx(ctx, nil)
			require.NoError(b, err)
			events := make([]ferry.Event, 100)
			for i := range events {
				events[i] = ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint((start + i) % 2000), Type: "OrderPaid",
					Payload: benchPayload, Destination: q.RoutingKey,
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
			}
			_, err = ob.EnqueueTx(ctx, tx, events...)
			require.NoError(b, err)
			require.NoError(b, tx.Commit())
		}
		pubs := make([]*ferryamqp.Publisher, relays)
		for i := range pubs {
			pubs[i], err = ferryamqp.Dial(ctx, testsvc.URL(testsvc.EnvAMQP), nil)
			require.NoError(b, err)
		}
		b.StartTimer()
		start := time.Now()
		rs := make([]*ferry.Relay, relays)
		for i := range rs {
			rs[i], err = ferry.NewRelay(st.Driver, pubs[i], &ferry.RelayConfig{BatchSize: 100, Lanes: 2, PollInterval: 5 * time.Millisecond})
			require.NoError(b, err)
			require.NoError(b, rs[i].Start(ctx))
		}
		// The relays' own counters: polling the table would load the
		// database under measurement.
		waitFor(b, 10*time.Minute, func() bool {
			var done int64
			for _, r := range rs {
				done += r.Stats().Confirmed
			}
			return done >= benchEvents
		})
		elapsed += time.Since(start)
		b.StopTimer()
		for i, r := range rs {
			require.NoError(b, r.Stop(context.Background()))
			s := r.Stats()
			require.Zero(b, s.Unknown+s.Returned+s.Rejected, "%+v", s)
			pubs[i].Close()
		}
		purge(b, conn, q.Name)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEvents*b.N)/elapsed.Seconds(), "events/s")
}
