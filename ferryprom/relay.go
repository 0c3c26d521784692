package ferryprom

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Default histogram buckets, in seconds or attempts.
var (
	// commit→confirm: a healthy relay's milliseconds to an outage's hour.
	defaultLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// one claim statement, or one batch's publish (bounded by the publish
	// timeout).
	defaultDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	defaultAttemptBuckets  = []float64{1, 2, 3, 5, 10, 20, 50}
)

// Config configures Metrics. A nil config uses the defaults.
type Config struct {
	// ConstLabels are added to every metric, e.g. {"service": "orders"}.
	// Default none.
	ConstLabels prometheus.Labels
	// LatencyBuckets are the buckets of
	// ferry_relay_commit_to_confirm_seconds. Default: 1ms to 1h (.001,
	// .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300,
	// 900, 3600).
	LatencyBuckets []float64
	// DurationBuckets are the buckets of ferry_relay_claim_duration_seconds
	// and ferry_relay_publish_batch_duration_seconds. Default: 0.5ms to 10s
	// (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10).
	DurationBuckets []float64
	// AttemptBuckets are the buckets of ferry_relay_confirm_attempts.
	// Default 1, 2, 3, 5, 10, 20, 50.
	AttemptBuckets []float64
	// MaxDestinations bounds the values of the destination label of
	// ferry_relay_publish_outcomes_total, ferry_relay_sent_total and
	// ferry_relay_dead_total, across every table of the Metrics: the
	// first MaxDestinations destinations seen get series of their own,
	// every later one is counted under "_other", so that a table with a
	// million destinations cannot swell the registry. Events whose
	// destination the relay cannot tell (malformed rows) count under
	// "_unknown". Default DefaultMaxDestinations; negative: every
	// destination is "_other".
	MaxDestinations int
}

// DefaultMaxDestinations is the default of Config.MaxDestinations.
const DefaultMaxDestinations = 100

// Values of the destination label that are no destination.
const (
	// DestinationOther counts the destinations past Config.MaxDestinations.
	DestinationOther = "_other"
	// DestinationUnknown counts events whose destination the relay could
	// not read (malformed rows recorded DEAD).
	DestinationUnknown = "_unknown"
)

// Metrics counts what relays do. It implements the relay hooks of package
// ferry (HookClaim, HookPublish, HookFenced, HookSweep,
// HookSettleDestinations, HookRelease, HookHeartbeat): pass it in
// ferry.RelayConfig.Hooks. One Metrics may serve any number of relays, in
// the same process, on any tables; the table is a label, and the outcome,
// sent and dead counters also have a destination label, bounded by
// Config.MaxDestinations.
//
// Every hook does a few atomic additions, map lookups and histogram
// observations per event and takes no lock once a table and its
// destinations were seen.
type Metrics struct {
	claims, claimed, duplicates, sent, retried, dead, expired, fenced *prometheus.CounterVec
	released, beatFailures                                            *prometheus.CounterVec
	outcomes                                                          *prometheus.CounterVec
	claimDuration, publishDuration, latency, attempts                 *prometheus.HistogramVec

	tables sync.Map // table name -> *tableMetrics
	dests  destinationLabels
	log    *logMetrics
}

var (
	_ ferry.HookClaim              = (*Metrics)(nil)
	_ ferry.HookPublish            = (*Metrics)(nil)
	_ ferry.HookFenced             = (*Metrics)(nil)
	_ ferry.HookSweep              = (*Metrics)(nil)
	_ ferry.HookSettleDestinations = (*Metrics)(nil)
	_ ferry.HookRelease            = (*Metrics)(nil)
	_ ferry.HookHeartbeat          = (*Metrics)(nil)
)

// destinationLabels admits destinations as label values, up to max; the
// rest are DestinationOther.
type destinationLabels struct {
	max  int
	seen sync.Map // destination -> label value
	full atomic.Bool
	mu   sync.Mutex
	n    int // destinations admitted
}

