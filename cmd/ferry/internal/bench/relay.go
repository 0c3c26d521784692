package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// RawDB measures the database's limit for the relay's own statements:
// loops concurrent loops claim batch events (the relay's claim) and mark
// them SENT, with no broker, until n pre-filled events are all SENT. It
// returns events per second.
func RawDB(ctx context.Context, t *Target, n, loops, batch int) (float64, error) {
	if err := t.truncate(ctx); err != nil {
		return 0, err
	}
	if err := t.fill(ctx, n, "bench", func(i int) string { return fmt.Sprint(i) }); err != nil {
		return 0, err
	}
	var sent atomic.Int64
	took, err := parallel(loops, loops, func(int) error {
		for {
			token := uuid.NewString()
			msgs, err := t.Store.Claim(ctx, ferrystore.ClaimParams{Limit: batch, Token: token, Lease: time.Minute})
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				return nil
			}
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			k, err := t.Store.MarkSent(ctx, token, ids)
			if err != nil {
				return err
			}
			sent.Add(k)
		}
	})
	if err != nil {
		return 0, err
	}
	if sent.Load() != int64(n) {
		return 0, fmt.Errorf("raw claim+mark: %d of %d events marked SENT", sent.Load(), n)
	}
	return float64(n) / took.Seconds(), nil
}

// RelaySpec describes one relay drain.
type RelaySpec struct {
	Relays  int
	Ordered bool
	// Lanes per relay; 0 takes the relay's default.
	Lanes int
	Batch int
}

// Drain measures the relay: spec.Relays relays, each with its own
// publisher, drain n pre-filled events (of t.Aggregates aggregates, which
// matter in ordered mode) to the broker. It returns events per
// second from start to the last confirm.
func Drain(ctx context.Context, t *Target, b *Broker, n int, spec RelaySpec) (float64, error) {
	d, err := drainInProcess(ctx, t, b, n, spec, newMeter("", ""))
	return d.Rate, err
}

// prepare empties the outbox and the destination and fills n events of
// t's aggregates, round robin.
func prepare(ctx context.Context, t *Target, b *Broker, n int) error {
	if err := t.truncate(ctx); err != nil {
		return err
	}
	if err := b.Purge(ctx); err != nil {
		return err
	}
	aggregates := t.aggregates(n)
	return t.fill(ctx, n, b.Dest, func(i int) string { return fmt.Sprint(i % aggregates) })
}

func drainInProcess(ctx context.Context, t *Target, b *Broker, n int, spec RelaySpec, m *meter) (drainRun, error) {
	if err := prepare(ctx, t, b, n); err != nil {
		return drainRun{}, err
	}
	pubs := make([]ferrybroker.Publisher, spec.Relays)
	for i := range pubs {
		p, err := b.Publisher(ctx)
		if err != nil {
			return drainRun{}, err
		}
		defer p.Close()
		pubs[i] = p
	}
	c := m.start(ctx, t)
	relays := make([]*ferry.Relay, spec.Relays)
	for i := range relays {
		r, err := ferry.NewRelay(t.Store, pubs[i], &ferry.RelayConfig{
			BatchSize: spec.Batch, Lanes: spec.Lanes, Ordered: spec.Ordered, PollInterval: 20 * time.Millisecond,
		})
		if err != nil {
			return drainRun{}, err
		}
		if err := r.Start(ctx); err != nil {
			return drainRun{}, err
		}
		relays[i] = r
		defer r.Stop(context.Background())
	}
	// The relays' own counters say when they are done: polling the table
	// would load the database under measurement.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var confirmed, dead int64
		for _, r := range relays {
			s := r.Stats()
			confirmed += s.Confirmed
			dead += s.Dead
		}
		if confirmed >= int64(n) {
			run := c.stop(ctx, n, selfCPU()-c.self, true)
			return run, b.expect(ctx, n)
		}
		if dead > 0 {
			return drainRun{}, fmt.Errorf("relay drain: %d events went DEAD", dead)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return drainRun{}, fmt.Errorf("relay drain: %d of %d events confirmed: %w", confirmed, n, ctx.Err())
		}
	}
}

