package ferryprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// defaultConsumerBuckets cover an inbox transaction (milliseconds) to a
// task's call to a slow external system (a minute).
var defaultConsumerBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// ConsumerConfig configures ConsumerMetrics. A nil config uses the
// defaults.
type ConsumerConfig struct {
	// ConstLabels are added to every metric, e.g. {"service": "points"}.
	// Default none.
	ConstLabels prometheus.Labels
	// DurationBuckets are the buckets of the three duration histograms.
	// Default: 0.5ms to 60s (.0005, .001, .0025, .005, .01, .025, .05, .1,
	// .25, .5, 1, 2.5, 5, 10, 30, 60).
	DurationBuckets []float64
}

// ConsumerMetrics counts what the consumer side does: the outcomes of
// inbox operations (it implements ferry.HookInbox: pass it in
// ferry.InboxConfig.Hooks), what broker consumers do with each delivery
// (it implements ferrybroker's consumer hooks: pass it in the consumer's
// ConsumerConfig.Hooks, as ferryamqp and ferrynats take them) and the
// results of task executions (wrap the task handlers with Tasks). Series
// are labelled by consumer name, or by task type; one ConsumerMetrics
// serves every consumer and task worker of a process.
//
// Task executions also flow through the relay hooks: a task worker is a
// relay whose "broker" is the task handlers, so ferry.Metrics in the task
// worker's RelayConfig.Hooks counts them by task table as any relay's
// events (ferry_relay_sent_total: done, ferry_relay_retries_total: failed
// and retried, ferry_relay_dead_total: given up, and
// ferry_relay_publish_outcomes_total by outcome), and OutboxCollector on
// the task table gives the age of the oldest pending task. Tasks adds what
// the relay cannot see: the time and result of each execution, by type.
type ConsumerMetrics struct {
	ops, deliveries, tasks              *prometheus.CounterVec
	received, settled, rewinds, rewound *prometheus.CounterVec
	opDuration, handleDuration, task    *prometheus.HistogramVec
	inFlight                            *prometheus.GaugeVec

	consumers sync.Map // consumer name -> *consumerSeries
	taskTypes sync.Map // task type -> *resultSeries
}

var (
	_ ferry.HookInbox             = (*ConsumerMetrics)(nil)
	_ ferrybroker.HookDelivered   = (*ConsumerMetrics)(nil)
	_ ferrybroker.HookHandleStart = (*ConsumerMetrics)(nil)
	_ ferrybroker.HookHandled     = (*ConsumerMetrics)(nil)
	_ ferrybroker.HookSettled     = (*ConsumerMetrics)(nil)
	_ ferrybroker.HookRewound     = (*ConsumerMetrics)(nil)
)

// settleActions are the label values of ferrybroker's actions, by action.
var settleActions = [...]string{
	ferrybroker.ActionAcked:   "acked",
	ferrybroker.ActionRetried: "retried",
	ferrybroker.ActionParked:  "parked",
	ferrybroker.ActionLeft:    "left",
}

// inboxOutcomes in the order of ferry.InboxOutcome.
var inboxOutcomes = [...]string{
	ferry.InboxApplied:   "applied",
	ferry.InboxDuplicate: "duplicate",
	ferry.InboxConflict:  "conflict",
	ferry.InboxStale:     "stale",
}

// Results of a handler or a task execution.
const (
	resultOK        = iota // nil: acked, or the task is done
	resultTransient        // an error: delivered (executed) again later
	resultPoison           // wraps ferrytype.ErrPoison: parked, or the task is DEAD
	resultCanceled         // the context ended during the call: outcome unknown, delivered (executed) again
	numResults
)

var resultNames = [numResults]string{"ok", "transient", "poison", "canceled"}

// result classifies what a handler returned. Poison first: a handler that
// parks a message on its way out of a canceled context still parked it.
func result(ctx context.Context, err error) int {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ferrytype.ErrPoison):
		return resultPoison
	case ctx.Err() != nil:
		return resultCanceled
	}
	return resultTransient
}