func (d *destinationLabels) label(dest string) string {
	if dest == "" {
		return DestinationUnknown
	}
	if v, ok := d.seen.Load(dest); ok {
		return v.(string)
	}
	if d.full.Load() {
		return DestinationOther
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.seen.Load(dest); ok {
		return v.(string)
	}
	if d.n >= d.max {
		// Not remembered: the map stays bounded too.
		d.full.Store(true)
		return DestinationOther
	}
	d.n++
	d.seen.Store(dest, dest)
	return dest
}

// outcomes in the order of ferrytype.Outcome.
var outcomeNames = [...]string{
	ferrytype.OutcomeUnknown:   "unknown",
	ferrytype.OutcomeConfirmed: "confirmed",
	ferrytype.OutcomeReturned:  "returned",
	ferrytype.OutcomeRejected:  "rejected",
}

// New creates the relay metrics and registers them with reg, which must
// not be nil: ferryprom never uses the global registry.
func New(reg prometheus.Registerer, cfg *Config) (*Metrics, error) {
	if nilness.Nil(reg) {
		return nil, fmt.Errorf("%w: ferryprom.New: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.LatencyBuckets == nil {
		c.LatencyBuckets = defaultLatencyBuckets
	}
	if c.DurationBuckets == nil {
		c.DurationBuckets = defaultDurationBuckets
	}
	if c.AttemptBuckets == nil {
		c.AttemptBuckets = defaultAttemptBuckets
	}
	if c.MaxDestinations == 0 {
		c.MaxDestinations = DefaultMaxDestinations
	}
	for name, b := range map[string][]float64{"LatencyBuckets": c.LatencyBuckets, "DurationBuckets": c.DurationBuckets,
		"AttemptBuckets": c.AttemptBuckets} {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: ferryprom.Config.%s is empty", ferrytype.ErrInvalidConfig, name)
		}
	}
	table := []string{"table"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: c.ConstLabels},
			append(table, labels...))
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets,
			ConstLabels: c.ConstLabels}, table)
	}
	m := &Metrics{dests: destinationLabels{max: max(c.MaxDestinations, 0)},
		claims: counter("ferry_relay_claims_total",
			"Claim statements that returned events."),
		claimed: counter("ferry_relay_claimed_events_total",
			"Events claimed (leased to a relay for one publish attempt)."),
		outcomes: counter("ferry_relay_publish_outcomes_total",
			"Publish attempts by the broker's outcome: confirmed, returned (unroutable), rejected, unknown (not counting publishes that never left the relay), and by destination.",
			"outcome", "destination"),
		duplicates: counter("ferry_relay_publish_duplicates_total",
			"Confirmed publishes the broker reported as duplicates of a message it already had."),
		sent: counter("ferry_relay_sent_total",
			"Events marked SENT, by destination.", "destination"),
		retried: counter("ferry_relay_retries_total",
			"Events put back to NEW for another attempt, after a failed attempt or an expired lease."),
		dead: counter("ferry_relay_dead_total",
			"Events moved to DEAD, by destination: retries exhausted; they wait for a person (ferry dead).", "destination"),
		expired: counter("ferry_relay_lease_expiries_total",
			"Leases that expired before their relay recorded an outcome, returned by the sweeper."),
		fenced: counter("ferry_relay_fenced_total",
			"Outcome marks that changed nothing because the lease had passed to another owner."),
		released: counter("ferry_relay_released_total",
			"Events whose publish never left the relay (broker unreachable) given back to NEW without spending an attempt."),
		beatFailures: counter("ferry_relay_heartbeat_failures_total",
			"Relay heartbeats that could not be recorded in the table's heartbeat table (the relay goes on relaying)."),
		claimDuration: histogram("ferry_relay_claim_duration_seconds",
			"Duration of claim transactions that returned events.", c.DurationBuckets),
		publishDuration: histogram("ferry_relay_publish_batch_duration_seconds",
			"Duration of one batch's publish, until every message had an outcome.", c.DurationBuckets),
		latency: histogram("ferry_relay_commit_to_confirm_seconds",
			"Time from an event's created_at (database clock) to the broker's confirm (relay clock).", c.LatencyBuckets),
		attempts: histogram("ferry_relay_confirm_attempts",
			"Attempts an event needed until the broker confirmed it (1: the first).", c.AttemptBuckets),
	}
	m.log = newLogMetrics(c.ConstLabels)
	for _, col := range []prometheus.Collector{m.log.reading, m.log.retained, m.log.lastEvent, m.log.events, m.log.checkpoints,
		m.log.takeovers, m.log.gaps, m.log.streamErrors, m.claims, m.claimed, m.outcomes, m.duplicates, m.sent, m.retried, m.dead,
		m.expired, m.fenced, m.released, m.beatFailures, m.claimDuration, m.publishDuration, m.latency, m.attempts} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("ferryprom: %w (one Metrics serves every relay of a process: create it once)", err)
			}
			return nil, fmt.Errorf("ferryprom: %w", err)
		}
	}
	return m, nil
}

// tableMetrics holds one table's children, resolved once.
type tableMetrics struct {
	name                                             string
	claims, claimed, duplicates, retried, expired    prometheus.Counter
	fenced, released, beatFailures                   prometheus.Counter
	claimDuration, publishDuration, latency, attempt prometheus.Observer
	dests                                            sync.Map // destination label -> *destMetrics
}

// destMetrics holds the children of one table and destination.
type destMetrics struct {
	outcomes   [len(outcomeNames)]prometheus.Counter
	sent, dead prometheus.Counter
}

