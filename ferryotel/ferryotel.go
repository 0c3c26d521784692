// Package ferryotel carries OpenTelemetry trace context from the
// transaction that enqueues an event, through the relay's publish, to the
// consumer that processes it. It is a plugin: the core never imports
// OpenTelemetry; Tracing attaches through the hooks of package ferry.
//
// The library uses the OpenTelemetry API only. The SDK and an exporter
// are the application's choice (the ferry daemon configures OTLP from the
// standard OTEL_* variables).
//
// # Spans
//
// The spans follow the OpenTelemetry messaging conventions:
//
//   - create {destination} (PRODUCER), started and ended by OnEnqueue
//     inside the caller's transaction, as a child of the span in the
//     enqueuing context. Its context is injected into the event's headers
//     (W3C traceparent and tracestate by default), so it is stored in the
//     outbox row, committed with the business change, and travels on the
//     broker message whichever relay publishes it and however late.
//   - send {destination} (CLIENT), one per publish attempt, made by
//     OnPublish after the broker answered, as a child of the stored
//     creation context. It carries the outcome (confirmed, returned,
//     rejected, unknown) and is marked as an error unless confirmed: a
//     retried event shows one send span per attempt.
//   - process {destination} (CONSUMER), one per handler call, as a child
//     of the creation context carried by the message: made by the
//     consumer hooks (pass Tracing in the ConsumerConfig.Hooks of
//     ferryamqp or ferrynats) around the handler, which runs in its
//     context, or by StartConsume in a consumer of your own. It is marked
//     as an error when the handler failed.
//
// One trace thus spans the request that committed the change, the outbox
// write, every publish attempt and every consumer's processing.
package ferryotel

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// ScopeName is the instrumentation scope of ferry's spans.
const ScopeName = "github.com/ferrydev/ferry/ferryotel"

// Attribute keys of ferry's own span attributes, next to the semantic
// conventions' messaging.* attributes.
const (
	AttrTable     = attribute.Key("ferry.outbox.table")
	AttrEventType = attribute.Key("ferry.event.type")
	AttrAggregate = attribute.Key("ferry.aggregate")
	AttrAttempt   = attribute.Key("ferry.publish.attempt")
	AttrOutcome   = attribute.Key("ferry.publish.outcome")
	AttrDuplicate = attribute.Key("ferry.publish.duplicate")
	// AttrDeliveryCount is the broker's count of deliveries of the
	// message, this one included, when it keeps one.
	AttrDeliveryCount = attribute.Key("ferry.delivery.count")
)

// Config configures Tracing. A nil config uses the defaults.
type Config struct {
	// TracerProvider creates the spans. Default: the global provider
	// (otel.GetTracerProvider()), as OpenTelemetry instrumentation does by
	// convention; pass one to keep ferry off global state.
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in event headers.
	// Default propagation.TraceContext{} (traceparent, tracestate).
	Propagator propagation.TextMapPropagator
	// System is the messaging.system attribute: "nats", "rabbitmq",
	// "kafka". Default none.
	System string
}

// Tracing implements ferry.HookEnqueue (pass it in ferry.OutboxConfig.Hooks),
// ferry.HookPublish (ferry.RelayConfig.Hooks), and ferrybroker.HookHandleStart
// and HookHandled (a consumer's ConsumerConfig.Hooks), which trace each
// handler call; StartConsume does the same for consumers without hooks. It
// is safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system []attribute.KeyValue
}

var (
	_ ferry.HookEnqueue           = (*Tracing)(nil)
	_ ferry.HookPublish           = (*Tracing)(nil)
	_ ferrybroker.HookHandleStart = (*Tracing)(nil)
	_ ferrybroker.HookHandled     = (*Tracing)(nil)
)

