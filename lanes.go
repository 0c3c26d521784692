package ferry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/runner"
	"github.com/ferrydev/ferry/internal/token"
)

// A claimSource tells the lanes what to claim, and wakes them when there
// is something: the table source probes the outbox table (and listens for
// wake-ups); the log source reads the database's log of changes and hands
// over the ids it read. A source never calls the lanes: it wakes them
// through the waker and reads their state.
type claimSource interface {
	// start starts the source's goroutines on run.
	start(ctx context.Context, run *runner.Runner) error
	// next says what a woken lane claims: ids read from the log, or the
	// table (c.ids nil); ok is false when the lane is to claim nothing
	// now.
	next(limit int) (c claimReq, ok bool)
	// claimed tells the source what claim c got: the ids of the messages
	// claimed and of the malformed rows recorded DEAD, or the claim's
	// error.
	claimed(c claimReq, got []string, malformed int, err error)
	// settled tells the source what a published batch's settle did.
	settled(b batchOutcome)
	// idle tells the source a lane's claim found nothing; it says whether
	// the lane looks again at once.
	idle() (again bool)
	// kind names the source in the heartbeat table
	// (ferrystore.RelaySourceTable or RelaySourceLog).
	kind() string
}

// claimReq is what a lane claims: the events ids (nil: the table's next
// batch), and, for ids taken from a queue, what to call once the claim
// committed (ok) or failed.
type claimReq struct {
	ids  []string
	done func(ok bool)
}

// waker wakes idle lanes: one token a lane.
type waker struct {
	kick chan struct{}
	// scan asks the next claim of a log relay to look at the table
	// rather than at the ids read from the log.
	scan atomic.Bool
}

func newWaker(lanes int) *waker { return &waker{kick: make(chan struct{}, lanes)} }

