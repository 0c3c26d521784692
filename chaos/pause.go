package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/open"
)

// The pause scenario's relays run with a lease of relayLease.
const relayLease = 3 * time.Second

// pauseFile is the file that arms relay p's next pause: the relay removes
// it and stops itself when it reaches ferryfault.RelayAfterPublish, that is
// while it holds a claim whose batch the broker has just answered.
func (s *system) pauseFile(p *shop.Proc) string { return filepath.Join(s.o.Dir, p.Name+".pause") }

// pauseArgs arms relays (only) for the pause scenario.
func (s *system) pauseArgs(p *shop.Proc) []string {
	if role(p) != "relay" {
		return nil
	}
	return []string{"--pause-at", ferryfault.RelayAfterPublish + "=" + s.pauseFile(p)}
}

// pauseRelays pauses each relay in turn inside a publish until ctx ends.
// Every pause is caused, not hoped for: the harness arms the relay, and
// the relay stops itself at the fault point between the broker's answer
// and the outcome's write. The harness then keeps it stopped until its
// lease has run out and no expired lease is left in the outbox (the other
// relay's sweeper returned the batch), continues it, and waits for the
// relay's late mark to be fenced. An arming that no batch took within a
// bound (the relays idle) is withdrawn and tried again.
func (s *system) pauseRelays(ctx context.Context) {
	store, err := open.Store(ctx, s.ordersDirect, "")
	if err != nil {
		s.say("pause: cannot open the outbox to watch leases: %v", err)
		return
	}
	defer store.Close()
	relays := s.byPrefix("relay")
	defer func() {
		for _, p := range relays {
			_ = p.Signal(syscall.SIGCONT) // none is left stopped, whatever happened
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		p := relays[n%len(relays)]
		if !p.Running() {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		before := p.Total().Fenced
		landed, err := s.armPause(ctx, p)
		if err != nil {
			s.say("pause: %v", err)
			return
		}
		if !landed {
			s.mu.Lock()
			s.pauseMisses++
			s.mu.Unlock()
			continue
		}
		// The relay removed the file and is stopping itself: wait until it
		// is stopped, so that no SIGCONT can overtake its SIGSTOP.
		for deadline := time.Now().Add(10 * time.Second); !p.Stopped() && p.Running(); {
			if time.Now().After(deadline) {
				s.say("pause: %s took the arming but did not stop", p.Name)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !p.Running() || !p.Stopped() {
			continue
		}
		stoppedAt := time.Now()
		s.mu.Lock()
		s.pauses++
		s.mu.Unlock()
		s.say("%s stopped itself inside a publish (SIGSTOP); held until its lease is swept", p.Name)
		swept := s.waitSwept(ctx, store, stoppedAt)
		_ = p.Signal(syscall.SIGCONT)
		if ctx.Err() != nil {
			return
		}
		if !swept {
			// Something kept the other relay from sweeping: on SQLite,
			// the stopped relay may have held the write lock (another of
			// its lanes inside a claim). This pause proves nothing.
			s.mu.Lock()
			s.pauses--
			s.pauseMisses++
			s.mu.Unlock()
			s.say("SIGCONT %s: its lease was not swept within %s (it may have held a lock); not counted", p.Name, sweepBound)
			continue
		}
		s.say("SIGCONT %s after %.1fs", p.Name, time.Since(stoppedAt).Seconds())
		s.checkFenced(p, before)
		sleep(ctx, 500*time.Millisecond)
	}
}

// armPause arms p's next pause and reports whether it landed within a
// bound; an arming that did not land is withdrawn.
func (s *system) armPause(ctx context.Context, p *shop.Proc) (bool, error) {
	file := s.pauseFile(p)
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return false, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) && p.Running() {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return true, nil // the relay took it: it is stopping itself
		}
		sleep(ctx, 10*time.Millisecond)
	}
	// Withdraw it; if the relay removed it first, the pause landed.
	err := os.Remove(file)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	return false, err
}

// sweepBound bounds how long past its lease a stopped relay is held
// waiting for the sweep: well within SQLite's busy timeout (10 s), which
// the other processes wait at most for a lock the stopped relay may hold.
const sweepBound = 3 * time.Second

// waitSwept waits until the lease of every claim taken before stoppedAt
// has run out and the outbox holds no expired lease; false when ctx ended
// or that did not happen within sweepBound after the lease.
func (s *system) waitSwept(ctx context.Context, store ferrystore.Store, stoppedAt time.Time) bool {
	if !sleep(ctx, time.Until(stoppedAt.Add(relayLease+100*time.Millisecond))) {
		return false
	}
	deadline := stoppedAt.Add(relayLease + sweepBound)
	for time.Now().Before(deadline) {
		expired, err := store.ExpiredClaims(ctx, 1)
		if err == nil && len(expired) == 0 {
			return true
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return false
		}
	}
	return false
}

// checkFenced waits for the continued relay's late mark to be counted as
// fenced. A relay that died meanwhile (its baseline crash point) proves
// nothing either way.
func (s *system) checkFenced(p *shop.Proc, before int64) {
	deadline := time.Now().Add(20 * time.Second)
	for p.Total().Fenced <= before {
		if !p.Running() || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := p.Total().Fenced; n > before {
		s.say("%s: its late mark was fenced (%d events)", p.Name, n-before)
		s.mu.Lock()
		s.pausesFenced++
		s.mu.Unlock()
		return
	}
	if !p.Running() {
		s.say("%s died before its late mark: this pause proves nothing", p.Name)
		return
	}
	s.mu.Lock()
	s.pausesUnfenced++
	s.mu.Unlock()
	s.say("%s: its batch was swept while it was stopped, but its late mark was not fenced", p.Name)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func pauseExpect(r *Result) []string {
	c := r.Counters
	var v []string
	switch {
	case c.Pauses == 0:
		v = append(v, fmt.Sprintf("vacuous: no pause landed inside a publish (%d armings withdrawn)", c.PauseMisses))
	case c.PausesFenced == 0:
		v = append(v, fmt.Sprintf("vacuous: %d pauses landed, but no late mark was checked", c.Pauses))
	}
	if c.PausesUnfenced > 0 {
		v = append(v, fmt.Sprintf("%d late marks of swept batches were not fenced", c.PausesUnfenced))
	}
	return v
}

// consumerHold is how long pauseConsumers keeps a consumer stopped: past
// the shop's Kafka session timeout (6s), so that the group gives its
// partitions to the other member meanwhile.
const consumerHold = 8 * time.Second

// pauseConsumers stops a points consumer (SIGSTOP) for consumerHold, then
// lets it go on (SIGCONT) with the records its client had fetched, which it
// may hand to its handler before it learns the group fenced it: the other
// member, given the partitions meanwhile, handles them too, and the inbox
// must keep each effect once. It does so once soon after the load starts
// (the faults last at least 10s), then again while ctx lasts; a consumer
// stopped when ctx ends goes on at once, uncounted.
func (s *system) pauseConsumers(ctx context.Context) {
	after(ctx, time.Second, 12*time.Second, func() {
		p := pick(s.byPrefix("points"))
		if !p.Running() || p.Signal(syscall.SIGSTOP) != nil {
			return
		}
		s.say("SIGSTOP %s for %s, past its group's session timeout", p.Name, consumerHold)
		held := false
		select {
		case <-time.After(consumerHold):
			held = true
		case <-ctx.Done():
		}
		_ = p.Signal(syscall.SIGCONT)
		if !held {
			s.say("SIGCONT %s early, the faults are over; not counted", p.Name)
			return
		}
		s.mu.Lock()
		s.consumerPauses++
		s.mu.Unlock()
		s.say("SIGCONT %s: it goes on with the records it had fetched", p.Name)
	})
}
