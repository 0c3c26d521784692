package relaytest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RelayFourRelaysDrainEveryEventOnce: four relays drain Env.DrainEvents
// events of 997 aggregates: each event is handed to the broker once and
// stored once, none is lost.
func RelayFourRelaysDrainEveryEventOnce[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	total := cmp.Or(e.DrainEvents, 20000)
	ids := e.Enqueue(t, total, func(i int) string { return fmt.Sprint(i % 997) })
	pubs := make([]*CountingPublisher, 4)
	relays := make([]*ferry.Relay, 4)
	for i := range relays {
		pubs[i] = e.CountingPublisher(t)
		relays[i] = e.Relay(t, pubs[i], &ferry.RelayConfig{BatchSize: 100, PollInterval: 20 * time.Millisecond,
			Heartbeat: ferry.HeartbeatConfig{Interval: e.DrainHeartbeat}})
	}
	st := e.WaitSettled(t, 8*time.Minute)
	require.Zero(t, st.Dead)
	var confirmed, fenced int64
	stats := make([]ferry.RelayStats, len(relays))
	for i, r := range relays {
		require.NoError(t, r.Stop(e.Ctx))
		stats[i] = r.Stats()
	}
	for _, s := range stats {
		confirmed += s.Confirmed
		fenced += s.Fenced
		require.Zero(t, s.Unknown+s.Returned+s.Rejected+s.Duplicates, "no fault, no retry: %+v (every relay: %+v)", s, stats)
	}
	require.EqualValues(t, total, confirmed)
	require.Zero(t, fenced)
	for _, id := range ids {
		n := 0
		for _, p := range pubs {
			n += p.Count(id)
		}
		require.Equal(t, 1, n, "event %s handed to the broker %d times", id, n)
	}
	got := e.ReadAll(t, total)
	require.Len(t, got, total)
	seen := make(map[string]bool, total)
	for _, m := range got {
		require.False(t, seen[m.ID], "duplicate message %s in the stream", m.ID)
		seen[m.ID] = true
	}
	for _, id := range ids {
		require.True(t, seen[id], "event %s lost", id)
	}
}

// RelayLateMarkIsFenced: a relay whose lease ended while it published
// cannot overwrite the outcome of the relay that took the event over.
func RelayLateMarkIsFenced[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	id := e.Enqueue(t, 1, func(int) string { return "1" })[0]

	// Relay A publishes, then its one lane stalls before recording
	// the outcome past its lease. A started first and beats on: it
	// leads the table's maintenance, and its sweeper returns the
	// event; its stalled lane cannot claim it again.
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	relayA := e.RelayFault(t, e.CountingPublisher(t), &ferry.RelayConfig{
		Lanes: 1, Lease: 500 * time.Millisecond, PublishTimeout: 400 * time.Millisecond, SweepInterval: 20 * time.Millisecond,
	}, func(ctx context.Context, point string) error {
		if point == ferryfault.RelayAfterPublish {
			once.Do(func() { close(paused); <-resume })
		}
		return nil
	})
	<-paused
	// Relay B claims the swept event, publishes again and marks it.
	relayB := e.Relay(t, e.CountingPublisher(t), &ferry.RelayConfig{
		SweepInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: fastRetry(),
	})
	testenv.WaitFor(t, 30*time.Second, func() bool { return relayB.Stats().Confirmed == 1 },
		func() string { return fmt.Sprintf("B: %+v", relayB.Stats()) })
	rowB, err := e.Store.Get(e.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSent, rowB.Status)

	close(resume)
	testenv.WaitFor(t, 10*time.Second, func() bool { return relayA.Stats().Fenced == 1 },
		func() string { return fmt.Sprintf("A: %+v", relayA.Stats()) })
	require.Zero(t, relayA.Stats().Confirmed, "A's late mark changed nothing")
	row, err := e.Store.Get(e.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, rowB.SentAt, row.SentAt, "B's outcome stands")
	require.Equal(t, 2, row.Attempt)
	require.Equal(t, int64(1), relayB.Stats().Duplicates, "JetStream reports B's publish as the duplicate it is")
	got := e.ReadAll(t, 1)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
}