// wake wakes one idle lane, if any is waiting for a token.
func (w *waker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// wakeScan asks for a claim from the table and wakes a lane for it.
func (w *waker) wakeScan() {
	w.scan.Store(true)
	w.wake()
}

// laneState is what the lanes are doing, which the sources and the
// maintainer read, and how many may run, which the maintainer sets.
type laneState struct {
	// allowed is the number of lanes that may claim: RelayConfig.Lanes,
	// or the relay's share of RelayConfig.TableLanes (setAllowed).
	allowed  atomic.Int64
	mu       sync.Mutex
	changed  chan struct{} // closed when allowed changes
	active   atomic.Int64  // lanes inside a cycle
	claiming atomic.Int64  // lanes inside a claim
	// heldBack is set when an ordered claim, woken while another lane's
	// batch was in flight, found nothing: the ready events wait for that
	// batch. The probe then waits for the lanes to go idle.
	heldBack atomic.Bool
	claimed  *atomic.Int64 // events claimed (RelayStats.Claimed)
	inFlight atomic.Int64  // events claimed and not yet settled
}

// setAllowed sets how many lanes may claim, and reports whether that
// changed. A lane whose index is not below it stops claiming after its
// cycle; one below it starts at the next wake-up.
func (s *laneState) setAllowed(n int64) bool {
	if s.allowed.Swap(n) == n {
		return false
	}
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return true
}

// whenChanged is closed when allowed changes.
func (s *laneState) whenChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// lanes run the relay's claim→publish→settle loops.
type lanes struct {
	cfg    *RelayConfig
	store  ferrystore.Store
	src    claimSource
	pipe   *pipeline
	outage *outage
	wake   *waker
	state  *laneState
	log    *slog.Logger
	hooks  *relayHooks
	c      *relayCounters
	// claims prefixes every claim token: the relay's RelayBeat.Claims.
	claims string
}

func (l *lanes) start(run *runner.Runner) {
	for i := range l.cfg.Lanes {
		run.Go(func() { l.lane(run, int64(i)) })
	}
}

// lane is lane i's loop: while i is below the lanes allowed, it waits for
// a wake-up and claims until it finds nothing.
func (l *lanes) lane(run *runner.Runner, i int64) {
	errBackoff := 50 * time.Millisecond
	for {
		changed := l.state.whenChanged()
		if i >= l.state.allowed.Load() {
			select {
			case <-run.Stopping():
				return
			case <-changed:
			}
			continue
		}
		select {
		case <-run.Stopping():
			return
		case <-changed:
			continue
		case <-l.wake.kick:
		}
		if i >= l.state.allowed.Load() {
			l.wake.wake() // for a lane that may claim
			continue
		}
		for i < l.state.allowed.Load() {
			select {
			case <-run.Stopping():
				return
			default:
			}
			busy := l.state.active.Add(1) > 1
			n, err := l.cycle(run.Context())
			if err == nil && n == 0 && busy && l.cfg.Ordered {
				l.state.heldBack.Store(true) // before this lane counts as idle
			}
			l.state.active.Add(-1)
			if err != nil {
				l.c.errors.Add(1)
				attrs := []any{"error", err, "retry_in", errBackoff}
				if errors.Is(err, ferrytype.ErrUndefinedTable) {
					attrs = append(attrs, "fix", "a table of the outbox does not exist: run ferry migrate --table "+l.store.Table()+
						" (or the store's Migrate)")
				}
				l.log.Error("relay cycle failed", attrs...)
				if !run.Sleep(errBackoff) {
					return
				}
				errBackoff = min(errBackoff*2, max(l.cfg.PollInterval*5, time.Second))
				continue
			}
			errBackoff = 50 * time.Millisecond
			if n == l.cfg.BatchSize {
				l.wake.wake() // more may be waiting: bring another lane in
			}
			if n > 0 || l.src.idle() {
				continue // more may have committed meanwhile: look again at once
			}
			break
		}
	}
}

// cycle claims one batch, publishes it and records the outcomes. It
// returns the number of events claimed (for a claim by id, at least the
// number of ids asked for).
func (l *lanes) cycle(ctx context.Context) (int, error) {
	if l.outage.down(ctx) {
		return 0, nil // claim nothing while nothing could be published
	}
	req, ok := l.src.next(l.cfg.BatchSize)
	if !ok {
		return 0, nil
	}
	tok := l.claims + "." + token.New()
	start := time.Now()
	var (
		malformed int
		got       []string
	)
	l.state.claiming.Add(1)
	msgs, err := l.store.Claim(ctx, ferrystore.ClaimParams{
		Limit: l.cfg.BatchSize, Token: tok, Lease: l.cfg.Lease, Ordered: l.cfg.Ordered, IDs: req.ids,
		Malformed: func(id string, reason error) {
			malformed++
			got = append(got, id)
			l.log.Warn("malformed outbox row recorded DEAD; it is never published", "event_id", id, "error", reason)
		},
	})
	l.state.claiming.Add(-1)
	if err == nil {
		got = append(got, msgIDs(msgs)...)
	}
	l.src.claimed(req, got, malformed, err)
	if err != nil {
		return 0, err
	}
	if malformed > 0 {
		// Claimed and moved on to DEAD by the store (TransitionMalformed):
		// never published, so counted as dead and not as claimed.
		l.c.dead.Add(int64(malformed))
		l.hooks.settle(0, 0, int64(malformed))
		l.hooks.settleDest(destTally{{Dead: int64(malformed)}})
	}
	if len(msgs) == 0 {
		return max(malformed, len(req.ids)), nil
	}
	leaseEnd := start.Add(l.cfg.Lease)
	l.state.inFlight.Add(int64(len(msgs)))
	defer l.state.inFlight.Add(-int64(len(msgs)))
	l.c.claims.Add(1)
	l.c.claimed.Add(int64(len(msgs)))
	l.hooks.claim(len(msgs), time.Since(start))
	if err := ferryfault.At(ctx, ferryfault.RelayAfterClaim); err != nil {
		l.log.Warn("fault after claim: batch abandoned", "token", tok, "events", len(msgs), "error", err)
		return len(msgs), nil
	}
	out := l.pipe.run(ctx, tok, leaseEnd, msgs)
	if !out.abandoned {
		l.outage.observe(ctx, out)
		l.src.settled(out)
	}
	return len(msgs), nil
}

func msgIDs(msgs []ferrytype.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].ID
	}
	return out
}
