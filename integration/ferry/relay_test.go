package ferry_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// relayBundle is one outbox table on a real database and one JetStream
// stream on the real NATS server.
type relayBundle struct {
	ctx     context.Context
	st      testsvc.SQLStore
	ob      *ferry.Outbox[*sql.Tx]
	nc      *nats.Conn
	stream  string
	subject string
}

func setupRelay(t testing.TB, kind string) *relayBundle {
	t.Helper()
	b := &relayBundle{ctx: testsvc.Context(t, 10*time.Minute), st: testsvc.Store(t, kind), nc: testsvc.NATS(t)}
	var prefix string
	b.stream, prefix = testsvc.JetStreamStream(t, b.nc)
	b.subject = prefix + ".events"
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	return b
}

// enqueue writes n events, 100 per transaction; aggregate(i) names event i's
// aggregate. It returns the ids in enqueue order.
func (b *relayBundle) enqueue(t testing.TB, n int, aggregate func(i int) string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 100 {
		tx, err := b.st.DB.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		batch := make([]ferry.Event, 0, 100)
		for i := start; i < min(start+100, n); i++ {
			batch = append(batch, ferry.Event{
				AggregateType: "order", AggregateID: aggregate(i), Type: "OrderPaid",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Destination: b.subject,
			})
		}
		got, err := b.ob.EnqueueTx(b.ctx, tx, batch...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		ids = append(ids, got...)
	}
	return ids
}

// publisher returns a JetStream publisher on its own connection, wrapped to
// count publishes per event id.
func (b *relayBundle) publisher(t testing.TB) *countingPublisher {
	t.Helper()
	p, err := ferrynats.Dial(b.ctx, testsvc.URL(testsvc.EnvNATS), &ferrynats.DialConfig{Config: ferrynats.Config{Stream: b.stream}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return &countingPublisher{inner: p, counts: map[string]int{}}
}

func (b *relayBundle) relay(t testing.TB, pub ferrybroker.Publisher, cfg *ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	return b.relayFault(t, pub, cfg, nil)
}

// relayFault starts a relay whose fault points call fault (ferryfault).
func (b *relayBundle) relayFault(t testing.TB, pub ferrybroker.Publisher, cfg *ferry.RelayConfig, fault ferryfault.Func) *ferry.Relay {
	t.Helper()
	r, err := ferry.NewRelay(b.st.Driver, pub, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(b.ctx, fault)))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// waitSettled waits until no event is NEW or SENDING.
func (b *relayBundle) waitSettled(t testing.TB, d time.Duration) ferrystore.Stats {
	t.Helper()
	var st ferrystore.Stats
	testsvc.WaitFor(t, d, func() bool {
		var err error
		st, err = b.st.Driver.Stats(b.ctx)
		require.NoError(t, err)
		return st.New == 0 && st.Sending == 0
	}, func() string { return fmt.Sprintf("still pending: %+v", st) })
	return st
}

func (b *relayBundle) read(t *testing.T, want int) []testsvc.StreamMsg {
	t.Helper()
	return testsvc.ReadStream(t, b.nc, b.stream, want, time.Minute)
}

// countingPublisher counts how often each event id was handed to the
// broker; inject, when set, may replace a message's outcome (a fault at a
// named point: the broker itself is real).
type countingPublisher struct {
	inner  ferrybroker.Publisher
	mu     sync.Mutex
	counts map[string]int
	inject func(m *ferrytype.Message) (res ferrytype.PublishResult, skipBroker, override bool)
}

func (p *countingPublisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	var send []ferrytype.Message
	var at []int
	overrides := map[int]ferrytype.PublishResult{}
	for i := range msgs {
		if p.inject != nil {
			if r, skip, override := p.inject(&msgs[i]); override {
				overrides[i] = r
				if skip {
					res[i] = r
					continue
				}
			}
		}
		send = append(send, msgs[i])
		at = append(at, i)
	}
	p.mu.Lock()
	for _, m := range send {
		p.counts[m.ID]++
	}
	p.mu.Unlock()
	for j, r := range p.inner.Publish(ctx, send) {
		res[at[j]] = r
		if o, ok := overrides[at[j]]; ok {
			res[at[j]] = o
		}
	}
	return res
}

func (p *countingPublisher) Close() error { return p.inner.Close() }

func (p *countingPublisher) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[id]
}

func fastRetry() ferry.RetryPolicy {
	return ferry.ExponentialBackoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 50}
}

// Four relays drain 20,000 events (SQLite: 5,000) of 997 aggregates: each
// event is handed to the broker once and stored once, none is lost.
// SQLite has one writer, for which the four relays contend whatever the
// count, and its engine is Go code that -race slows about fifty-fold: a
// quarter of the events exercises the same contention in a quarter of
// the time.
func TestRelayFourRelaysDrainEveryEventOnce(t *testing.T) {
	testsvc.Slow(t, "a 20,000-event drain")
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			total := 20000
			if kind == "sqlite" {
				total = 5000
			}
			ids := b.enqueue(t, total, func(i int) string { return fmt.Sprint(i % 997) })
			pubs := make([]*countingPublisher, 4)
			relays := make([]*ferry.Relay, 4)
			for i := range relays {
				pubs[i] = b.publisher(t)
				relays[i] = b.relay(t, pubs[i], &ferry.RelayConfig{BatchSize: 100, PollInterval: 20 * time.Millisecond})
			}
			st := b.waitSettled(t, 8*time.Minute)
			require.Zero(t, st.Dead)
			var confirmed, fenced int64
			for _, r := range relays {
				require.NoError(t, r.Stop(b.ctx))
				s := r.Stats()
				confirmed += s.Confirmed
				fenced += s.Fenced
				require.Zero(t, s.Unknown+s.Returned+s.Rejected+s.Duplicates, "no fault, no retry: %+v", s)
			}
			require.EqualValues(t, total, confirmed)
			require.Zero(t, fenced)
			for _, id := range ids {
				n := 0
				for _, p := range pubs {
					n += p.count(id)
				}
				require.Equal(t, 1, n, "event %s handed to the broker %d times", id, n)
			}
			got := b.read(t, total)
			require.Len(t, got, total)
			seen := make(map[string]bool, total)
			for _, m := range got {
				require.False(t, seen[m.ID], "duplicate message %s in the stream", m.ID)
				seen[m.ID] = true
			}
			for _, id := range ids {
				require.True(t, seen[id], "event %s lost", id)
			}
		})
	}
}