// NewConsumerMetrics creates the consumer-side metrics and registers them
// with reg, which must not be nil: ferryprom never uses the global
// registry.
func NewConsumerMetrics(reg prometheus.Registerer, cfg *ConsumerConfig) (*ConsumerMetrics, error) {
	if nilness.Nil(reg) {
		return nil, fmt.Errorf("%w: ferryprom.NewConsumerMetrics: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	var c ConsumerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.DurationBuckets == nil {
		c.DurationBuckets = defaultConsumerBuckets
	}
	if len(c.DurationBuckets) == 0 {
		return nil, fmt.Errorf("%w: ferryprom.ConsumerConfig.DurationBuckets is empty", ferrytype.ErrInvalidConfig)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: c.ConstLabels}, labels)
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: c.DurationBuckets,
			ConstLabels: c.ConstLabels}, labels)
	}
	m := &ConsumerMetrics{
		ops: counter("ferry_inbox_operations_total",
			"Operations the inbox processed, by outcome: applied (effect and marker committed), duplicate (already "+
				"applied, nothing written), conflict (same key, other fields: recorded, delivery parked), stale "+
				"(older than the newest applied version: recorded no-op).", "consumer", "outcome"),
		opDuration: histogram("ferry_inbox_operation_duration_seconds",
			"Duration of Inbox.Process for operations that reached an outcome, reruns after deadlocks included.",
			"consumer", "outcome"),
		received: counter("ferry_consumer_received_total",
			"Deliveries a broker consumer took from the broker, redeliveries included.", "consumer"),
		settled: counter("ferry_consumer_settled_total",
			"Deliveries a broker consumer settled, by action: acked (after its handler returned nil), retried "+
				"(delivered again after a delay), parked (a copy stored where the consumer parks), left (not "+
				"settled: stopping, cut off, or a failed ack; the broker delivers it again).", "consumer", "action"),
		deliveries: counter("ferry_consumer_deliveries_total",
			"Deliveries a broker handler processed, by result: ok (acked), transient (delivered again later), "+
				"poison (parked), canceled (cut off by shutdown or timeout: delivered again).", "consumer", "result"),
		handleDuration: histogram("ferry_consumer_handle_duration_seconds",
			"Duration of a broker handler's call for one delivery, by result.", "consumer", "result"),
		rewinds: counter("ferry_consumer_rewinds_total",
			"Partitions a consumer reset to an earlier offset because the brokers lost records it had read (Kafka, "+
				"after a leader change): each is logged with its offsets.", "consumer"),
		rewound: counter("ferry_consumer_rewound_records_total",
			"Records a consumer reads again because of its rewinds; the inbox absorbs those it applied as "+
				"duplicates.", "consumer"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_consumer_in_flight_deliveries",
			Help: "Deliveries a broker handler is processing now.", ConstLabels: c.ConstLabels}, []string{"consumer"}),
		tasks: counter("ferry_task_executions_total",
			"Task handler executions, by result: ok (done), transient (retried later), poison (DEAD), canceled "+
				"(cut off: outcome unknown, executed again with the same key).", "type", "result"),
		task: histogram("ferry_task_duration_seconds",
			"Duration of one task handler execution, by result.", "type", "result"),
	}
	for _, col := range []prometheus.Collector{m.ops, m.opDuration, m.received, m.settled, m.deliveries, m.handleDuration,
		m.inFlight, m.tasks, m.task, m.rewinds, m.rewound} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("ferryprom: %w (one ConsumerMetrics serves every consumer of a process: create it once)", err)
			}
			return nil, fmt.Errorf("ferryprom: %w", err)
		}
	}
	return m, nil
}

// consumerSeries holds one consumer's children, resolved once.
type consumerSeries struct {
	ops        [len(inboxOutcomes)]prometheus.Counter
	opDuration [len(inboxOutcomes)]prometheus.Observer
	handled    resultSeries
	inFlight   prometheus.Gauge
	received   prometheus.Counter
	rewinds    prometheus.Counter
	rewound    prometheus.Counter
	settled    [len(settleActions)]prometheus.Counter
}

// resultSeries holds a counter and a histogram per result.
type resultSeries struct {
	count    [numResults]prometheus.Counter
	duration [numResults]prometheus.Observer
}

func newResultSeries(c *prometheus.CounterVec, h *prometheus.HistogramVec, label string) *resultSeries {
	s := &resultSeries{}
	for i, r := range resultNames {
		s.count[i], s.duration[i] = c.WithLabelValues(label, r), h.WithLabelValues(label, r)
	}
	return s
}

func (s *resultSeries) observe(r int, took time.Duration) {
	s.count[r].Inc()
	s.duration[r].Observe(took.Seconds())
}

// Consumer initialises the series of consumer, so that they exist at zero
// before its first delivery (an alert on an increase needs the series to
// exist before it). The hooks and Handler call it on their own.
func (m *ConsumerMetrics) Consumer(consumer string) {
	m.consumer(consumer)
}

func (m *ConsumerMetrics) consumer(name string) *consumerSeries {
	if s, ok := m.consumers.Load(name); ok {
		return s.(*consumerSeries)
	}
	s := &consumerSeries{handled: *newResultSeries(m.deliveries, m.handleDuration, name),
		inFlight: m.inFlight.WithLabelValues(name), received: m.received.WithLabelValues(name),
		rewinds: m.rewinds.WithLabelValues(name), rewound: m.rewound.WithLabelValues(name)}
	for a := ferrybroker.ActionAcked; a <= ferrybroker.ActionLeft; a++ {
		s.settled[a] = m.settled.WithLabelValues(name, settleActions[a])
	}
	for o := ferry.InboxApplied; o <= ferry.InboxStale; o++ {
		s.ops[o] = m.ops.WithLabelValues(name, inboxOutcomes[o])
		s.opDuration[o] = m.opDuration.WithLabelValues(name, inboxOutcomes[o])
	}
	actual, _ := m.consumers.LoadOrStore(name, s)
	return actual.(*consumerSeries)
}

