package ferry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/runner"
)

// wakeWindow is how long a lane that found nothing after a wake-up signal
// goes on looking, from its first such miss: the signal may have come
// before the enqueuing transaction committed. It counts from the miss, not
// from the signal, so that a look slowed by a loaded database does not use
// the window up before the commit it waits for.
const wakeWindow = 500 * time.Millisecond

// tableSource is the polling relay's claim source: every claim takes the
// table's next batch. It wakes the lanes when the probe of the table finds
// events ready (see poller), on the Outbox's Wakeup and on the store's own
// notifications (PostgreSQL LISTEN/NOTIFY), and shortly again after a
// claim that found nothing right after a wake-up.
//
// Another source may run one below it, for the times it has nothing to
// tell, and slow its probes down to one every slowEvery while it does.
type tableSource struct {
	store  ferrystore.Store
	cfg    *RelayConfig
	wake   *waker
	state  *laneState
	outage *outage
	log    *slog.Logger

	lastRing  atomic.Int64 // unix nanos of the last wake-up signal
	missSince atomic.Int64 // unix nanos of the first miss after it
	missDelay atomic.Int64 // next re-poll delay after a signalled miss
	// slow is set while the table is probed only every slowEvery: the
	// lanes learn of new events another way, and the probe is a safety
	// net.
	slow      atomic.Bool
	slowEvery time.Duration
}

var _ claimSource = (*tableSource)(nil)

func (s *tableSource) kind() string { return ferrystore.RelaySourceTable }

func (s *tableSource) start(_ context.Context, run *runner.Runner) error {
	s.wake.wake() // look once at start
	run.Go(func() { s.poller(run) })
	if s.cfg.Wakeup != nil {
		ch, unsub := s.cfg.Wakeup.subscribe()
		run.Go(func() {
			defer unsub()
			for {
				select {
				case <-run.Stopping():
					return
				case <-ch:
					s.ring()
				}
			}
		})
	}
	if l, ok := s.store.(ferrystore.Listener); ok && !s.cfg.DisableListen {
		run.Go(func() { s.listen(run, l) })
	}
	return nil
}

func (s *tableSource) next(int) (claimReq, bool) { return claimReq{}, true }

func (s *tableSource) claimed(_ claimReq, got []string, _ int, err error) {
	if err == nil && len(got) > 0 {
		s.missDelay.Store(0)
	}
}

func (s *tableSource) settled(batchOutcome) {}

func (s *tableSource) idle() bool {
	s.maybeRepoll()
	return false
}

// ring handles a wake-up signal: new events may have been enqueued.
func (s *tableSource) ring() {
	s.lastRing.Store(time.Now().UnixNano())
	s.wake.wake()
}

// poller looks for events for the lanes that are idle. While a lane is
// claiming, or no lane is idle, it makes no query: a lane that finds
// events claims again at once. Otherwise it probes the store
// (Store.Ready) and wakes one idle lane when events are ready, so events
// committed while one lane publishes its batch are claimed by another
// lane, not after that batch's publish and mark. The interval starts at
// MinPollInterval and grows by a quarter at each look that is not
// followed by claimed events, up to PollInterval; any claimed event
// brings it back. So an idle relay makes about one query per
// PollInterval, and a busy one notices new events within a few
// milliseconds. A probe that finds events a claim cannot take (an ordered
// claim held back by an earlier event in flight) still lengthens the
// interval, and until the lanes are all idle again the probe leaves the
// idle lanes be while a batch is in flight.
func (s *tableSource) poller(run *runner.Runner) {
	fast := s.cfg.MinPollInterval
	d := fast
	t := time.NewTimer(d)
	defer t.Stop()
	seen := s.state.claimed.Load()
	lastProbe := time.Now() // the start looked at the table
	for {
		select {
		case <-run.Stopping():
			return
		case <-t.C:
		}
		if c := s.state.claimed.Load(); c != seen {
			seen, d = c, fast
		} else {
			d = min(d+max(d/4, 100*time.Microsecond), s.cfg.PollInterval)
		}
		t.Reset(d)
		active := s.state.active.Load()
		switch {
		case s.state.claiming.Load() > 0:
			continue // a lane is looking already
		case active >= s.state.allowed.Load():
			continue // no lane is free to claim
		case active == 0:
			s.state.heldBack.Store(false)
		case s.state.heldBack.Load():
			continue // the ready events wait for the batch in flight
		}
		if s.outage.down(run.Context()) {
			continue // nothing could be published: no probe, no claim
		}
		if s.slow.Load() {
			t.Reset(s.cfg.PollInterval)
			if time.Since(lastProbe) < s.slowEvery {
				continue
			}
		}
		lastProbe = time.Now()
		ready, err := s.store.Ready(run.Context())
		if err != nil {
			s.log.Debug("probe failed; claiming instead", "error", err)
			ready = true
		}
		if ready {
			s.wake.wakeScan()
		}
	}
}

func (s *tableSource) listen(run *runner.Runner, l ferrystore.Listener) {
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithCancel(run.Context())
		go func() {
			select {
			case <-run.Stopping():
			case <-ctx.Done():
			}
			cancel()
		}()
		start := time.Now()
		err := l.Listen(ctx, s.ring)
		cancel()
		select {
		case <-run.Stopping():
			return
		default:
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		s.log.Warn("listen for new events failed; polling meanwhile", "error", err, "retry_in", backoff)
		if !run.Sleep(backoff) {
			return
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// maybeRepoll schedules another look shortly after a claim found nothing
// although a wake-up signal came: the enqueuing transaction may not have
// committed yet. The delays double from 2ms; they stop wakeWindow after
// the first miss since the signal, so an idle relay makes no extra query.
func (s *tableSource) maybeRepoll() {
	ring := s.lastRing.Load()
	if ring == 0 {
		return
	}
	now := time.Now().UnixNano()
	first := s.missSince.Load()
	if first < ring && s.missSince.CompareAndSwap(first, now) {
		first = now
	} else {
		first = s.missSince.Load()
	}
	if time.Duration(now-first) > wakeWindow {
		s.missDelay.Store(0)
		return
	}
	d := time.Duration(s.missDelay.Load())
	if d == 0 {
		d = 2 * time.Millisecond
	} else {
		d = min(d*2, 128*time.Millisecond)
	}
	s.missDelay.Store(int64(d))
	time.AfterFunc(d, s.wake.wake)
}
