package ferryprom_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// matching returns the series of name whose labels include labels (name,
// value pairs) in g.
func matching(t *testing.T, g prometheus.Gatherer, name string, labels ...string) []*dto.Metric {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// series finds the first series of name whose labels include labels.
func series(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (*dto.Metric, bool) {
	t.Helper()
	ms := matching(t, g, name, labels...)
	if len(ms) == 0 {
		return nil, false
	}
	return ms[0], true
}

// value returns a counter's or gauge's value, or a histogram's sample
// count, summed over the series that match (a counter's destinations, say);
// -1 when none does.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	ms := matching(t, g, name, labels...)
	if len(ms) == 0 {
		return -1
	}
	var sum float64
	for _, m := range ms {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		default:
			t.Fatalf("%s: unexpected metric type", name)
		}
	}
	return sum
}

func histSum(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m, ok := series(t, g, name, labels...)
	require.True(t, ok, "%s %v is absent", name, labels)
	return m.Histogram.GetSampleSum()
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, why func() string) {
	t.Helper()
	testsvc.WaitFor(t, d, cond, why)
}

// bundle is one outbox table on a real database, a JetStream stream on the
// real NATS server, and a registry with ferry's metrics.
type bundle struct {
	ctx     context.Context
	st      testsvc.SQLStore
	ob      *ferry.Outbox[*sql.Tx]
	stream  string
	subject string
	reg     *prometheus.Registry
	m       *ferryprom.Metrics
	table   string
}

func setup(t *testing.T, kind string) *bundle {
	t.Helper()
	b := &bundle{ctx: testsvc.Context(t, 3*time.Minute), st: testsvc.Store(t, kind), reg: prometheus.NewRegistry()}
	var prefix string
	b.stream, prefix = testsvc.JetStreamStream(t, testsvc.NATS(t))
	b.subject = prefix + ".events"
	b.table = b.st.Driver.Table()
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	b.m, err = ferryprom.New(b.reg, nil)
	require.NoError(t, err)
	return b
}

func (b *bundle) enqueue(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := b.ob.EnqueueTx(b.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return ids
}

func (b *bundle) event(i int) ferry.Event {
	return ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), Type: "OrderPaid",
		Payload: json.RawMessage(`{}`), Destination: b.subject}
}

func (b *bundle) relay(t *testing.T, url string, cfg ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	return b.relayFault(t, url, cfg, nil)
}