// LiveResult is the outcome of a live run.
type LiveResult struct {
	// Mode is the relay measured: LiveInProcess, LiveProcess or LivePlain.
	Mode string `json:"mode"`
	// Rate is the producers' achieved rate, events per second.
	Rate float64 `json:"rate"`
	// Events is how many events were committed and confirmed.
	Events int `json:"events"`
	// Commit→delivery latency: from the producer's COMMIT returning to
	// the event's arrival at a consumer of the destination.
	P50, P99, Max time.Duration
	// Claims is how many claims returned events; RelayErrors how many
	// claims and marks failed (each costs the lane a back-off).
	Claims, RelayErrors int64
	// ClaimTook and PublishTook are the mean durations of a claim that
	// returned events and of a batch's publish (confirms included); only
	// for a relay in the bench's process.
	ClaimTook, PublishTook time.Duration
}

// latencies pairs commit times with delivery times by event id, whichever
// comes first.
type latencies struct {
	mu      sync.Mutex
	pending map[string]time.Time // commit or confirm time of one side
	commits map[string]bool      // which side pending holds
	got     []time.Duration

	claims, publishes    int64
	claimSum, publishSum time.Duration
}

// OnClaim implements ferry.HookClaim.
func (l *latencies) OnClaim(_ string, _ int, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims++
	l.claimSum += took
}

func (l *latencies) commit(id string, at time.Time)  { l.pair(id, at, true) }
func (l *latencies) confirm(id string, at time.Time) { l.pair(id, at, false) }

func (l *latencies) pair(id string, at time.Time, commit bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	other, ok := l.pending[id]
	if !ok {
		l.pending[id], l.commits[id] = at, commit
		return
	}
	if l.commits[id] == commit {
		return // a second confirm of one event: keep the first
	}
	delete(l.pending, id)
	delete(l.commits, id)
	d := at.Sub(other) // confirm − commit when the confirm came second
	if commit {
		d = -d
	}
	l.got = append(l.got, max(d, 0)) // a confirm seen before COMMIT returned counts as 0
}

// OnPublish implements ferry.HookPublish.
func (l *latencies) OnPublish(_ string, _ []ferrytype.Message, _ []ferrytype.PublishResult, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.publishes++
	l.publishSum += took
}

// ClaimResult holds claim latencies with and without retained rows.
type ClaimResult struct {
	Retained int `json:"retained"`
	// Empty and Full: p50 and p99 of one claim of Batch events, on an
	// outbox holding only those and on one that also retains Retained
	// SENT rows.
	Batch                                int
	EmptyP50, EmptyP99, FullP50, FullP99 time.Duration
}

// Claim measures the latency of a claim of batch events on an empty outbox
// and again once it retains retained SENT rows (as a table without
// retention grows), rounds times each.
func Claim(ctx context.Context, t *Target, retained, batch, rounds int) (ClaimResult, error) {
	res := ClaimResult{Retained: retained, Batch: batch}
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	var err error
	if res.EmptyP50, res.EmptyP99, err = claimRounds(ctx, t, batch, rounds); err != nil {
		return res, err
	}
	if err := t.retain(ctx, retained); err != nil {
		return res, err
	}
	res.FullP50, res.FullP99, err = claimRounds(ctx, t, batch, rounds)
	return res, err
}

func claimRounds(ctx context.Context, t *Target, batch, rounds int) (p50, p99 time.Duration, err error) {
	var took []time.Duration
	for i := 0; i < rounds; i++ {
		if err := t.fill(ctx, batch, "bench", func(j int) string { return fmt.Sprint(i*batch + j) }); err != nil {
			return 0, 0, err
		}
		token := uuid.NewString()
		start := time.Now()
		msgs, err := t.Store.Claim(ctx, ferrystore.ClaimParams{Limit: batch, Token: token, Lease: time.Minute})
		if err != nil {
			return 0, 0, err
		}
		took = append(took, time.Since(start))
		if len(msgs) != batch {
			return 0, 0, fmt.Errorf("claim: %d of %d events claimed", len(msgs), batch)
		}
		ids := make([]string, len(msgs))
		for j, m := range msgs {
			ids[j] = m.ID
		}
		if _, err := t.Store.MarkSent(ctx, token, ids); err != nil {
			return 0, 0, err
		}
	}
	p50, p99, _ = percentiles(took)
	return p50, p99, nil
}

func percentiles(ds []time.Duration) (p50, p99, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return at(0.50), at(0.99), s[len(s)-1]
}
