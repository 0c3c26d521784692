// Package runner is the start/stop base of ferry's long-running parts: the
// relay, the consumers and the metric collectors. A part embeds a Runner
// and gets the same contract everywhere: Start once (ferrytype.ErrClosed
// after Stop), goroutines Stop waits for, a work context that keeps the
// start context's values (a fault-injection Func among them) but not its
// deadline, and a Stop that is safe twice or before Start, that lets work
// in flight finish and that, when its context ends first, cancels the
// work context.
package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// ErrStarted is returned by Start on a runner already started.
var ErrStarted = errors.New("already started")

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// Runner holds a part's running state. The zero Runner is new.
type Runner struct {
	mu       sync.Mutex
	state    int
	stopping chan struct{}
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Start starts the runner and runs start, under the runner's lock, with
// the work context; start may call Go. When start fails, the runner's
// goroutines started by it are stopped and the runner stays new. It
// returns ferrytype.ErrClosed after Stop, ErrStarted when started, and
// ctx's error when ctx already ended.
func (r *Runner) Start(ctx context.Context, start func(ctx context.Context) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.state == stateStopped:
		return ferrytype.ErrClosed
	case r.state == stateStarted:
		return ErrStarted
	case ctx.Err() != nil:
		return ctx.Err()
	}
	r.stopping, r.done = make(chan struct{}), make(chan struct{})
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if start != nil {
		if err := start(r.ctx); err != nil {
			close(r.stopping)
			r.cancel()
			r.wg.Wait()
			return err
		}
	}
	r.state = stateStarted
	go func() {
		<-r.stopping
		r.wg.Wait()
		close(r.done)
	}()
	return nil
}

// Go runs fn on a goroutine that Stop waits for. Call it from start or
// from a goroutine of the runner.
func (r *Runner) Go(fn func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn()
	}()
}

// Context is the work context: the start context's values, cancelled when
// Stop gives up waiting. Nil before Start.
func (r *Runner) Context() context.Context { return r.ctx }

// Stopping is closed by Stop: take no new work. Nil before Start.
func (r *Runner) Stopping() <-chan struct{} { return r.stopping }

// Running reports whether the runner was started and not yet stopped.
func (r *Runner) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state == stateStarted
}

// Sleep waits d or until Stop; it reports whether the runner still runs.
func (r *Runner) Sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopping:
		return false
	case <-t.C:
		return true
	}
}

// Every calls fn every d until Stop, on the caller's goroutine.
func (r *Runner) Every(d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-r.stopping:
			return
		case <-t.C:
			fn()
		}
	}
}

// Stop stops the runner: it closes Stopping, calls halt (when not nil:
// what makes the goroutines return, a receive loop's drain), and waits for
// the goroutines. When ctx ends first it cancels the work context and
// returns ctx's error without waiting further (Done tells when they
// ended). first says whether this call stopped it; stopping twice, or a
// runner never started, is safe and returns (false, nil).
func (r *Runner) Stop(ctx context.Context, halt func()) (first bool, err error) {
	r.mu.Lock()
	if r.state != stateStarted {
		r.state = stateStopped
		r.mu.Unlock()
		return false, nil
	}
	r.state = stateStopped
	close(r.stopping)
	r.mu.Unlock()
	if halt != nil {
		halt()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	r.cancel()
	return true, err
}

// Done is closed once the runner was stopped and its goroutines ended;
// nil before Start.
func (r *Runner) Done() <-chan struct{} { return r.done }
