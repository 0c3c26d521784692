package ferryotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryotel"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

// memoryBroker stands in for a broker in this example only: it keeps the
// messages in memory and confirms them. It proves nothing about delivery;
// the tests use a real broker.
type memoryBroker struct {
	mu   sync.Mutex
	msgs []ferrytype.Message
}

func (b *memoryBroker) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]ferrytype.PublishResult, len(msgs))
	for i := range msgs {
		b.msgs = append(b.msgs, msgs[i])
		out[i] = ferrytype.Confirmed()
	}
	return out
}

func (b *memoryBroker) Close() error { return nil }

// The trace context of the request that enqueues an event is stored with
// the event, continued by the relay's publish, and picked up by the
// consumer: one trace from the request to the consumer.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferryotel-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// In an application, the SDK and an exporter are set up once at start.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)
	tracing := ferryotel.New(&ferryotel.Config{TracerProvider: tp})

	// The producer: the enqueue hook captures the request's trace context.
	outbox, err := ferry.NewOutbox(store, &ferry.OutboxConfig{Hooks: []ferry.Hook{tracing}})
	if err != nil {
		log.Fatal(err)
	}
	reqCtx, request := tp.Tracer("app").Start(ctx, "POST /orders")
	tx, err := store.DB().BeginTx(reqCtx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.EnqueueTx(reqCtx, tx, ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"orderId":42}`), Destination: "orders.paid"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	request.End()

	// The relay: the publish hook continues the stored context.
	broker := &memoryBroker{}
	relay, err := ferry.NewRelay(store, broker, &ferry.RelayConfig{Hooks: []ferry.Hook{tracing}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := relay.Drain(ctx); err != nil {
		log.Fatal(err)
	}

	// The consumer: the delivery's headers carry the context.
	m := broker.msgs[0]
	d := &ferrybroker.Delivery{MessageID: m.ID, Route: m.Route(), Payload: m.Payload, Headers: m.Headers}
	_, process := tracing.StartConsume(ctx, d)
	process.End()

	names := map[trace.SpanID]string{}
	for _, s := range spans.GetSpans() {
		names[s.SpanContext.SpanID()] = s.Name
	}
	traceID := spans.GetSpans()[0].SpanContext.TraceID()
	for _, s := range spans.GetSpans() {
		parent := names[s.Parent.SpanID()]
		if parent == "" {
			parent = "none"
		}
		fmt.Printf("%-20s parent: %-20s same trace: %t\n", s.Name, parent, s.SpanContext.TraceID() == traceID)
	}
	// Output:
	// create orders.paid   parent: POST /orders         same trace: true
	// POST /orders         parent: none                 same trace: true
	// send orders.paid     parent: create orders.paid   same trace: true
	// process orders.paid  parent: create orders.paid   same trace: true
}
