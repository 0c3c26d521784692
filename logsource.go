package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/runner"
)

// The log relay: a relay with a feed (RelayConfig.Log.Feed) learns which
// events became NEW from the database's log of committed changes, and
// claims them by id (ferrystore.ClaimParams.IDs) as soon as their
// transaction commits, instead of probing the table.
//
// The log is a source of ids, never of truth. Every event is still claimed
// from the table, under a lease token, and its outcome recorded there, by
// the same state machine as a polling claim: so the log relay and polling
// relays may serve one table together without ever publishing an event
// concurrently, ordered mode holds back an aggregate's later events in
// the claim itself, and what the log misses (a gap, an outage of the
// replication connection, a retry whose delay has not passed) is found in
// the table by a polling claim. The checkpoint moves past a transaction
// once the claim of its events committed: from there the table owns each
// event's fate (claimed and leased, or still NEW for a polling claim).

// LogStats describes a log relay's reading of the log (Relay.LogStats).
type LogStats struct {
	// Source names the feed; empty for a polling relay.
	Source string
	// Reading is true while this relay holds the table's log lease and
	// streams; false for a standby, or while the stream is down.
	Reading bool
	// Standby is true while another relay holds the lease: this one
	// probes the table only every Log.PollInterval, as the reader does,
	// claims what it finds there, and takes the lease over when it ends.
	Standby bool
	// Checkpoint is the last position saved with the table's log lease.
	Checkpoint ferrystore.LogPosition
	// Batches and Events count the transactions and events read from the
	// log; Checkpoints the checkpoints saved; Takeovers the times this
	// relay took the lease; Gaps the times the log no longer held the
	// checkpoint (the relay fell back to the table); StreamErrors the
	// streams that ended on another error.
	Batches, Events, Checkpoints, Takeovers, Gaps, StreamErrors int64
	// Missed counts the events a claim by id did not take (not yet
	// visible, taken by another relay, held back, not available yet),
	// each time; GivenUp those left to the table after maxMissTries.
	Missed, GivenUp int64
	// LastEvent is when the last transaction read from the log committed,
	// by the database's clock; zero before any.
	LastEvent time.Time
	// RetainedBytes is the log the database keeps for the table's log
	// relay, as last measured (ferrystore.LogFeed.Lag, every
	// LogLagInterval, by the reader and the standbys alike): on
	// PostgreSQL the WAL its slot holds, which grows without bound while
	// no relay reads it. -1 before the first measure or when it failed.
	RetainedBytes int64
	// Head is the log's end at that measure.
	Head ferrystore.LogPosition
}

// LogLagInterval is how often a log relay measures the log its database
// retains for it (LogStats.RetainedBytes).
const LogLagInterval = 15 * time.Second

// logSource is the log relay's claim source: the ids its feed reads from
// the log, queued until a lane claims them, with the table source below
// it for what the log cannot tell and for the times the stream is down.
// It holds the table's log lease while it reads, and saves the checkpoint
// behind the claims.
type logSource struct {
	table *tableSource // probes and wake-ups; only a safety net while the log is read
	feed  ferrystore.LogFeed
	// lease is the table's log lease (ferrystore.LeaseLog), which holds
	// the checkpoint: the relays' one leadership mechanism, as for the
	// table's maintenance.
	lease *lease
	cfg   *RelayConfig
	wake  *waker
	log   *slog.Logger
	hooks *relayHooks

	q logQueue
	// held is set when events the log told of may wait in the table for
	// a claim from it (ordered mode): the next settled batch then asks for
	// one.
	held atomic.Bool

	mu    sync.Mutex
	stats LogStats
}

var _ claimSource = (*logSource)(nil)

func newLogSource(table *tableSource, store ferrystore.Store, id string, cfg *RelayConfig, log *slog.Logger,
	hooks *relayHooks) *logSource {
	s := &logSource{table: table, feed: cfg.Log.Feed, cfg: cfg, wake: table.wake, log: log, hooks: hooks,
		lease: &lease{store: store, name: ferrystore.LeaseLog, owner: id, source: cfg.Log.Feed.Source(), ttl: cfg.Log.Lease}}
	// While the log tells of new events, to this relay or to the one it
	// stands by for, the table is probed only as a safety net (for a
	// standby, also for the events of a reader that died, until its lease
	// ends).
	table.slowEvery = cfg.Log.PollInterval
	s.stats.Source = s.feed.Source()
	s.stats.RetainedBytes = -1
	return s
}

