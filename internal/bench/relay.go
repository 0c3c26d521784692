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
// publisher, drain n pre-filled events (2,000 aggregates' worth of ten
// events each in ordered mode) to the broker. It returns events per
// second from start to the last confirm.
func Drain(ctx context.Context, t *Target, b *Broker, n int, spec RelaySpec) (float64, error) {
	if err := t.truncate(ctx); err != nil {
		return 0, err
	}
	if err := b.Purge(ctx); err != nil {
		return 0, err
	}
	aggregates := max(n/10, 1)
	if err := t.fill(ctx, n, b.Dest, func(i int) string { return fmt.Sprint(i % aggregates) }); err != nil {
		return 0, err
	}
	pubs := make([]ferrybroker.Publisher, spec.Relays)
	for i := range pubs {
		p, err := b.Publisher(ctx)
		if err != nil {
			return 0, err
		}
		defer p.Close()
		pubs[i] = p
	}
	start := time.Now()
	relays := make([]*ferry.Relay, spec.Relays)
	for i := range relays {
		r, err := ferry.NewRelay(t.Store, pubs[i], &ferry.RelayConfig{
			BatchSize: spec.Batch, Lanes: spec.Lanes, Ordered: spec.Ordered, PollInterval: 20 * time.Millisecond,
		})
		if err != nil {
			return 0, err
		}
		if err := r.Start(ctx); err != nil {
			return 0, err
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
			return float64(n) / time.Since(start).Seconds(), nil
		}
		if dead > 0 {
			return 0, fmt.Errorf("relay drain: %d events went DEAD", dead)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, fmt.Errorf("relay drain: %d of %d events confirmed: %w", confirmed, n, ctx.Err())
		}
	}
}

// LiveResult is the outcome of a live run.
type LiveResult struct {
	// Rate is the producers' achieved rate, events per second.
	Rate float64 `json:"rate"`
	// Events is how many events were committed and confirmed.
	Events int `json:"events"`
	// Commit→confirm latency: from the producer's COMMIT returning to the
	// relay receiving the broker's confirm.
	P50, P99, Max time.Duration
	// Claims is how many claims returned events; RelayErrors how many
	// claims and marks failed (each costs the lane a back-off).
	Claims, RelayErrors int64
	// ClaimTook and PublishTook are the mean durations of a claim that
	// returned events and of a batch's publish (confirms included).
	ClaimTook, PublishTook time.Duration
}

// latencies pairs commit times with confirm times by event id, whichever
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
func (l *latencies) OnPublish(_ string, msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration) {
	now := time.Now()
	l.mu.Lock()
	l.publishes++
	l.publishSum += took
	l.mu.Unlock()
	for i, m := range msgs {
		if results[i].Outcome == ferrytype.OutcomeConfirmed {
			l.confirm(m.ID, now)
		}
	}
}

// Live measures latency under a steady load: producers commit one event
// per transaction at rate events per second for d, while relays (with
// lanes each) in the same process, woken by the producers' commits, relay
// them. Events committed and confirmed are paired by id. lanes 0 takes the
// relay's default.
func Live(ctx context.Context, t *Target, b *Broker, rate int, d time.Duration, relays, lanes int) (LiveResult, error) {
	var res LiveResult
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	if err := b.Purge(ctx); err != nil {
		return res, err
	}
	wake := ferry.NewWakeup()
	ob, err := ferry.NewOutbox(t.Driver, &ferry.OutboxConfig{Wakeup: wake})
	if err != nil {
		return res, err
	}
	lat := &latencies{pending: map[string]time.Time{}, commits: map[string]bool{}}
	rs := make([]*ferry.Relay, relays)
	for i := range rs {
		p, err := b.Publisher(ctx)
		if err != nil {
			return res, err
		}
		defer p.Close()
		r, err := ferry.NewRelay(t.Store, p, &ferry.RelayConfig{Lanes: lanes, Wakeup: wake, Hooks: []ferry.Hook{lat}})
		if err != nil {
			return res, err
		}
		if err := r.Start(ctx); err != nil {
			return res, err
		}
		defer r.Stop(context.Background())
		rs[i] = r
	}
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	// Enough producers that one slow COMMIT does not hold back the
	// schedule; each event waits for its own slot.
	_, err = parallel(n, 16, func(i int) error {
		if wait := time.Until(start.Add(time.Duration(i-1) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		tx, err := t.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		ids, err := ob.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i),
			Type: "OrderPaid", Destination: b.Dest, Payload: Payload})
		if err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		lat.commit(ids[0], time.Now())
		ob.Notify()
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Rate = float64(n) / time.Since(start).Seconds()
	deadline := time.Now().Add(time.Minute)
	for {
		lat.mu.Lock()
		done := len(lat.got)
		lat.mu.Unlock()
		if done >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return res, fmt.Errorf("live: %d of %d events confirmed within a minute", done, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.Events = n
	res.P50, res.P99, res.Max = percentiles(lat.got)
	res.ClaimTook = lat.claimSum / time.Duration(max(lat.claims, 1))
	res.PublishTook = lat.publishSum / time.Duration(max(lat.publishes, 1))
	for _, r := range rs {
		st := r.Stats()
		res.Claims += st.Claims
		res.RelayErrors += st.Errors
	}
	return res, nil
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