// relayFault starts a relay whose fault points call fault (ferryfault).
func (b *bundle) relayFault(t *testing.T, url string, cfg ferry.RelayConfig, fault ferryfault.Func) *ferry.Relay {
	t.Helper()
	pub, err := ferrynats.Dial(b.ctx, url, &ferrynats.DialConfig{Config: ferrynats.Config{Stream: b.stream}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	cfg.Hooks = append(cfg.Hooks, b.m)
	r, err := ferry.NewRelay(b.st.Driver, pub, &cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(b.ctx, fault)))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func (b *bundle) collector(t *testing.T, cfg *ferryprom.OutboxConfig) *ferryprom.OutboxCollector {
	t.Helper()
	c, err := ferryprom.NewOutboxCollector(b.reg, []ferrystore.Store{b.st.Driver}, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func (b *bundle) dump(t *testing.T) func() string {
	return func() string {
		families, err := b.reg.Gather()
		require.NoError(t, err)
		var s strings.Builder
		for _, f := range families {
			for _, m := range f.GetMetric() {
				fmt.Fprintf(&s, "%s %v\n", f.GetName(), m.String())
			}
		}
		return s.String()
	}
}

// The key SLO: while the broker is unreachable the age of the oldest
// pending event grows, attempts end unknown and are retried; once the
// broker is back, every event is confirmed and the age falls to zero.
func TestOldestPendingAgeGrowsWhileTheBrokerIsDownAndFallsAfter(t *testing.T) {
	// serial: it cuts the broker's network and follows a gauge over the outage.
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			b := setup(t, kind)
			natsURL, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvNATS))
			r := b.relay(t, natsURL, ferry.RelayConfig{
				PollInterval: 20 * time.Millisecond, Lease: 2 * time.Second, PublishTimeout: 150 * time.Millisecond,
				Retry: ferry.ExponentialBackoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, MaxAttempts: 1000},
			})
			// Polls every 500 ms, each given 450 ms: the test asserts that every
			// poll succeeds (ferry_outbox_up), which a loaded machine must not
			// turn false by taking longer than a tight timeout.
			b.collector(t, &ferryprom.OutboxConfig{Interval: 500 * time.Millisecond, Timeout: 450 * time.Millisecond, Destinations: 10})
			b.m.Table(b.table) // the relay's series exist before its first hook call
			g, tbl := b.reg, []string{"table", b.table}
			v := func(name string, labels ...string) float64 { return value(t, g, name, append(labels, tbl...)...) }

			proxy.Cut()
			const n = 5
			events := make([]ferry.Event, n)
			for i := range events {
				events[i] = b.event(i)
			}
			ids := b.enqueue(t, events...)

			// Down: the age grows, and the relay, which sees its publisher
			// disconnected, claims nothing: no attempt is spent (but for one
			// claim that may have raced the client noticing the cut).
			waitFor(t, 30*time.Second, func() bool { return v("ferry_outbox_oldest_pending_age_seconds") > 0 }, b.dump(t))
			first := v("ferry_outbox_oldest_pending_age_seconds")
			waitFor(t, 30*time.Second, func() bool { return v("ferry_outbox_oldest_pending_age_seconds") >= first+0.3 }, b.dump(t))
			require.Equal(t, float64(n), v("ferry_outbox_events", "status", "new")+v("ferry_outbox_events", "status", "sending"))
			require.Equal(t, float64(n), v("ferry_outbox_destination_pending_events", "destination", b.subject))
			require.Greater(t, v("ferry_outbox_destination_oldest_pending_age_seconds", "destination", b.subject), 0.0)
			require.Zero(t, v("ferry_outbox_events", "status", "dead"))
			require.Equal(t, 1.0, v("ferry_outbox_up"))
			require.LessOrEqual(t, v("ferry_relay_retries_total"), float64(n), "the outage spent attempts")
			// A destination's series appear with its first publish.
			require.LessOrEqual(t, v("ferry_relay_publish_outcomes_total", "outcome", "confirmed"), 0.0)
			require.LessOrEqual(t, v("ferry_relay_sent_total"), 0.0)
			require.Zero(t, v("ferry_relay_commit_to_confirm_seconds"))
			require.LessOrEqual(t, v("ferry_relay_dead_total"), 0.0)

			// Back: everything is confirmed, nothing is pending.
			downFor := time.Duration(v("ferry_outbox_oldest_pending_age_seconds") * float64(time.Second))
			proxy.Restore()
			waitFor(t, 60*time.Second, func() bool {
				return v("ferry_relay_sent_total") == n && v("ferry_outbox_oldest_pending_age_seconds") == 0
			}, b.dump(t))
			require.Zero(t, v("ferry_outbox_events", "status", "new")+v("ferry_outbox_events", "status", "sending"))
			require.Equal(t, -1.0, v("ferry_outbox_destination_pending_events", "destination", b.subject), "no pending destination left")
			require.Equal(t, float64(n), v("ferry_relay_publish_outcomes_total", "outcome", "confirmed"))
			require.Equal(t, float64(n), v("ferry_relay_commit_to_confirm_seconds"))
			require.GreaterOrEqual(t, histSum(t, g, "ferry_relay_commit_to_confirm_seconds", tbl...), n*downFor.Seconds(),
				"every event waited at least as long as the outage was measured")
			require.Equal(t, float64(n), v("ferry_relay_confirm_attempts"))
			require.LessOrEqual(t, histSum(t, g, "ferry_relay_confirm_attempts", tbl...), float64(2*n),
				"an event spent at most the attempt in flight at the cut")
			st := r.Stats()
			require.Equal(t, float64(st.Released), v("ferry_relay_released_total"))
			require.Equal(t, float64(st.Claims), v("ferry_relay_claims_total"))
			require.Equal(t, float64(st.Claims), v("ferry_relay_claim_duration_seconds"))
			require.Equal(t, float64(st.Claimed), v("ferry_relay_claimed_events_total"))
			require.Equal(t, float64(st.Retried), v("ferry_relay_retries_total"))
			require.Equal(t, float64(st.Claims), v("ferry_relay_publish_batch_duration_seconds"), "one publish per claim")
			require.Len(t, testsvc.ReadStream(t, testsvc.NATS(t), b.stream, n, 30*time.Second), n)
			for _, id := range ids {
				row, err := b.st.Driver.Get(b.ctx, id)
				require.NoError(t, err)
				require.EqualValues(t, "SENT", row.Status)
			}
		})
	}
}