// RelayCrashWindows: a relay that fails at a named point (after its claim,
// after its publish, with its confirm lost) loses no event: the lease
// expires, the event is published again with its id, and the broker holds
// it once.
func RelayCrashWindows[TTx any](t *testing.T, setup Setup[TTx]) {
	cases := []struct {
		point     string
		hits      int64 // the point is reached once per batch or once per message
		duplicate bool  // the broker got the event twice
	}{
		{ferryfault.RelayAfterClaim, 1, false},
		{ferryfault.RelayAfterPublish, 1, true},
		{ferryfault.RelayLoseConfirm, 10, true},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			ids := e.Enqueue(t, 10, func(i int) string { return fmt.Sprint(i) })
			var hit atomic.Int64
			pub := e.CountingPublisher(t)
			// One lane: the first claim takes all ten events, so the
			// one injected batch crash hits every event. The lease
			// leaves the good attempt seconds to publish and mark on a
			// loaded machine: a lease that ran out under it would make
			// a third attempt, and this test counts exactly two.
			r := e.RelayFault(t, pub, &ferry.RelayConfig{
				Lanes: 1, Lease: 3 * time.Second, PublishTimeout: time.Second,
				SweepInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: fastRetry(),
			}, func(ctx context.Context, point string) error {
				if point == c.point && hit.Add(1) <= c.hits {
					return errors.New("injected crash")
				}
				return nil
			})
			e.WaitSettled(t, time.Minute)
			require.NoError(t, r.Stop(e.Ctx))
			st := r.Stats()
			require.Equal(t, int64(10), st.Confirmed)
			wantDup := int64(0)
			if c.duplicate {
				wantDup = 10
			}
			require.Equal(t, wantDup, st.Duplicates, "duplicates reported by JetStream: %+v", st)
			got := e.ReadAll(t, 10)
			require.Len(t, got, 10, "the stream holds each event once")
			for i, id := range ids {
				row, err := e.Store.Get(e.Ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusSent, row.Status)
				require.Equal(t, 2, row.Attempt, "event %d: one crashed attempt, one good one", i)
				want := 1
				if c.duplicate {
					want = 2
				}
				require.Equal(t, want, pub.Count(id), "publishes of event %d with id %s", i, id)
			}
		})
	}
}