func TestRelayLateMarkIsFenced(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			id := b.enqueue(t, 1, func(int) string { return "1" })[0]

			// Relay A publishes, then its one lane stalls before recording
			// the outcome past its lease. A started first and beats on: it
			// leads the table's maintenance, and its sweeper returns the
			// event; its stalled lane cannot claim it again.
			paused, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			relayA := b.relayFault(t, b.publisher(t), &ferry.RelayConfig{
				Lanes: 1, Lease: 500 * time.Millisecond, PublishTimeout: 400 * time.Millisecond, SweepInterval: 20 * time.Millisecond,
			}, func(ctx context.Context, point string) error {
				if point == ferryfault.RelayAfterPublish {
					once.Do(func() { close(paused); <-resume })
				}
				return nil
			})
			<-paused
			// Relay B claims the swept event, publishes again and marks it.
			relayB := b.relay(t, b.publisher(t), &ferry.RelayConfig{
				SweepInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: fastRetry(),
			})
			testsvc.WaitFor(t, 30*time.Second, func() bool { return relayB.Stats().Confirmed == 1 },
				func() string { return fmt.Sprintf("B: %+v", relayB.Stats()) })
			rowB, err := b.st.Driver.Get(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusSent, rowB.Status)

			close(resume)
			testsvc.WaitFor(t, 10*time.Second, func() bool { return relayA.Stats().Fenced == 1 },
				func() string { return fmt.Sprintf("A: %+v", relayA.Stats()) })
			require.Zero(t, relayA.Stats().Confirmed, "A's late mark changed nothing")
			row, err := b.st.Driver.Get(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, rowB.SentAt, row.SentAt, "B's outcome stands")
			require.Equal(t, 2, row.Attempt)
			require.Equal(t, int64(1), relayB.Stats().Duplicates, "JetStream reports B's publish as the duplicate it is")
			got := b.read(t, 1)
			require.Len(t, got, 1)
			require.Equal(t, id, got[0].ID)
		})
	}
}