// New returns a Tracing configured by cfg.
func New(cfg *Config) *Tracing {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	// A nil one, plain or typed (a provider not built yet), is the default.
	if nilness.Nil(c.TracerProvider) {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if nilness.Nil(c.Propagator) {
		c.Propagator = propagation.TraceContext{}
	}
	t := &Tracing{tracer: c.TracerProvider.Tracer(ScopeName), prop: c.Propagator}
	if c.System != "" {
		t.system = []attribute.KeyValue{semconv.MessagingSystemKey.String(c.System)}
	}
	return t
}

// OnEnqueue implements ferry.HookEnqueue: it records a create span, child
// of ctx's span, and writes its context into ev.Headers, so that the
// context is stored in the outbox row with the event.
func (t *Tracing) OnEnqueue(ctx context.Context, ev *ferry.Event) {
	route := ev.Destination
	if route == "" {
		route = ev.Type
	}
	attrs := append([]attribute.KeyValue{
		semconv.MessagingOperationTypeCreate,
		semconv.MessagingOperationName("create"),
		semconv.MessagingDestinationName(route),
		semconv.MessagingMessageID(ev.ID),
		AttrEventType.String(ev.Type),
	}, t.system...)
	if ev.AggregateID != "" {
		attrs = append(attrs, AttrAggregate.String(ev.AggregateType+":"+ev.AggregateID))
	}
	ctx, span := t.tracer.Start(ctx, "create "+route, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	t.prop.Inject(ctx, headerCarrier(ev.Headers))
	span.End()
}

// OnPublish implements ferry.HookPublish: one send span per message, child
// of the creation context stored with the event, covering the batch's
// publish and ending with the broker's outcome. A message enqueued without
// a trace context gets a root span.
func (t *Tracing) OnPublish(table string, msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration) {
	end := time.Now()
	start := end.Add(-took)
	for i := range msgs {
		if i >= len(results) {
			break
		}
		m, res := &msgs[i], results[i]
		ctx := t.prop.Extract(context.Background(), headerCarrier(m.Headers))
		route := m.Route()
		attrs := append([]attribute.KeyValue{
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(route),
			semconv.MessagingMessageID(m.ID),
			AttrEventType.String(m.Type),
			AttrTable.String(table),
			AttrAttempt.Int(m.Attempt),
			AttrOutcome.String(res.Outcome.String()),
		}, t.system...)
		if res.Duplicate {
			attrs = append(attrs, AttrDuplicate.Bool(true))
		}
		_, span := t.tracer.Start(ctx, "send "+route, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		if res.Outcome != ferrytype.OutcomeConfirmed {
			msg := res.Outcome.String()
			if res.Err != nil {
				span.RecordError(res.Err, trace.WithTimestamp(end))
				msg += ": " + res.Err.Error()
			}
			span.SetStatus(codes.Error, ferrytype.RedactURL(msg))
		}
		span.End(trace.WithTimestamp(end))
	}
}

// Extract returns ctx with the trace context carried in headers (an
// event's or a delivery's), for consumers that start their own spans.
func (t *Tracing) Extract(ctx context.Context, headers map[string]string) context.Context {
	return t.prop.Extract(ctx, headerCarrier(headers))
}

// StartConsume starts the consumer's process span for d, a child of the
// creation context the message carries, and returns it with the context
// to run the handler in. The caller ends the span, recording the
// handler's error:
//
//	ctx, span := tracing.StartConsume(ctx, d)
//	err := handle(ctx, d)
//	if err != nil {
//		span.RecordError(err)
//		span.SetStatus(codes.Error, err.Error())
//	}
//	span.End()
func (t *Tracing) StartConsume(ctx context.Context, d *ferrybroker.Delivery) (context.Context, trace.Span) {
	parent := t.prop.Extract(ctx, headerCarrier(d.Headers))
	route := d.Route
	if route == "" {
		route = d.Type
	}
	attrs := append([]attribute.KeyValue{
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(route),
		semconv.MessagingMessageID(d.MessageID),
		AttrEventType.String(d.Type),
	}, t.system...)
	if d.AggregateID != "" {
		attrs = append(attrs, AttrAggregate.String(d.AggregateType+":"+d.AggregateID))
	}
	if d.DeliveryCount > 0 {
		attrs = append(attrs, AttrDeliveryCount.Int(d.DeliveryCount))
	}
	return t.tracer.Start(parent, "process "+route, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// processSpan is the context key of the span OnHandleStart started.
type processSpan struct{}

// OnHandleStart implements ferrybroker.HookHandleStart: it starts the
// process span of d (see StartConsume), and the handler runs in its
// context.
func (t *Tracing) OnHandleStart(ctx context.Context, _ string, d *ferrybroker.Delivery) context.Context {
	ctx, span := t.StartConsume(ctx, d)
	return context.WithValue(ctx, processSpan{}, span)
}

// OnHandled implements ferrybroker.HookHandled: it ends the span
// OnHandleStart started, recording the handler's error.
func (t *Tracing) OnHandled(ctx context.Context, _ string, _ *ferrybroker.Delivery, err error, _ time.Duration) {
	span, ok := ctx.Value(processSpan{}).(trace.Span)
	if !ok {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// headerCarrier adapts string headers to a propagation.TextMapCarrier.
// Lookups fall back to a case-insensitive match, since some brokers and
// clients change the case of header names.
type headerCarrier map[string]string

func (h headerCarrier) Get(key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) {
	if h != nil {
		h[key] = value
	}
}

func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}