// OnInbox implements ferry.HookInbox. An operation that ended in an error
// (its transaction rolled back; the delivery is retried) has no outcome and
// is not counted here: Handler counts it as transient.
func (m *ConsumerMetrics) OnInbox(consumer string, outcome ferry.InboxOutcome, took time.Duration) {
	if outcome < ferry.InboxApplied || outcome > ferry.InboxStale {
		// An outcome this version does not know: counted under its name.
		m.ops.WithLabelValues(consumer, outcome.String()).Inc()
		m.opDuration.WithLabelValues(consumer, outcome.String()).Observe(took.Seconds())
		return
	}
	s := m.consumer(consumer)
	s.ops[outcome].Inc()
	s.opDuration[outcome].Observe(took.Seconds())
}

// OnRewound implements ferrybroker.HookRewound.
func (m *ConsumerMetrics) OnRewound(consumer string, r ferrybroker.Rewind) {
	s := m.consumer(consumer)
	s.rewinds.Inc()
	s.rewound.Add(float64(r.Records()))
}

// OnDelivered implements ferrybroker.HookDelivered.
func (m *ConsumerMetrics) OnDelivered(consumer string, _ *ferrybroker.Delivery) {
	m.consumer(consumer).received.Inc()
}

// OnHandleStart implements ferrybroker.HookHandleStart: the call is in
// flight until OnHandled.
func (m *ConsumerMetrics) OnHandleStart(ctx context.Context, consumer string, _ *ferrybroker.Delivery) context.Context {
	m.consumer(consumer).inFlight.Inc()
	return ctx
}

// OnHandled implements ferrybroker.HookHandled: the call is counted by its
// result (ok, transient, poison, canceled, as ferrybroker.Handler defines
// them) and timed.
func (m *ConsumerMetrics) OnHandled(ctx context.Context, consumer string, _ *ferrybroker.Delivery, err error, took time.Duration) {
	s := m.consumer(consumer)
	s.inFlight.Dec()
	s.handled.observe(result(ctx, err), took)
}

// OnSettled implements ferrybroker.HookSettled.
func (m *ConsumerMetrics) OnSettled(consumer string, _ *ferrybroker.Delivery, st ferrybroker.Settlement) {
	if st.Action < ferrybroker.ActionAcked || st.Action > ferrybroker.ActionLeft {
		m.settled.WithLabelValues(consumer, st.Action.String()).Inc()
		return
	}
	m.consumer(consumer).settled[st.Action].Inc()
}

// Handler wraps a broker handler of consumer for a consumer that takes no
// hooks: each call is counted by its result, timed, and counted in flight
// while it runs, as the handle hooks do. h's behaviour is unchanged. With
// ferryamqp's or ferrynats' consumers, pass m in ConsumerConfig.Hooks
// instead, which also counts what the consumer did with each delivery;
// doing both counts every call twice.
func (m *ConsumerMetrics) Handler(consumer string, h ferrybroker.Handler) ferrybroker.Handler {
	m.consumer(consumer)
	return func(ctx context.Context, d *ferrybroker.Delivery) error {
		ctx = m.OnHandleStart(ctx, consumer, d)
		start := time.Now()
		err := h(ctx, d)
		m.OnHandled(ctx, consumer, d, err, time.Since(start))
		return err
	}
}

// Task wraps the handler of one task type: each execution is counted by
// its result (ok: done; transient: retried by the worker's retry policy;
// poison: DEAD; canceled: cut off, outcome unknown, executed again with the
// same key) and timed. h's behaviour is unchanged.
func (m *ConsumerMetrics) Task(taskType string, h ferry.TaskHandler) ferry.TaskHandler {
	s := m.taskType(taskType)
	return func(ctx context.Context, t ferry.Task) error {
		start := time.Now()
		err := h(ctx, t)
		s.observe(result(ctx, err), time.Since(start))
		return err
	}
}

// Tasks wraps every handler of a task worker (see Task), for
// ferry.NewTaskWorker:
//
//	worker, err := ferry.NewTaskWorker(tasks, metrics.Tasks(handlers), cfg)
func (m *ConsumerMetrics) Tasks(handlers map[string]ferry.TaskHandler) map[string]ferry.TaskHandler {
	out := make(map[string]ferry.TaskHandler, len(handlers))
	for typ, h := range handlers {
		out[typ] = m.Task(typ, h)
	}
	return out
}

func (m *ConsumerMetrics) taskType(name string) *resultSeries {
	if s, ok := m.taskTypes.Load(name); ok {
		return s.(*resultSeries)
	}
	actual, _ := m.taskTypes.LoadOrStore(name, newResultSeries(m.tasks, m.task, name))
	return actual.(*resultSeries)
}