func (s *logSource) kind() string { return ferrystore.RelaySourceLog }

// start verifies that the database is set up for the feed, then starts
// the table source, the follower of the log and the measure of the log
// retained.
func (s *logSource) start(ctx context.Context, run *runner.Runner) error {
	if err := s.feed.Check(ctx); err != nil && !errors.Is(err, ferrystore.ErrLogGap) {
		return fmt.Errorf("log relay: %w", err)
	}
	s.wake.scan.Store(true) // the first look is at the table
	if err := s.table.start(ctx, run); err != nil {
		return err
	}
	run.Go(func() { s.follow(run) })
	run.Go(func() { s.measure(run) })
	return nil
}

// next claims, in turn: the table when asked to (at start, after a gap,
// for retries and held-back events, after a probe found events ready),
// the ids the log told of, or, while the stream is down, the table as a
// polling relay does. A standby claims only when asked to: a wake-up
// (PostgreSQL's NOTIFY) is for the reader.
func (s *logSource) next(limit int) (claimReq, bool) {
	if s.wake.scan.CompareAndSwap(true, false) {
		return claimReq{}, true
	}
	if ids, done := s.q.take(limit); ids != nil {
		return claimReq{ids: ids, done: done}, true
	}
	if reading, standby := s.state(); reading || standby {
		return claimReq{}, false
	}
	return claimReq{}, true
}

func (s *logSource) claimed(c claimReq, got []string, malformed int, err error) {
	if c.done != nil {
		c.done(err == nil)
	}
	s.table.claimed(c, got, malformed, err)
	if err != nil {
		return
	}
	msgs := len(got) - malformed
	switch {
	case c.ids != nil && len(got) < len(c.ids):
		s.retryMissed(c.ids, got)
	case c.ids != nil && msgs > 0:
		s.q.claimed(got)
	case c.ids == nil && msgs > 0 && s.reading():
		s.q.tookFromTable(got)
	}
	if c.ids == nil && len(got) == s.cfg.BatchSize {
		// A full batch from the table: more may wait there (a backlog at
		// start, after a gap or an outage of the stream), claimed from it
		// until a batch comes back short, as a polling relay drains.
		s.wake.scan.Store(true)
	}
	if s.cfg.Ordered {
		switch {
		case c.ids != nil && len(got) < len(c.ids):
			// Some were not claimable, held back behind their
			// aggregate's previous event (or not available yet, or
			// taken by another relay): the table is asked after the
			// next batch settles.
			s.held.Store(true)
		case c.ids == nil && msgs > 0:
			// A claim from the table found events: their aggregates'
			// next events may wait behind them.
			s.held.Store(true)
		}
	}
}

func (s *logSource) settled(b batchOutcome) {
	if b.retryIn >= 0 {
		// The log tells of the retry at once, before its delay ends: the
		// table is asked when it has.
		time.AfterFunc(b.retryIn+10*time.Millisecond, s.wake.wakeScan)
	}
	if s.held.Swap(false) {
		s.wake.wakeScan()
	}
}

func (s *logSource) idle() bool {
	if queued, _ := s.q.state(); queued > 0 {
		return true // the claim was from the table; the log's events wait
	}
	return s.table.idle()
}

// update changes the stats under their lock, and tells the hooks and the
// table source (which probes only as a safety net while the log is read).
func (s *logSource) update(fn func(st *LogStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.stats)
	s.table.slow.Store(s.stats.Reading || s.stats.Standby)
	s.hooks.logState(s.stats) // under mu: the hooks see the states in order
}

// Stats returns the log source's stats.
func (s *logSource) Stats() LogStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// reading reports whether the relay streams its table's log now.
func (s *logSource) reading() bool {
	r, _ := s.state()
	return r
}

// state says whether the relay reads the log, and whether it stands by for
// another relay that does.
func (s *logSource) state() (reading, standby bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Reading, s.stats.Standby
}