// Every other outcome and transition moves its own counter.
func TestMetricsCountEachOutcomeAndTransition(t *testing.T) {
	t.Parallel()
	t.Run("ReturnedThenDead", func(t *testing.T) {
		b := setup(t, "postgres")
		ev := b.event(1)
		ev.Destination = testsvc.Name("nowhere") + ".x" // no stream listens
		b.enqueue(t, ev)
		b.relay(t, testsvc.URL(testsvc.EnvNATS), ferry.RelayConfig{PollInterval: 10 * time.Millisecond,
			Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 2}})
		b.collector(t, &ferryprom.OutboxConfig{Interval: 200 * time.Millisecond, Timeout: 180 * time.Millisecond})
		g, tbl := b.reg, []string{"table", b.table}
		v := func(name string, labels ...string) float64 { return value(t, g, name, append(labels, tbl...)...) }
		waitFor(t, 30*time.Second, func() bool { return v("ferry_outbox_events", "status", "dead") == 1 }, b.dump(t))
		require.Equal(t, 2.0, v("ferry_relay_publish_outcomes_total", "outcome", "returned", "destination", ev.Destination))
		require.Zero(t, v("ferry_relay_publish_outcomes_total", "outcome", "confirmed", "destination", ev.Destination),
			"a destination's outcome series all exist from its first publish")
		require.Equal(t, 1.0, v("ferry_relay_retries_total"))
		require.Equal(t, 1.0, v("ferry_relay_dead_total", "destination", ev.Destination))
		require.Zero(t, v("ferry_outbox_oldest_pending_age_seconds"), "a DEAD event is not pending")
	})

	t.Run("Rejected", func(t *testing.T) {
		b := setup(t, "postgres")
		// A stream that refuses messages over 64 bytes.
		js, err := jetstream.New(testsvc.NATS(t))
		require.NoError(t, err)
		subject := testsvc.Name("small") + ".x"
		stream := testsvc.Name("SMALL_")
		_, err = js.CreateStream(b.ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, MaxMsgSize: 64})
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		ev := b.event(1)
		ev.Destination, ev.Payload = subject, json.RawMessage(`{"pad":"`+strings.Repeat("x", 200)+`"}`)
		b.enqueue(t, ev)
		b.relay(t, testsvc.URL(testsvc.EnvNATS), ferry.RelayConfig{PollInterval: 10 * time.Millisecond,
			Retry: ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 1}})
		v := func(name string, labels ...string) float64 {
			return value(t, b.reg, name, append(labels, "table", b.table)...)
		}
		waitFor(t, 30*time.Second, func() bool { return v("ferry_relay_dead_total") == 1 }, b.dump(t))
		require.Equal(t, 1.0, v("ferry_relay_publish_outcomes_total", "outcome", "rejected"))
		require.Zero(t, v("ferry_relay_publish_outcomes_total", "outcome", "unknown"))
	})

	// A relay stalls after publishing past its lease; the sweeper returns
	// the lease, another relay republishes (the broker reports the
	// duplicate) and marks it SENT; the stalled relay's late mark is
	// fenced.
	t.Run("LeaseExpiryDuplicateAndFence", func(t *testing.T) {
		b := setup(t, "postgres")
		b.enqueue(t, b.event(1))
		paused, resume := make(chan struct{}), make(chan struct{})
		var once, resumeOnce sync.Once
		release := func() { resumeOnce.Do(func() { close(resume) }) }
		b.relayFault(t, testsvc.URL(testsvc.EnvNATS), ferry.RelayConfig{
			// One lane: a second one would claim the swept event again
			// and stall in the same fault point, a second expiry. This
			// relay leads the table's maintenance (it started first): its
			// sweeper returns the event its stalled lane holds.
			Lanes: 1, Lease: 500 * time.Millisecond, PublishTimeout: 400 * time.Millisecond, SweepInterval: 20 * time.Millisecond,
		}, func(ctx context.Context, point string) error {
			if point == ferryfault.RelayAfterPublish {
				once.Do(func() { close(paused); <-resume })
			}
			return nil
		})
		<-paused
		t.Cleanup(release) // runs before the first relay's stop: a failure must not hang it
		b.relay(t, testsvc.URL(testsvc.EnvNATS), ferry.RelayConfig{SweepInterval: 20 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, Retry: ferry.ExponentialBackoff{Initial: 5 * time.Millisecond}})
		v := func(name string, labels ...string) float64 {
			return value(t, b.reg, name, append(labels, "table", b.table)...)
		}
		waitFor(t, 30*time.Second, func() bool { return v("ferry_relay_sent_total", "destination", b.subject) == 1 }, b.dump(t))
		require.Equal(t, 1.0, v("ferry_relay_lease_expiries_total"))
		require.Equal(t, 1.0, v("ferry_relay_retries_total"), "the expired lease went back to NEW")
		require.Equal(t, 1.0, v("ferry_relay_publish_duplicates_total"))
		require.Equal(t, 2.0, v("ferry_relay_publish_outcomes_total", "outcome", "confirmed"))
		require.Zero(t, v("ferry_relay_fenced_total"))
		release()
		waitFor(t, 10*time.Second, func() bool { return v("ferry_relay_fenced_total") == 1 }, b.dump(t))
		require.Equal(t, 1.0, v("ferry_relay_sent_total", "destination", b.subject), "the fenced mark is not a second SENT")
	})
}