// dest returns the children of destination dest (not yet a label value).
func (m *Metrics) dest(t *tableMetrics, dest string) *destMetrics {
	label := m.dests.label(dest)
	if d, ok := t.dests.Load(label); ok {
		return d.(*destMetrics)
	}
	d := &destMetrics{sent: m.sent.WithLabelValues(t.name, label), dead: m.dead.WithLabelValues(t.name, label)}
	// Every outcome at zero from the start: a rate of failures over a
	// series that appears late misses its first increase.
	for i, o := range outcomeNames {
		d.outcomes[i] = m.outcomes.WithLabelValues(t.name, o, label)
	}
	actual, _ := t.dests.LoadOrStore(label, d)
	return actual.(*destMetrics)
}

// Table initialises the series of table, so that they exist at zero before
// the first event (a rate over a series that appears late misses its first
// increase). The hooks call it on their own; calling it up front is
// optional. The series of a destination start at zero when the destination
// is first seen.
func (m *Metrics) Table(table string) {
	m.table(table)
}

func (m *Metrics) table(name string) *tableMetrics {
	if t, ok := m.tables.Load(name); ok {
		return t.(*tableMetrics)
	}
	t := &tableMetrics{name: name,
		claims: m.claims.WithLabelValues(name), claimed: m.claimed.WithLabelValues(name),
		duplicates: m.duplicates.WithLabelValues(name), retried: m.retried.WithLabelValues(name),
		expired: m.expired.WithLabelValues(name), fenced: m.fenced.WithLabelValues(name),
		released: m.released.WithLabelValues(name), beatFailures: m.beatFailures.WithLabelValues(name),
		claimDuration: m.claimDuration.WithLabelValues(name), publishDuration: m.publishDuration.WithLabelValues(name),
		latency: m.latency.WithLabelValues(name), attempt: m.attempts.WithLabelValues(name),
	}
	actual, _ := m.tables.LoadOrStore(name, t)
	return actual.(*tableMetrics)
}

// OnClaim implements ferry.HookClaim.
func (m *Metrics) OnClaim(table string, events int, took time.Duration) {
	t := m.table(table)
	t.claims.Inc()
	t.claimed.Add(float64(events))
	t.claimDuration.Observe(took.Seconds())
}

// OnPublish implements ferry.HookPublish. The commit→confirm latency of a
// confirmed message runs from its created_at, stamped by the database
// clock when the enqueuing transaction wrote it, to now on the relay's
// clock: a skew between the two clocks shifts it. It includes any delay
// the event was enqueued with and the time spent in earlier attempts.
func (m *Metrics) OnPublish(table string, msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration) {
	t := m.table(table)
	t.publishDuration.Observe(took.Seconds())
	now := time.Now()
	var (
		lastRoute string
		d         *destMetrics
	)
	for i := range results {
		if results[i].NotSent() {
			continue // never reached the broker: counted when released
		}
		route := ""
		if i < len(msgs) {
			route = msgs[i].Route()
		}
		if d == nil || route != lastRoute {
			// A batch's messages often share a destination: resolve it
			// once per run of them.
			d, lastRoute = m.dest(t, route), route
		}
		o := results[i].Outcome
		if int(o) < 0 || int(o) >= len(d.outcomes) {
			o = ferrytype.OutcomeUnknown
		}
		d.outcomes[o].Inc()
		if o != ferrytype.OutcomeConfirmed {
			continue
		}
		if results[i].Duplicate {
			t.duplicates.Inc()
		}
		if i < len(msgs) {
			t.attempt.Observe(float64(msgs[i].Attempt))
			if !msgs[i].CreatedAt.IsZero() {
				t.latency.Observe(max(now.Sub(msgs[i].CreatedAt).Seconds(), 0))
			}
		}
	}
}

// OnFenced implements ferry.HookFenced.
func (m *Metrics) OnFenced(table string, events int64) {
	m.table(table).fenced.Add(float64(events))
}

// OnSweep implements ferry.HookSweep.
func (m *Metrics) OnSweep(table string, events int64) {
	m.table(table).expired.Add(float64(events))
}

// OnSettleDestinations implements ferry.HookSettleDestinations: sent and
// dead events by destination, retried events by table.
func (m *Metrics) OnSettleDestinations(table string, settled []ferry.DestinationSettled) {
	t := m.table(table)
	for _, s := range settled {
		t.retried.Add(float64(s.Retried))
		if s.Sent == 0 && s.Dead == 0 {
			continue
		}
		d := m.dest(t, s.Destination)
		d.sent.Add(float64(s.Sent))
		d.dead.Add(float64(s.Dead))
	}
}

// OnHeartbeat implements ferry.HookHeartbeat: it counts failed beats.
func (m *Metrics) OnHeartbeat(table string, err error) {
	t := m.table(table)
	if err != nil {
		t.beatFailures.Inc()
	}
}

// OnRelease implements ferry.HookRelease.
func (m *Metrics) OnRelease(table string, events int64) {
	m.table(table).released.Add(float64(events))
}