// RelayOrderedUnderFailures: four ordered relays under random rejects and
// lost confirms publish each aggregate's events in order.
func RelayOrderedUnderFailures[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	aggregates, perAggregate := cmp.Or(e.OrderedAggregates, 1000), 10
	// Events of one aggregate are enqueued in separate
	// transactions, interleaved with other aggregates.
	e.Enqueue(t, aggregates*perAggregate, func(i int) string { return fmt.Sprint(i % aggregates) })
	var relays []*ferry.Relay
	var pubs []*CountingPublisher
	var injected atomic.Int64
	for i := 0; i < 4; i++ {
		pub := e.CountingPublisher(t)
		pub.Inject = func(m *ferrytype.Message) (ferrytype.PublishResult, bool, bool) {
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
		relays = append(relays, e.Relay(t, pub, &ferry.RelayConfig{
			Ordered: true, BatchSize: 200, PollInterval: 10 * time.Millisecond, Retry: fastRetry(),
		}))
	}
	st := e.WaitSettled(t, 8*time.Minute)
	require.Zero(t, st.Dead)
	for _, r := range relays {
		require.NoError(t, r.Stop(e.Ctx))
	}
	require.Positive(t, injected.Load(), "faults were injected")
	published := func(id string) int {
		n := 0
		for _, p := range pubs {
			n += p.Count(id)
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
	got := e.ReadAll(t, aggregates*perAggregate)
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
}

// RelayDeadAfterMaxAttempts: an event no queue takes is returned, retried,
// and DEAD at its last attempt, with its last error.
func RelayDeadAfterMaxAttempts[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	ids := e.EnqueueEvents(t, ferry.Event{Type: "Lost", Payload: json.RawMessage(`{}`), Destination: "nowhere." + e.Destination})
	r := e.Relay(t, e.CountingPublisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Retry:        ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 3},
	})
	testenv.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Dead == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	row, err := e.Store.Get(e.Ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDead, row.Status)
	require.Equal(t, 3, row.Attempt)
	require.Contains(t, row.LastError, "attempt 3: returned")
	st := r.Stats()
	require.Equal(t, int64(3), st.Returned)
	require.Equal(t, int64(2), st.Retried)
	require.Zero(t, st.Confirmed)
}

// RelayStopFinishesInFlightBatch: Stop waits for the claimed batch to be
// published and marked; stopping twice is safe.
func RelayStopFinishesInFlightBatch[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	id := e.Enqueue(t, 1, func(int) string { return "1" })[0]
	claimed, stopCalled := make(chan struct{}), make(chan struct{})
	r, err := ferry.NewRelay(e.Store, e.CountingPublisher(t), nil)
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(e.Ctx, func(ctx context.Context, point string) error {
		if point == ferryfault.RelayAfterClaim {
			close(claimed)
			<-stopCalled
		}
		return nil
	})))
	<-claimed
	stopped := make(chan error)
	go func() { stopped <- r.Stop(e.Ctx) }()
	close(stopCalled)
	require.NoError(t, <-stopped)
	row, err := e.Store.Get(e.Ctx, id)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSent, row.Status, "Stop waited for the claimed batch to be published and marked")
	require.NoError(t, r.Stop(e.Ctx), "stopping twice is safe")
	require.ErrorIs(t, r.Start(e.Ctx), ferry.ErrClosed)
}

// RelayRetentionPurgesSentRowsOnly: retention deletes SENT rows, never a
// pending one.
func RelayRetentionPurgesSentRowsOnly[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	ids := e.Enqueue(t, 5, func(i int) string { return fmt.Sprint(i) })
	later := e.EnqueueEvents(t, ferry.Event{Type: "Later", Payload: json.RawMessage(`{}`), Delay: time.Hour})
	r := e.Relay(t, e.CountingPublisher(t), &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond, Retention: time.Millisecond, PurgeInterval: 10 * time.Millisecond, PurgeBatch: 2,
	})
	testenv.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Purged == 5 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	for _, id := range ids {
		_, err := e.Store.Get(e.Ctx, id)
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	}
	row, err := e.Store.Get(e.Ctx, later[0])
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusNew, row.Status, "a pending event is never purged")
}

// countingStore signals each claim as it starts (claims) and, when
// claimed is not nil, how many events it returned as it ends; when probes
// is not nil, it signals each probe's answer there.
type countingStore[TTx any] struct {
	ferrystore.Driver[TTx]
	claims  chan time.Time
	claimed chan int
	probes  chan probe
}

// probe is one Store.Ready call: when it started and what it answered.
type probe struct {
	at    time.Time
	ready bool
}

func (s *countingStore[TTx]) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
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