// When the database cannot be reached, the collector says so instead of
// reporting a stale age, and recovers when it is back; a scrape never
// waits for the database.
func TestOutboxCollectorReportsAnUnreachableDatabase(t *testing.T) {
	// serial: it cuts the database's network.
	st := testsvc.Store(t, "postgres")
	ctx := testsvc.Context(t, time.Minute)
	dbURL, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvPostgres))
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	store, err := ferrypg.Open(ctx, dbURL+sep+"connect_timeout=2", &ferrypg.Config{Table: st.Driver.Table()})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	c, err := ferryprom.NewOutboxCollector(reg, []ferrystore.Store{store}, &ferryprom.OutboxConfig{Interval: time.Hour, Timeout: 3 * time.Second})
	require.NoError(t, err)
	tbl := []string{"table", store.Table()}
	v := func(name string, labels ...string) float64 { return value(t, reg, name, append(labels, tbl...)...) }

	require.Equal(t, 0.0, v("ferry_outbox_up"), "never polled")
	require.Equal(t, -1.0, v("ferry_outbox_oldest_pending_age_seconds"))
	require.NoError(t, c.Poll(ctx))
	require.Equal(t, 1.0, v("ferry_outbox_up"))
	require.Equal(t, 0.0, v("ferry_outbox_oldest_pending_age_seconds"))
	polled := v("ferry_outbox_last_poll_timestamp_seconds")
	require.InDelta(t, float64(time.Now().Unix()), polled, 60)

	proxy.Cut()
	err = c.Poll(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "poll outbox "+store.Table())
	start := time.Now()
	require.Equal(t, 0.0, v("ferry_outbox_up"))
	require.Less(t, time.Since(start), 3*time.Second, "a scrape does not wait for the database (a poll has 3 s)")
	require.Equal(t, -1.0, v("ferry_outbox_oldest_pending_age_seconds"), "no stale age")
	require.Equal(t, -1.0, v("ferry_outbox_events", "status", "new"))
	require.Equal(t, 1.0, v("ferry_outbox_poll_errors_total"))
	require.Equal(t, polled, v("ferry_outbox_last_poll_timestamp_seconds"), "the last success stays visible")

	proxy.Restore()
	require.NoError(t, c.Poll(ctx))
	require.Equal(t, 1.0, v("ferry_outbox_up"))
	require.Equal(t, 0.0, v("ferry_outbox_events", "status", "new"))
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	_, err := ferryprom.New(nil, nil)
	require.ErrorContains(t, err, "Registerer is nil")
	_, err = ferryprom.New(prometheus.NewRegistry(), &ferryprom.Config{LatencyBuckets: []float64{}})
	require.ErrorContains(t, err, "Config.LatencyBuckets")
	reg := prometheus.NewRegistry()
	_, err = ferryprom.New(reg, nil)
	require.NoError(t, err)
	_, err = ferryprom.New(reg, nil)
	require.ErrorContains(t, err, "create it once")

	st := testsvc.Store(t, "sqlite")
	for _, c := range []struct {
		cfg  ferryprom.OutboxConfig
		want string
	}{
		{ferryprom.OutboxConfig{Interval: time.Millisecond}, "OutboxConfig.Interval"},
		{ferryprom.OutboxConfig{Interval: time.Second, Timeout: 2 * time.Second}, "OutboxConfig.Timeout"},
		{ferryprom.OutboxConfig{Destinations: 5000}, "OutboxConfig.Destinations"},
	} {
		_, err := ferryprom.NewOutboxCollector(prometheus.NewRegistry(), []ferrystore.Store{st.Driver}, &c.cfg)
		require.ErrorContains(t, err, c.want)
	}
	_, err = ferryprom.NewOutboxCollector(prometheus.NewRegistry(), []ferrystore.Store{st.Driver, st.Driver}, nil)
	require.ErrorContains(t, err, "given twice")
}
