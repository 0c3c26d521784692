package ferryprom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferryprom"
)

func TestIdempotencyMetricsCountOutcomesByRoute(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := ferryprom.NewIdempotencyMetrics(reg, nil)
	require.NoError(t, err)
	m.OnIdempotency("POST /payments", ferryhttp.Executed, 3*time.Millisecond)
	m.OnIdempotency("POST /payments", ferryhttp.Replayed, time.Millisecond)
	m.OnIdempotency("POST /payments", ferryhttp.Replayed, time.Millisecond)
	m.OnIdempotency("POST /payments", ferryhttp.TakenOver, 0)
	m.OnIdempotency("POST /refunds", ferryhttp.InProgress, time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ferry_idempotency_requests_total Requests with an Idempotency-Key, by outcome: executed (response stored with the writes), not-stored (rolled back, key released), replayed (stored response returned), in-progress (409), mismatch (key reused for another request, 422), taken-over (a dead claim taken over after its lease), fenced (lost its claim to a takeover, rolled back), invalid (key missing or malformed, body too large).
# TYPE ferry_idempotency_requests_total counter
ferry_idempotency_requests_total{outcome="executed",route="POST /payments"} 1
ferry_idempotency_requests_total{outcome="in-progress",route="POST /refunds"} 1
ferry_idempotency_requests_total{outcome="replayed",route="POST /payments"} 2
ferry_idempotency_requests_total{outcome="taken-over",route="POST /payments"} 1
`), "ferry_idempotency_requests_total"))
	require.Equal(t, 3, testutil.CollectAndCount(m.Collectors()[1]), "takeovers have no duration")
	_, err = ferryprom.NewIdempotencyMetrics(reg, nil)
	require.Error(t, err, "registered twice")
}