func (s *countingStore[TTx]) Ready(ctx context.Context) (bool, error) {
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

// waitIdle waits until the one-lane relay over cs, whose last claim found
// nothing, is idle, so that only a probe can start its next claim: a
// probe that found nothing with no claim since (the poller does not probe
// while the lane claims or works on a batch).
func waitIdle[TTx any](t *testing.T, cs *countingStore[TTx]) {
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

// deadOnReject retries an unknown outcome after an hour and gives up on a
// rejected one at once.
type deadOnReject struct{}

func (deadOnReject) Next(_ int, res ferrytype.PublishResult) (time.Duration, bool) {
	return time.Hour, res.Outcome == ferrytype.OutcomeRejected
}

// RelayIdleProbesOncePerInterval: an idle relay of eight lanes makes one
// probe per poll interval, and claims nothing.
func RelayIdleProbesOncePerInterval[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	cs := &countingStore[TTx]{Driver: e.Store, claims: make(chan time.Time, 100), probes: make(chan probe, 1000)}
	const interval = 40 * time.Millisecond
	r, err := ferry.NewRelay(cs, e.CountingPublisher(t), &ferry.RelayConfig{Lanes: 8, PollInterval: interval, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(e.Ctx))
	defer r.Stop(e.Ctx)
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

// RelayProbeFindsEventsOfAnotherProcess: with no wake-up and no LISTEN,
// the probe alone finds events committed by another process.
func RelayProbeFindsEventsOfAnotherProcess[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	cs := &countingStore[TTx]{Driver: e.Store, claims: make(chan time.Time, 100),
		claimed: make(chan int, 100), probes: make(chan probe, 1000)}
	// No Wakeup and no LISTEN: the producer is another process,
	// and only the probe can notice its commits. One lane, so
	// that the claims come one after another.
	r, err := ferry.NewRelay(cs, e.CountingPublisher(t), &ferry.RelayConfig{DisableListen: true, Lanes: 1})
	require.NoError(t, err)
	require.NoError(t, r.Start(e.Ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim at start"))
	for i := 1; i <= 3; i++ {
		waitIdle(t, cs)
		e.Enqueue(t, 1, func(int) string { return "1" })
		// The relay claims the event only after a probe saw it.
		deadline := time.Now().Add(30 * time.Second)
		for !receive(t, cs.probes, 10*time.Second, "probe").ready {
			require.True(t, time.Now().Before(deadline), "event %d: no probe saw it ready within 30 s; %+v", i, r.Stats())
		}
		testenv.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == int64(i) },
			func() string { return fmt.Sprintf("%+v", r.Stats()) })
		// After a batch, the lane claims again at once (more may
		// have committed meanwhile): an event committed just then
		// is claimed without a probe. That look finds nothing.
		for receive(t, cs.claimed, 10*time.Second, "claim") != 0 {
		}
	}
}

// RelayClaimsWhileABatchIsInFlight: an event committed while one lane
// holds its batch (publishing, marking) is claimed and sent by another
// lane, found by the probe alone, without waiting for that batch.
func RelayClaimsWhileABatchIsInFlight[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	fault, held, release := holdFirstBatch()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	r, err := ferry.NewRelay(e.Store, e.CountingPublisher(t), &ferry.RelayConfig{Lanes: 2, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(e.Ctx, fault)))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	first := e.Enqueue(t, 1, func(int) string { return "a" })[0]
	receive(t, held, 10*time.Second, "the first batch held")
	second := e.Enqueue(t, 1, func(int) string { return "b" })[0]
	testenv.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 1 },
		func() string {
			return fmt.Sprintf("the second event was not sent while the first batch was held: %+v", r.Stats())
		})
	row, err := e.Store.Get(e.Ctx, second)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSent, row.Status)
	row, err = e.Store.Get(e.Ctx, first)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSending, row.Status, "the first batch is still held")
	close(release)
	testenv.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 2 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
}

// RelayOrderedProbeWaitsForTheBatchInFlight: in ordered mode, events
// ready behind an event in flight cannot be claimed; once a claim found
// that, the idle lanes are left alone until the batch is settled, instead
// of claiming in vain at every probe.
func RelayOrderedProbeWaitsForTheBatchInFlight[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	cs := &countingStore[TTx]{Driver: e.Store, claims: make(chan time.Time, 1000), claimed: make(chan int, 1000)}
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
	ids := e.Enqueue(t, 3, func(int) string { return "one" })
	r, err := ferry.NewRelay(cs, e.CountingPublisher(t), &ferry.RelayConfig{Lanes: 2, Ordered: true, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(e.Ctx, fault)))
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
	testenv.WaitFor(t, 10*time.Second, func() bool { return r.Stats().Confirmed == 3 },
		func() string { return fmt.Sprintf("%+v", r.Stats()) })
	for _, id := range ids {
		row, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusSent, row.Status)
	}
}

