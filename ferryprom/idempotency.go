package ferryprom

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// IdempotencyMetrics counts what ferryhttp's Idempotency-Key middleware
// does with each request: executed, replayed, refused as in progress or as
// a reused key, taken over, fenced. It implements ferryhttp.Hook: pass it
// in ferryhttp.Config.Hooks. The route label is the route the middleware
// scopes keys by (a ServeMux pattern by default), so its cardinality is
// the number of routes.
type IdempotencyMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ ferryhttp.Hook = (*IdempotencyMetrics)(nil)

// NewIdempotencyMetrics registers the metrics on reg. cfg may be nil; its
// DurationBuckets bound ferry_idempotency_request_duration_seconds.
func NewIdempotencyMetrics(reg prometheus.Registerer, cfg *ConsumerConfig) (*IdempotencyMetrics, error) {
	if nilness.Nil(reg) {
		return nil, fmt.Errorf("%w: ferryprom.NewIdempotencyMetrics: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	var c ConsumerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.DurationBuckets == nil {
		c.DurationBuckets = defaultConsumerBuckets
	}
	m := &IdempotencyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_idempotency_requests_total",
			Help: "Requests with an Idempotency-Key, by outcome: executed (response stored with the writes), " +
				"not-stored (rolled back, key released), replayed (stored response returned), in-progress (409), " +
				"mismatch (key reused for another request, 422), taken-over (a dead claim taken over after its lease), " +
				"fenced (lost its claim to a takeover, rolled back), invalid (key missing or malformed, body too large).",
			ConstLabels: c.ConstLabels}, []string{"route", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ferry_idempotency_request_duration_seconds",
			Help:    "Time from the claim to the outcome of requests with an Idempotency-Key, the handler included.",
			Buckets: c.DurationBuckets, ConstLabels: c.ConstLabels}, []string{"route", "outcome"}),
	}
	for _, col := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("ferryprom: register idempotency metrics: %w", err)
		}
	}
	return m, nil
}

// Collectors returns the request counter and the duration histogram.
func (m *IdempotencyMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration}
}

// OnIdempotency implements ferryhttp.Hook.
func (m *IdempotencyMetrics) OnIdempotency(route string, outcome ferryhttp.Outcome, took time.Duration) {
	m.requests.WithLabelValues(route, outcome.String()).Inc()
	if outcome != ferryhttp.TakenOver {
		m.duration.WithLabelValues(route, outcome.String()).Observe(took.Seconds())
	}
}