// checkpoint returns the checkpoint last saved.
func (s *logSource) checkpoint() ferrystore.LogPosition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Checkpoint
}

// measure measures the log retained for the table every LogLagInterval,
// until Stop.
func (s *logSource) measure(run *runner.Runner) {
	measure := func() {
		ctx, cancel := context.WithTimeout(run.Context(), 10*time.Second)
		defer cancel()
		lag, err := s.feed.Lag(ctx)
		if err != nil {
			s.log.Debug("log relay: measuring the log retained failed", "error", err)
			s.update(func(st *LogStats) { st.RetainedBytes = -1 })
			return
		}
		s.update(func(st *LogStats) { st.RetainedBytes, st.Head = lag.Bytes, lag.Head })
	}
	measure()
	run.Every(LogLagInterval, measure)
}

var errLeaseLost = errors.New("log lease lost")

// follow waits for the table's log lease, then streams from the
// checkpoint, queues each transaction's events for the lanes, and saves
// the checkpoint as their claims commit. It returns on Stop, saving the
// checkpoint and releasing the lease.
func (s *logSource) follow(run *runner.Runner) {
	ctx := run.Context()
	backoff := 100 * time.Millisecond
	standbyLogged := false
	for {
		select {
		case <-run.Stopping():
			return
		default:
		}
		st, held, err := s.lease.acquire(ctx)
		pos := st.Position
		if err != nil {
			s.log.Warn("log relay: taking the log lease failed", "error", err, "retry_in", backoff)
			if !run.Sleep(backoff) {
				return
			}
			backoff = min(backoff*2, s.cfg.Log.Lease/3)
			continue
		}
		if !held {
			s.update(func(st *LogStats) { st.Standby = true })
			if !standbyLogged {
				s.log.Info("log relay: standing by: another relay reads the table's log", "lease", s.cfg.Log.Lease)
				standbyLogged = true
			}
			if !run.Sleep(s.cfg.Log.Lease / 3) {
				return
			}
			continue
		}
		standbyLogged = false
		s.update(func(st *LogStats) { st.Takeovers++; st.Standby = false })
		s.log.Info("log relay: reading the table's log", "source", s.feed.Source(), "from", string(pos))
		err = s.stream(run, pos)
		s.update(func(st *LogStats) { st.Reading = false })
		select {
		case <-run.Stopping():
			s.save(context.WithoutCancel(ctx))
			if err := s.lease.release(context.WithoutCancel(ctx)); err != nil {
				s.log.Warn("log relay: releasing the log lease failed; a standby takes over when it ends", "error", err)
			}
			return
		default:
		}
		s.wake.wakeScan() // the table, meanwhile
		switch {
		case errors.Is(err, errLeaseLost):
			s.log.Warn("log relay: the log lease went to another relay; standing by")
			backoff = 100 * time.Millisecond
			continue
		case errors.Is(err, ferrystore.ErrLogGap):
			s.gap(ctx, err)
			backoff = 100 * time.Millisecond
			continue
		}
		s.update(func(st *LogStats) { st.StreamErrors++ })
		s.log.Warn("log relay: reading the log failed; polling the table meanwhile", "error", err, "retry_in", backoff)
		if !run.Sleep(backoff) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// gap handles a log that no longer holds the checkpoint: nothing in it can
// be trusted to be complete, so the relay starts again from the log's end
// and claims from the table whatever is NEW. No event is skipped: the
// table holds every one.
func (s *logSource) gap(ctx context.Context, cause error) {
	s.update(func(st *LogStats) { st.Gaps++ })
	s.log.Error("log relay: the log no longer holds the checkpoint; resuming from its end and claiming what is pending "+
		"from the table, so no event is skipped", "error", cause)
	if rs, ok := s.feed.(interface{ Reset(context.Context) error }); ok {
		if err := rs.Reset(ctx); err != nil {
			s.log.Error("log relay: resetting the feed failed", "error", err)
			return
		}
	}
	head, err := s.feed.Position(ctx)
	if err != nil {
		s.log.Error("log relay: reading the log's end failed", "error", err)
		return
	}
	s.q.reset(head)
	if _, err := s.lease.renew(ctx, head); err != nil {
		s.log.Error("log relay: saving the checkpoint failed", "error", err)
	}
	s.wake.wakeScan()
}

// stream reads the log from pos (from its end when empty) until Stop, an
// error, or the loss of the lease.
func (s *logSource) stream(run *runner.Runner, pos ferrystore.LogPosition) error {
	ctx, cancel := context.WithCancelCause(run.Context())
	defer cancel(nil)
	if pos == "" {
		// First start: the log from now on, and what the table holds
		// already by a claim from it (asked for at start).
		head, err := s.feed.Position(ctx)
		if err != nil {
			return err
		}
		pos = head
		if saved, err := s.lease.renew(ctx, pos); err != nil {
			return err
		} else if !saved {
			return errLeaseLost
		}
		s.wake.wakeScan()
	}
	s.q.reset(pos)
	s.update(func(st *LogStats) { st.Reading, st.Checkpoint = true, pos })

	// The checkpointer saves the position handled as soon as events were
	// handled, and renews the lease (saving the position too) every
	// Log.Lease/3: an idle relay writes once per renewal, however busy
	// the database's other tables are.
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.Log.CheckpointInterval)
		defer t.Stop()
		renew := time.Now()
		_, savedEvents := s.q.progress()
		for {
			select {
			case <-ctx.Done():
				return
			case <-run.Stopping():
				cancel(nil)
				return
			case <-t.C:
			}
			handled, events := s.q.progress()
			if time.Since(renew) < s.cfg.Log.Lease/3 && (handled == s.checkpoint() || events == savedEvents) {
				continue
			}
			renew = time.Now()
			saved, err := s.lease.renew(ctx, handled)
			switch {
			case err != nil:
				s.log.Warn("log relay: saving the checkpoint failed", "error", err)
			case !saved:
				cancel(errLeaseLost)
				return
			default:
				savedEvents = events
				s.feed.Flushed(handled)
				s.update(func(st *LogStats) { st.Checkpoint = handled; st.Checkpoints++ })
			}
		}
	}()
	err := s.feed.Stream(ctx, pos, func(_ context.Context, b ferrystore.LogBatch) error {
		s.update(func(st *LogStats) {
			st.Batches++
			st.Events += int64(len(b.Events))
			if !b.Committed.IsZero() {
				st.LastEvent = b.Committed
			}
		})
		s.q.push(b)
		for range (len(b.Events) + s.cfg.BatchSize - 1) / s.cfg.BatchSize {
			s.wake.wake()
		}
		return nil
	})
	cancel(nil)
	<-done
	if c := context.Cause(ctx); errors.Is(c, errLeaseLost) {
		return errLeaseLost
	}
	return err
}

