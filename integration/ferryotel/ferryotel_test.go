package ferryotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryotel"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, why string) {
	t.Helper()
	testsvc.WaitFor(t, d, cond, func() string { return why })
}

// One trace spans the request that committed an order, the outbox write,
// every publish attempt (the first finds no stream: returned; a later one
// is confirmed) and the consumer that reads the message from JetStream:
// the trace context was captured at enqueue, stored in the outbox row, and
// carried on the broker message.
func TestOneTraceFromEnqueueThroughPublishToConsume(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, 2*time.Minute)
	st := testsvc.Store(t, "postgres")
	nc := testsvc.NATS(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := ferryotel.New(&ferryotel.Config{TracerProvider: tp, System: "nats"})

	// The application: a request commits the order and its event.
	subject := testsvc.Name("traced") + ".paid"
	ob, err := ferry.NewOutbox(st.Driver, &ferry.OutboxConfig{Hooks: []ferry.Hook{tracing}})
	require.NoError(t, err)
	reqCtx, request := tp.Tracer("app").Start(ctx, "POST /orders/42/pay", trace.WithSpanKind(trace.SpanKindServer))
	tx, err := st.DB.BeginTx(reqCtx, nil)
	require.NoError(t, err)
	ids, err := ob.EnqueueTx(reqCtx, tx, ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"orderId":42}`), Destination: subject})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	request.End()

	// The trace context is in the outbox row, committed with the order.
	row, err := st.Driver.Get(ctx, ids[0])
	require.NoError(t, err)
	create := spansNamed(rec, "create "+subject)
	require.Len(t, create, 1)
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", create[0].SpanContext().TraceID(), create[0].SpanContext().SpanID()),
		row.Headers["traceparent"])

	// The relay: no stream takes the subject yet, so the first attempts
	// are returned; then the stream appears and an attempt is confirmed.
	pub, err := ferrynats.Dial(ctx, testsvc.URL(testsvc.EnvNATS), nil)
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	relay, err := ferry.NewRelay(st.Driver, pub, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond,
		Retry: ferry.ExponentialBackoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
		Hooks: []ferry.Hook{tracing}})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { _ = relay.Stop(context.Background()) })
	waitFor(t, 30*time.Second, func() bool { return len(spansNamed(rec, "send "+subject)) >= 1 }, "a first publish attempt")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream := testsvc.Name("TRACED_")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject, subject + ".parked"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	waitFor(t, 30*time.Second, func() bool { return relay.Stats().Confirmed == 1 }, "the event confirmed")

	// The consumer: a JetStream consumer with the tracing hooks runs the
	// handler in the process span's context.
	handlerSpan := make(chan trace.SpanContext, 1)
	consumer, err := ferrynats.NewConsumer(js, func(ctx context.Context, d *ferrybroker.Delivery) error {
		handlerSpan <- trace.SpanContextFromContext(ctx)
		return nil
	}, &ferrynats.ConsumerConfig{Stream: stream, Durable: "traced", Declare: true, FilterSubjects: []string{subject},
		ParkSubject: subject + ".parked", ConsumerOptions: ferrybroker.ConsumerOptions{Hooks: []ferrybroker.Hook{tracing}}})
	require.NoError(t, err)
	require.NoError(t, consumer.Start(ctx))
	t.Cleanup(func() { _ = consumer.Stop(context.Background()) })
	var inHandler trace.SpanContext
	select {
	case inHandler = <-handlerSpan:
	case <-ctx.Done():
		t.Fatal("the consumer never ran the handler")
	}
	waitFor(t, 30*time.Second, func() bool { return consumer.Stats().Acked == 1 }, "the delivery acked")
	require.NoError(t, consumer.Stop(ctx))

	// One trace: request → create → {send (returned)..., send (confirmed), process}.
	root := spansNamed(rec, "POST /orders/42/pay")[0]
	traceID := root.SpanContext().TraceID()
	c := create[0]
	require.Equal(t, traceID, c.SpanContext().TraceID())
	require.Equal(t, root.SpanContext().SpanID(), c.Parent().SpanID(), "create is a child of the enqueuing request")
	require.Equal(t, trace.SpanKindProducer, c.SpanKind())
	require.Equal(t, ids[0], attr(c, "messaging.message.id").AsString())

	sends := spansNamed(rec, "send "+subject)
	require.GreaterOrEqual(t, len(sends), 2)
	for i, s := range sends {
		require.Equal(t, traceID, s.SpanContext().TraceID(), "send %d", i)
		require.Equal(t, c.SpanContext().SpanID(), s.Parent().SpanID(), "send %d is a child of create", i)
		require.Equal(t, trace.SpanKindClient, s.SpanKind())
		require.Equal(t, int64(i+1), attr(s, ferryotel.AttrAttempt).AsInt64(), "one span per attempt")
		require.Equal(t, "nats", attr(s, "messaging.system").AsString())
		require.Equal(t, st.Driver.Table(), attr(s, ferryotel.AttrTable).AsString())
		if i < len(sends)-1 {
			require.Equal(t, "returned", attr(s, ferryotel.AttrOutcome).AsString())
			require.Equal(t, codes.Error, s.Status().Code)
		}
	}
	last := sends[len(sends)-1]
	require.Equal(t, "confirmed", attr(last, ferryotel.AttrOutcome).AsString())
	require.Equal(t, codes.Unset, last.Status().Code)
	require.False(t, last.StartTime().After(last.EndTime()))

	p := spansNamed(rec, "process "+subject)
	require.Len(t, p, 1)
	require.Equal(t, traceID, p[0].SpanContext().TraceID())
	require.Equal(t, c.SpanContext().SpanID(), p[0].Parent().SpanID(), "process is a child of create")
	require.Equal(t, trace.SpanKindConsumer, p[0].SpanKind())
	require.Equal(t, p[0].SpanContext().SpanID(), inHandler.SpanID(), "the handler runs in the process span")
	require.Equal(t, codes.Unset, p[0].Status().Code)
	require.Equal(t, ids[0], attr(p[0], "messaging.message.id").AsString())
	require.Equal(t, "order:42", attr(p[0], ferryotel.AttrAggregate).AsString())
}

// Header names may change case on the way (some clients canonicalise
// them); extraction still finds the context.
func TestExtractIgnoresHeaderCase(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracing := ferryotel.New(&ferryotel.Config{TracerProvider: tp})
	ev := ferry.Event{Type: "T", Headers: map[string]string{}}
	tracing.OnEnqueue(context.Background(), &ev)
	require.NotEmpty(t, ev.Headers["traceparent"])
	ctx := tracing.Extract(context.Background(), map[string]string{"Traceparent": ev.Headers["traceparent"]})
	require.Equal(t, rec.Ended()[0].SpanContext().SpanID(), trace.SpanContextFromContext(ctx).SpanID())
}

// A consumer's handler that fails ends its process span as an error, with
// the error recorded; the hooks work with any consumer that calls them.
func TestProcessSpanOfAFailedHandler(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := ferryotel.New(&ferryotel.Config{TracerProvider: tp, System: "rabbitmq"})
	obs := ferrybroker.NewConsumerObserver("points", []ferrybroker.Hook{tracing})
	d := &ferrybroker.Delivery{MessageID: "evt-1", Route: "orders.paid", Type: "OrderPaid", DeliveryCount: 2,
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	var inHandler trace.SpanContext
	err := obs.Handle(context.Background(), func(ctx context.Context, d *ferrybroker.Delivery) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return fmt.Errorf("points service unavailable")
	}, d)
	require.Error(t, err)
	p := spansNamed(rec, "process orders.paid")
	require.Len(t, p, 1)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", p[0].SpanContext().TraceID().String(), "a child of the message's context")
	require.Equal(t, p[0].SpanContext().SpanID(), inHandler.SpanID())
	require.Equal(t, codes.Error, p[0].Status().Code)
	require.Equal(t, "points service unavailable", p[0].Status().Description)
	require.Equal(t, int64(2), attr(p[0], ferryotel.AttrDeliveryCount).AsInt64())
	require.Len(t, p[0].Events(), 1, "the error is recorded")
}

// A nil TracerProvider in the config, plain or typed (a provider not built
// yet), is the global default, not a panic.
func TestNewTakesANilProviderForTheDefault(t *testing.T) {
	t.Parallel()
	var tp *sdktrace.TracerProvider
	require.NotNil(t, ferryotel.New(&ferryotel.Config{TracerProvider: tp}))
	require.NotNil(t, ferryotel.New(&ferryotel.Config{}))
}