func TestRelayCrashWindows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		point     string
		hits      int64 // the point is reached once per batch or once per message
		duplicate bool  // the broker got the event twice
	}{
		{ferryfault.RelayAfterClaim, 1, false},
		{ferryfault.RelayAfterPublish, 1, true},
		{ferryfault.RelayLoseConfirm, 10, true},
	}
	for _, kind := range testsvc.Kinds {
		for _, c := range cases {
			t.Run(kind+"/"+c.point, func(t *testing.T) {
				t.Parallel()
				b := setupRelay(t, kind)
				ids := b.enqueue(t, 10, func(i int) string { return fmt.Sprint(i) })
				var hit atomic.Int64
				pub := b.publisher(t)
				// One lane: the first claim takes all ten events, so the
				// one injected batch crash hits every event. The lease
				// leaves the good attempt seconds to publish and mark on a
				// loaded machine: a lease that ran out under it would make
				// a third attempt, and this test counts exactly two.
				r := b.relayFault(t, pub, &ferry.RelayConfig{
					Lanes: 1, Lease: 3 * time.Second, PublishTimeout: time.Second,
					SweepInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: fastRetry(),
				}, func(ctx context.Context, point string) error {
					if point == c.point && hit.Add(1) <= c.hits {
						return errors.New("injected crash")
					}
					return nil
				})
				b.waitSettled(t, time.Minute)
				require.NoError(t, r.Stop(b.ctx))
				st := r.Stats()
				require.Equal(t, int64(10), st.Confirmed)
				wantDup := int64(0)
				if c.duplicate {
					wantDup = 10
				}
				require.Equal(t, wantDup, st.Duplicates, "duplicates reported by JetStream: %+v", st)
				got := b.read(t, 10)
				require.Len(t, got, 10, "the stream holds each event once")
				for i, id := range ids {
					row, err := b.st.Driver.Get(b.ctx, id)
					require.NoError(t, err)
					require.Equal(t, ferrytype.StatusSent, row.Status)
					require.Equal(t, 2, row.Attempt, "event %d: one crashed attempt, one good one", i)
					want := 1
					if c.duplicate {
						want = 2
					}
					require.Equal(t, want, pub.count(id), "publishes of event %d with id %s", i, id)
				}
			})
		}
	}
}

func TestRelayOrderedUnderFailures(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t, kind)
			aggregates, perAggregate := 1000, 10
			if kind == "sqlite" {
				// SQLite's ordered claim reads past the rows of blocked
				// aggregates (no SKIP LOCKED, one writer): 10,000 events
				// take minutes under -race on two loaded cores. A quarter
				// of them exercises the same windows.
				aggregates = 250
			}
			// Events of one aggregate are enqueued in separate
			// transactions, interleaved with other aggregates.
			b.enqueue(t, aggregates*perAggregate, func(i int) string { return fmt.Sprint(i % aggregates) })
			var relays []*ferry.Relay
			var pubs []*countingPublisher
			var injected atomic.Int64
			for i := 0; i < 4; i++ {
				pub := b.publisher(t)
				pub.inject = func(m *ferrytype.Message) (ferrytype.PublishResult, bool, bool) {
					switch n := rand.IntN(100); {
					case n < 5: // refused before it reached the broker
						injected.Add(1)
						return ferrytype.Rejected(errors.New("injected reject")), true, true
					case n < 10: // stored by the broker, confirm lost
						injected.Add(1)
						return ferrytype.Unknown(errors.New("injected lost confirm")), false, true
					}
					return ferrytype.PublishResult{}, false, false
				}
				pubs = append(pubs, pub)
				relays = append(relays, b.relay(t, pub, &ferry.RelayConfig{
					Ordered: true, BatchSize: 200, PollInterval: 10 * time.Millisecond, Retry: fastRetry(),
				}))
			}
			st := b.waitSettled(t, 8*time.Minute)
			require.Zero(t, st.Dead)
			for _, r := range relays {
				require.NoError(t, r.Stop(b.ctx))
			}
			require.Positive(t, injected.Load(), "faults were injected")
			published := func(id string) int {
				n := 0
				for _, p := range pubs {
					n += p.count(id)
				}
				return n
			}
			// The stream holds every event at least once, and an event at
			// most as often as a relay handed it to the broker: a second
			// copy is an event published again after its outcome was
			// unknown (a lost confirm, or a lease that ended before the
			// outcome was recorded), past JetStream's duplicate window when
			// the run is slow. A copy comes before the aggregate's next
			// event: ordered mode publishes the next one only after this
			// one was confirmed and marked.
			got := b.read(t, aggregates*perAggregate)
			seen := map[string]int{}
			last := map[string]int64{}
			for _, m := range got {
				seen[m.ID]++
				require.LessOrEqual(t, seen[m.ID], published(m.ID), "event %s is at the broker more often than it was published", m.ID)
				if seen[m.ID] > 1 {
					require.Equal(t, last[m.AggregateID], m.Sequence,
						"aggregate %s: a copy of event %d came after event %d", m.AggregateID, m.Sequence, last[m.AggregateID])
					continue
				}
				require.Greater(t, m.Sequence, last[m.AggregateID],
					"aggregate %s: event %d published after event %d", m.AggregateID, m.Sequence, last[m.AggregateID])
				last[m.AggregateID] = m.Sequence
			}
			require.Len(t, seen, aggregates*perAggregate, "every event reached the broker")
			require.Len(t, last, aggregates)
			for agg, seq := range last {
				require.Equal(t, int64(perAggregate), seq, "aggregate %s", agg)
			}
		})
	}
}

func TestRelayDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := b.ob.EnqueueTx(b.ctx, tx, ferry.Event{Type: "Lost", Payload: json.RawMessage(`{}`), Destination: testsvc.Name("nowhere") + ".x"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	r := b.relay(t, b.publisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Retry:        ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 3},
	})
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Dead == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	row, err := b.st.Driver.Get(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDead, row.Status)
	require.Equal(t, 3, row.Attempt)
	require.Contains(t, row.LastError, "attempt 3: returned")
	st := r.Stats()
	require.Equal(t, int64(3), st.Returned)
	require.Equal(t, int64(2), st.Retried)
	require.Zero(t, st.Confirmed)
}

func TestRelayStopFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	id := b.enqueue(t, 1, func(int) string { return "1" })[0]
	claimed, stopCalled := make(chan struct{}), make(chan struct{})
	r, err := ferry.NewRelay(b.st.Driver, b.publisher(t), nil)
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(b.ctx, func(ctx context.Context, point string) error {
		if point == ferryfault.RelayAfterClaim {
			close(claimed)
			<-stopCalled
		}
		return nil
	})))
	<-claimed
	stopped := make(chan error)
	go func() { stopped <- r.Stop(b.ctx) }()
	close(stopCalled)
	require.NoError(t, <-stopped)
	row, err := b.st.Driver.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSent, row.Status, "Stop waited for the claimed batch to be published and marked")
	require.NoError(t, r.Stop(b.ctx), "stopping twice is safe")
	require.ErrorIs(t, r.Start(b.ctx), ferry.ErrClosed)
}

func TestRelayRetentionPurgesSentRowsOnly(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	ids := b.enqueue(t, 5, func(i int) string { return fmt.Sprint(i) })
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	later, err := b.ob.EnqueueTx(b.ctx, tx, ferry.Event{Type: "Later", Payload: json.RawMessage(`{}`), Delay: time.Hour})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	r := b.relay(t, b.publisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond, Retention: time.Millisecond, PurgeInterval: 10 * time.Millisecond, PurgeBatch: 2,
	})
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Purged == 5 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	for _, id := range ids {
		_, err := b.st.Driver.Get(b.ctx, id)
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	}
	row, err := b.st.Driver.Get(b.ctx, later[0])
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusNew, row.Status, "a pending event is never purged")
}

// countingStore signals each claim as it starts (claims) and, when
// claimed is not nil, how many events it returned as it ends; when probes
// is not nil, it signals each probe's answer there.
type countingStore struct {
	ferrystore.Driver[*sql.Tx]
	claims  chan time.Time
	claimed chan int
	probes  chan probe
}

// probe is one Store.Ready call: when it started and what it answered.
type probe struct {
	at    time.Time
	ready bool
}

func (s *countingStore) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	select {
	case s.claims <- time.Now():
	default:
	}
	msgs, err := s.Driver.Claim(ctx, p)
	if s.claimed != nil && err == nil {
		s.claimed <- len(msgs)
	}
	return msgs, err
}

func (s *countingStore) Ready(ctx context.Context) (bool, error) {
	at := time.Now()
	ok, err := s.Driver.Ready(ctx)
	if s.probes != nil && err == nil {
		select {
		case s.probes <- probe{at: at, ready: ok}:
		default:
		}
	}
	return ok, err
}

// receive returns the next value from ch, failing the test after d.
func receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		panic("unreachable")
	}
}

func TestRelayIdleProbesOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	cs := &countingStore{Driver: b.st.Driver, claims: make(chan time.Time, 100), probes: make(chan probe, 1000)}
	const interval = 40 * time.Millisecond
	r, err := ferry.NewRelay(cs, b.publisher(t), &ferry.RelayConfig{Lanes: 8, PollInterval: interval, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	defer r.Stop(b.ctx)
	receive(t, cs.claims, 10*time.Second, "claim at start")
	// The interval grows by a quarter per empty probe from 1ms: it reaches
	// PollInterval within 20 probes.
	for i := 0; i < 20; i++ {
		require.False(t, receive(t, cs.probes, 10*time.Second, "probe").ready)
	}
	first := receive(t, cs.probes, 10*time.Second, "probe").at
	var last time.Time
	for i := 0; i < 10; i++ {
		last = receive(t, cs.probes, 10*time.Second, "probe").at
	}
	// Ten more probes took at least ten intervals (less a margin for timer
	// jitter): an idle relay of eight lanes makes one query per interval.
	require.GreaterOrEqual(t, last.Sub(first), 9*interval, "an idle relay probes more than once per interval")
	select {
	case at := <-cs.claims:
		t.Fatalf("an idle relay claimed at %s although every probe found nothing", at)
	default:
	}
}

func TestRelayProbeFindsEventsOfAnotherProcess(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			b := setupRelay(t, kind)
			cs := &countingStore{Driver: b.st.Driver, claims: make(chan time.Time, 100),
				claimed: make(chan int, 100), probes: make(chan probe, 1000)}
			// No Wakeup and no LISTEN: the producer is another process,
			// and only the probe can notice its commits. One lane, so
			// that the claims come one after another.
			r, err := ferry.NewRelay(cs, b.publisher(t), &ferry.RelayConfig{DisableListen: true, Lanes: 1})
			require.NoError(t, err)
			require.NoError(t, r.Start(b.ctx))
			t.Cleanup(func() { _ = r.Stop(context.Background()) })
			require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim at start"))
			for i := 1; i <= 3; i++ {
				waitIdle(t, cs)
				b.enqueue(t, 1, func(int) string { return "1" })
				// The relay claims the event only after a probe saw it.
				deadline := time.Now().Add(30 * time.Second)
				for !receive(t, cs.probes, 10*time.Second, "probe").ready {
					require.True(t, time.Now().Before(deadline), "event %d: no probe saw it ready within 30 s; %+v", i, r.Stats())
				}
				testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == int64(i) },
					func() string { return fmt.Sprintf("%+v", r.Stats()) })
				// After a batch, the lane claims again at once (more may
				// have committed meanwhile): an event committed just then
				// is claimed without a probe. That look finds nothing.
				for receive(t, cs.claimed, 10*time.Second, "claim") != 0 {
				}
			}
		})
	}
}

// waitIdle waits until the one-lane relay over cs, whose last claim found
// nothing, is idle, so that only a probe can start its next claim: a
// probe that found nothing with no claim since (the poller does not probe
// while the lane claims or works on a batch).
func waitIdle(t *testing.T, cs *countingStore) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "the relay did not go idle within 30 s: its probes keep finding events ready")
		for len(cs.probes) > 0 {
			<-cs.probes
		}
		if p := receive(t, cs.probes, 10*time.Second, "probe"); !p.ready && len(cs.claimed) == 0 {
			return
		}
		for len(cs.claimed) > 0 {
			<-cs.claimed
		}
	}
}

// holdFirstBatch is a fault function (ferryfault) that holds the relay's first claimed
// batch after its claim until release is closed; held is closed once it
// holds it.
func holdFirstBatch() (fault ferryfault.Func, held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, point string) error {
		if point != ferryfault.RelayAfterClaim {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, held, release
}

// TestRelayClaimsWhileABatchIsInFlight: an event committed while one lane
// holds its batch (publishing, marking) is claimed and sent by another
// lane, found by the probe alone, without waiting for that batch.
func TestRelayClaimsWhileABatchIsInFlight(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			b := setupRelay(t, kind)
			fault, held, release := holdFirstBatch()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			r, err := ferry.NewRelay(b.st.Driver, b.publisher(t), &ferry.RelayConfig{Lanes: 2, DisableListen: true})
			require.NoError(t, err)
			require.NoError(t, r.Start(ferryfault.With(b.ctx, fault)))
			t.Cleanup(func() { _ = r.Stop(context.Background()) })
			first := b.enqueue(t, 1, func(int) string { return "a" })[0]
			receive(t, held, 10*time.Second, "the first batch held")
			second := b.enqueue(t, 1, func(int) string { return "b" })[0]
			testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 1 },
				func() string {
					return fmt.Sprintf("the second event was not sent while the first batch was held: %+v", r.Stats())
				})
			row, err := b.st.Driver.Get(b.ctx, second)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusSent, row.Status)
			row, err = b.st.Driver.Get(b.ctx, first)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusSending, row.Status, "the first batch is still held")
			close(release)
			testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 2 },
				func() string { return fmt.Sprintf("%+v", r.Stats()) })
		})
	}
}