// save saves the position handled, at Stop.
func (s *logSource) save(ctx context.Context) {
	_, handled := s.q.state()
	if handled == "" {
		return
	}
	if saved, err := s.lease.renew(ctx, handled); err == nil && saved {
		s.feed.Flushed(handled)
		s.update(func(st *LogStats) { st.Checkpoint = handled; st.Checkpoints++ })
	}
}

// retryMissed tries again, after a short delay, the ids of a claim by id
// that it did not take (got are those it took).
func (s *logSource) retryMissed(ids, got []string) {
	s.q.claimed(got)
	took := make(map[string]bool, len(got))
	for _, id := range got {
		took[id] = true
	}
	var missed []string
	for _, id := range ids {
		if !took[id] {
			missed = append(missed, id)
		}
	}
	again, delay, gaveUp := s.q.missed(missed)
	s.update(func(st *LogStats) {
		st.Missed += int64(len(missed))
		st.GivenUp += int64(len(missed) - len(again))
	})
	if gaveUp {
		// Left to the table: a claim from it now rather than at the next
		// probe (one claim; it finds nothing when they were taken).
		s.wake.wakeScan()
	}
	if len(again) == 0 {
		return
	}
	time.AfterFunc(delay, func() {
		b := ferrystore.LogBatch{Events: make([]ferrystore.LogEvent, len(again))}
		for i, id := range again {
			b.Events[i].ID = id
		}
		s.q.push(b)
		s.wake.wake()
	})
}