// RelayWakesOnEnqueueBeforeCommit: a wake-up rung by an enqueue before
// its transaction commits is not lost: the relay looks again after the
// commit. No LISTEN (ferrymem tells the relay of its commits in process):
// only the ring can wake it.
func RelayWakesOnEnqueueBeforeCommit[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	needs(t, e.Kind, e.ReadsBesideWriters, "ReadsBesideWriters", "the relay's look during the enqueuer's transaction would wait for its commit")
	wake := ferry.NewWakeup()
	ob, err := ferry.NewOutbox(e.Store, &ferry.OutboxConfig{Wakeup: wake})
	require.NoError(t, err)
	cs := &countingStore[TTx]{Driver: e.Store, claims: make(chan time.Time, 100), claimed: make(chan int, 100)}
	r, err := ferry.NewRelay(cs, e.CountingPublisher(t), &ferry.RelayConfig{Lanes: 1, PollInterval: time.Hour, MinPollInterval: time.Hour, Wakeup: wake, DisableListen: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(e.Ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim at start"))
	tx, commit, rollback := e.Begin(e.Ctx)
	defer func() { _ = rollback() }()
	_, err = ob.EnqueueTx(e.Ctx, tx, ferry.Event{Type: "T", Payload: json.RawMessage(`{}`), Destination: e.Destination})
	require.NoError(t, err)
	// The ring came before the commit: the look it causes ends before the
	// commit and finds nothing; the relay must look again after it.
	require.Zero(t, receive(t, cs.claimed, 10*time.Second, "claim after the ring"))
	require.NoError(t, commit())
	testenv.WaitFor(t, 5*time.Second, func() bool { return r.Stats().Confirmed == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
}

// RelayFencedFailureCountsNeitherDeadNorRetried: a failure whose mark
// finds the lease gone (a person took the event) is counted fenced, not
// dead nor retried, and the row is left to its new owner.
func RelayFencedFailureCountsNeitherDeadNorRetried[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	needs(t, e.Kind, e.SetLeaseToken != nil, "SetLeaseToken", "a person takes an event from the relay's lease")
	ids := e.EnqueueEvents(t,
		ferry.Event{Type: "Doomed", Payload: json.RawMessage(`{}`), Destination: e.Destination},
		ferry.Event{Type: "Flaky", Payload: json.RawMessage(`{}`), Destination: e.Destination})
	doomed, flaky := ids[0], ids[1]

	pub := e.CountingPublisher(t)
	pub.Inject = func(m *ferrytype.Message) (ferrytype.PublishResult, bool, bool) {
		if m.ID == doomed {
			return ferrytype.Rejected(errors.New("no route")), true, true
		}
		return ferrytype.Unknown(errors.New("timeout")), true, true
	}
	var once sync.Once
	r := e.RelayFault(t, pub, &ferry.RelayConfig{
		PollInterval: 10 * time.Millisecond,
		Lease:        time.Hour,
		Retry:        deadOnReject{},
	}, func(ctx context.Context, point string) error {
		if point == ferryfault.RelayAfterPublish {
			// A person takes the doomed event from the relay's lease
			// before its outcome is recorded.
			once.Do(func() { e.SetLeaseToken(ctx, t, doomed, "operator") })
		}
		return nil
	})
	testenv.WaitFor(t, 30*time.Second, func() bool { return r.Stats().Fenced == 1 }, func() string { return fmt.Sprintf("%+v", r.Stats()) })
	st := r.Stats()
	require.Zero(t, st.Dead, "the rejected event's mark was fenced: it did not go DEAD")
	require.Equal(t, int64(1), st.Retried, "the unknown outcome went back to NEW")
	row, err := e.Store.Get(e.Ctx, doomed)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusSending, row.Status)
	require.Equal(t, "operator", row.LeaseToken)
	row, err = e.Store.Get(e.Ctx, flaky)
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusNew, row.Status)
}