// TestRelayOrderedProbeWaitsForTheBatchInFlight: in ordered mode, events
// ready behind an event in flight cannot be claimed; once a claim found
// that, the idle lanes are left alone until the batch is settled, instead
// of claiming in vain at every probe.
func TestRelayOrderedProbeWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "mysql")
	cs := &countingStore{Driver: b.st.Driver, claims: make(chan time.Time, 1000), claimed: make(chan int, 1000)}
	fault, held, release := holdFirstBatch()
	released := false
	defer func() { // before the cleanup's Stop, which waits for the held batch
		if !released {
			close(release)
		}
	}()
	// The events commit before the relay starts, so that every claim sees
	// them: whether a lane's first claim comes at its start or when the
	// probe wakes it is the scheduler's choice (on a loaded machine a lane
	// that started late claimed beside the first one, found the aggregate
	// held back, and no later claim came), and either way it is a claim
	// held back by event 1.
	ids := b.enqueue(t, 3, func(int) string { return "one" })
	r, err := ferry.NewRelay(cs, b.publisher(t), &ferry.RelayConfig{Lanes: 2, Ordered: true, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(b.ctx, fault)))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	receive(t, held, 10*time.Second, "the first batch held")
	// One claim takes event 1 (an ordered claim takes one event of an
	// aggregate), held at its publish; the other lane's claim, at its
	// start or woken by the probe that sees events 2 and 3 ready, finds
	// them held back by event 1. In either order.
	var took, heldBack int
	for took == 0 || heldBack == 0 {
		n := receive(t, cs.claimed, 10*time.Second, fmt.Sprintf("the claims of both lanes (so far: %d took event 1, %d held back)", took, heldBack))
		require.LessOrEqual(t, n, 1, "an ordered claim takes one event of the aggregate")
		if n == 1 {
			took++
		} else {
			heldBack++
		}
	}
	require.Equal(t, 1, took, "event 1 is claimed once while held")
	// Hold the batch for a while: a relay that kept trying would claim
	// about every few milliseconds. Fewer claims on a slow machine only
	// make the check easier.
	time.Sleep(300 * time.Millisecond)
	require.LessOrEqual(t, len(cs.claimed), 2, "claims in vain while event 1 was in flight")
	close(release)
	released = true
	testsvc.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 3 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	for _, id := range ids {
		row, err := b.st.Driver.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusSent, row.Status)
	}
}

// TestRelaysOnASmallPgxPoolAllProgress: relays sharing one pgx pool
// listen on connections of their own, so more relays than the pool has
// connections still claim and mark (each used to pin a pool connection
// in LISTEN: with three relays on two connections, nothing moved).
func TestRelaysOnASmallPgxPoolAllProgress(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	cfg, err := pgxpool.ParseConfig(testsvc.URL(testsvc.EnvPostgres))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := ferrypg.New(pool, &ferrypg.Config{Table: b.st.Driver.Table()})
	require.NoError(t, err)
	var relays []*ferry.Relay
	for range 3 {
		r, err := ferry.NewRelay(store, b.publisher(t), nil)
		require.NoError(t, err)
		require.NoError(t, r.Start(b.ctx))
		t.Cleanup(func() {
			// Bounded: a relay starved of connections would never stop.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = r.Stop(ctx)
		})
		relays = append(relays, r)
	}
	b.enqueue(t, 300, func(i int) string { return fmt.Sprint(i) })
	b.waitSettled(t, time.Minute)
	// A relay counts a batch as confirmed once its mark has returned: the
	// rows are SENT a moment before the counter moves.
	sent := func() int64 {
		var n int64
		for _, r := range relays {
			n += r.Stats().Confirmed
		}
		return n
	}
	testsvc.WaitFor(t, 10*time.Second, func() bool { return sent() >= 300 },
		func() string { return fmt.Sprintf("%d of 300 events counted as confirmed", sent()) })
	require.Equal(t, int64(300), sent())
}

func TestRelayWakesOnEnqueueBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "mysql") // SQLite would block the look on the writer's lock until the commit
	wake := ferry.NewWakeup()
	ob, err := ferry.NewOutbox(b.st.Driver, &ferry.OutboxConfig{Wakeup: wake})
	require.NoError(t, err)
	cs := &countingStore{Driver: b.st.Driver, claims: make(chan time.Time, 100), claimed: make(chan int, 100)}
	r, err := ferry.NewRelay(cs, b.publisher(t), &ferry.RelayConfig{Lanes: 1, PollInterval: time.Hour, MinPollInterval: time.Hour, Wakeup: wake})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim at start"))
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = ob.EnqueueTx(b.ctx, tx, ferry.Event{Type: "T", Payload: json.RawMessage(`{}`), Destination: b.subject})
	require.NoError(t, err)
	// The ring came before the commit: the look it causes ends before the
	// commit and finds nothing; the relay must look again after it.
	require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim after the ring"))
	require.NoError(t, tx.Commit())
	testsvc.WaitFor(t, 5*time.Second, func() bool { return r.Stats().Confirmed == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
}

func TestRelayWakesOnPostgresNotify(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "postgres")
	// The application's outbox notifies; the relay listens.
	notifying, err := ferrypg.NewStdlib(b.st.DB, &ferrypg.Config{Table: b.st.Driver.Table(), Notify: true})
	require.NoError(t, err)
	b.ob, err = ferry.NewOutbox(notifying, nil)
	require.NoError(t, err)
	r := b.relay(t, b.publisher(t), &ferry.RelayConfig{PollInterval: time.Hour, MinPollInterval: time.Hour})
	for i := 1; i <= 3; i++ {
		b.enqueue(t, 1, func(int) string { return "1" })
		testsvc.WaitFor(t, 5*time.Second, func() bool { return r.Stats().Confirmed == int64(i) },
			func() string { return fmt.Sprintf("%+v", r.Stats()) })
	}
}

// deadOnReject retries an unknown outcome after an hour and gives up on a
// rejected one at once.
type deadOnReject struct{}

func (deadOnReject) Next(_ int, res ferrytype.PublishResult) (time.Duration, bool) {
	return time.Hour, res.Outcome == ferrytype.OutcomeRejected
}

func TestRelayFencedFailureCountsNeitherDeadNorRetried(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, "sqlite")
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := b.ob.EnqueueTx(b.ctx, tx,
		ferry.Event{Type: "Doomed", Payload: json.RawMessage(`{}`), Destination: b.subject},
		ferry.Event{Type: "Flaky", Payload: json.RawMessage(`{}`), Destination: b.subject})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	doomed, flaky := ids[0], ids[1]

	pub := b.publisher(t)
	pub.inject = func(m *ferrytype.Message) (ferrytype.PublishResult, bool, bool) {
		if m.ID == doomed {
			return ferrytype.Rejected(errors.New("no route")), true, true
		}
		return ferrytype.Unknown(errors.New("timeout")), true, true
	}
	var once sync.Once
	r := b.relayFault(t, pub, &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Lease:        time.Hour,
		Retry:        deadOnReject{},
	}, func(ctx context.Context, point string) error {
		if point == ferryfault.RelayAfterPublish {
			// A person takes the doomed event from the relay's lease
			// before its outcome is recorded.
			once.Do(func() {
				_, err := b.st.DB.ExecContext(ctx, `UPDATE "`+b.st.Driver.Table()+
					`" SET lease_token = 'operator' WHERE event_id = ?`, doomed)
				require.NoError(t, err)
			})
		}
		return nil
	})
	testsvc.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Fenced == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	st := r.Stats()
	require.Zero(t, st.Dead, "the rejected event's mark was fenced: it did not go DEAD")
	require.Equal(t, int64(1), st.Retried, "the unknown outcome went back to NEW")
	row, err := b.st.Driver.Get(b.ctx, doomed)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSending, row.Status)
	require.Equal(t, "operator", row.LeaseToken)
	row, err = b.st.Driver.Get(b.ctx, flaky)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusNew, row.Status)
}
