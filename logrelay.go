package ferry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// The log relay: a relay with a feed (RelayConfig.Feed) learns which
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
// the table by a polling claim. The checkpoint in <table>_lease moves past a
// transaction once the claim of its events committed: from there the table
// owns each event's fate (claimed and leased, or still NEW for a polling
// claim).

// Defaults of the log relay (RelayConfig.LogLease, LogPollInterval).
const (
	DefaultLogLease        = 15 * time.Second
	DefaultLogPollInterval = 5 * time.Second
)

// logEntry is one transaction's events read from the log, waiting for, or
// in, a claim.
type logEntry struct {
	ids     []string // not yet taken by a lane
	out     int      // taken and not yet claimed
	pos     ferrystore.LogPosition
	retries bool // some event is a retry a relay recorded (attempts > 0)
	events  bool // the transaction wrote events (else it only moves the position)
}

// logQueue holds the events read from the log until lanes claim them, and
// says up to where the log is handled: the position of the last
// transaction whose events were all claimed (or found taken).
type logQueue struct {
	mu      sync.Mutex
	entries []*logEntry
	queued  int
	handled ferrystore.LogPosition // the checkpoint to save
	// withEvents counts the entries with events handled so far: the
	// checkpointer saves at once when it moved, and otherwise only with
	// the lease's renewal (a log that moves by other tables' writes, the
	// relays' own heartbeats and checkpoints among them, is not worth a
	// write of its own).
	withEvents int64
	// tries counts the claims by id that missed an event, by id, while
	// it is tried again (see Relay.missed).
	tries map[string]int
	// scanned holds the ids of the last events a claim from the table
	// took while the relay read the log (at most maxScanned, oldest
	// forgotten first): when the log tells of them, a claim by id misses
	// them for good, and they are not tried again.
	scanned     map[string]struct{}
	scannedFIFO []string
}

// maxScanned bounds logQueue.scanned.
const maxScanned = 10000

// tookFromTable records ids a claim from the table took.
func (q *logQueue) tookFromTable(ids []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.scanned == nil {
		q.scanned = map[string]struct{}{}
	}
	for _, id := range ids {
		if len(q.scannedFIFO) == maxScanned {
			delete(q.scanned, q.scannedFIFO[0])
			q.scannedFIFO = q.scannedFIFO[1:]
		}
		q.scanned[id] = struct{}{}
		q.scannedFIFO = append(q.scannedFIFO, id)
	}
}

// maxMissTries bounds the claims by id of an event that was not
// claimable when the log told of it; the delays between them double from
// 1ms, about half a second in all.
const maxMissTries = 9

// missed files ids, which a claim by id did not take, for another try,
// and returns those to try again and after how long. An event the log
// tells of may not be visible yet: MariaDB sends a transaction to its
// binlog readers before InnoDB makes it visible, PostgreSQL decodes a
// commit before it shows in snapshots. An event still missed after
// maxMissTries is left to the table: a claim from it finds it (held back
// in ordered mode, a retry's delay, another relay's claim).
func (q *logQueue) missed(ids []string) (again []string, delay time.Duration, gaveUp bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tries == nil {
		q.tries = map[string]int{}
	}
	most := 0
	for _, id := range ids {
		if _, ok := q.scanned[id]; ok {
			delete(q.scanned, id) // taken from the table: nothing to wait for
			continue
		}
		n := q.tries[id] + 1
		if n > maxMissTries {
			delete(q.tries, id)
			gaveUp = true
			continue
		}
		q.tries[id] = n
		again = append(again, id)
		most = max(most, n)
	}
	if len(again) == 0 {
		return nil, 0, gaveUp
	}
	return again, time.Millisecond << (most - 1), gaveUp
}

// claimed forgets the tries of ids.
func (q *logQueue) claimed(ids []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.tries) == 0 {
		return
	}
	for _, id := range ids {
		delete(q.tries, id)
	}
}

func (q *logQueue) push(b ferrystore.LogBatch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := &logEntry{pos: b.Pos, events: len(b.Events) > 0}
	for _, ev := range b.Events {
		e.ids = append(e.ids, ev.ID)
		e.retries = e.retries || ev.Attempts > 0
	}
	q.entries = append(q.entries, e)
	q.queued += len(e.ids)
	q.advance()
}

// take removes up to n ids from the queue's head, and returns them with a
// function to call once their claim committed (ok) or failed.
func (q *logQueue) take(n int) ([]string, func(ok bool)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var (
		ids   []string
		from  []*logEntry
		count []int
	)
	for _, e := range q.entries {
		if len(ids) == n {
			break
		}
		if len(e.ids) == 0 {
			continue
		}
		k := min(n-len(ids), len(e.ids))
		ids = append(ids, e.ids[:k]...)
		e.ids = e.ids[k:]
		e.out += k
		from, count = append(from, e), append(count, k)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	q.queued -= len(ids)
	taken := ids
	return ids, func(ok bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		off := 0
		for i, e := range from {
			e.out -= count[i]
			if !ok {
				// Put back for another claim: the lane backs off first.
				e.ids = append(append([]string(nil), taken[off:off+count[i]]...), e.ids...)
				q.queued += count[i]
			}
			off += count[i]
		}
		q.advance()
	}
}

// advance moves handled past the entries at the head that are done.
func (q *logQueue) advance() {
	i := 0
	for ; i < len(q.entries); i++ {
		e := q.entries[i]
		if len(e.ids) > 0 || e.out > 0 {
			break
		}
		if e.pos != "" {
			q.handled = e.pos
		}
		if e.events {
			q.withEvents++
		}
	}
	if i > 0 {
		q.entries = append(q.entries[:0], q.entries[i:]...)
	}
}

func (q *logQueue) state() (queued int, handled ferrystore.LogPosition) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued, q.handled
}

// progress returns the checkpoint to save and how many entries with
// events were handled so far.
func (q *logQueue) progress() (handled ferrystore.LogPosition, withEvents int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.handled, q.withEvents
}

// reset empties the queue and sets the checkpoint to pos.
func (q *logQueue) reset(pos ferrystore.LogPosition) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries, q.queued, q.handled = nil, 0, pos
}

// LogStats describes a log relay's reading of the log (Relay.LogStats).
type LogStats struct {
	// Source names the feed; empty for a polling relay.
	Source string
	// Reading is true while this relay holds the table's log lease and
	// streams; false for a standby, or while the stream is down.
	Reading bool
	// Standby is true while another relay holds the lease: this one
	// probes the table only every LogPollInterval, as the reader does,
	// claims what it finds there, and takes the lease over when it ends.
	Standby bool
	// Checkpoint is the last position saved in <table>_lease.
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

type logFollower struct {
	hooks *relayHooks
	feed  ferrystore.LogFeed
	ckpt  ferrystore.Store
	q     logQueue
	mu    sync.Mutex
	stats LogStats
}

func (f *logFollower) update(fn func(s *LogStats)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.stats)
	if f.hooks != nil {
		f.hooks.logState(f.stats) // under mu: the hooks see the states in order
	}
}

// measureLog measures the log retained for the table every
// LogLagInterval, until Stop.
func (r *Relay) measureLog() {
	measure := func() {
		ctx, cancel := context.WithTimeout(r.workCtx, 10*time.Second)
		defer cancel()
		lag, err := r.follow.feed.Lag(ctx)
		if err != nil {
			r.log.Debug("log relay: measuring the log retained failed", "error", err)
			r.follow.update(func(s *LogStats) { s.RetainedBytes = -1 })
			return
		}
		r.follow.update(func(s *LogStats) { s.RetainedBytes, s.Head = lag.Bytes, lag.Head })
	}
	measure()
	r.every(LogLagInterval, measure)
}

// LogStats returns what the relay's log feed did; the zero LogStats for a
// polling relay.
func (r *Relay) LogStats() LogStats {
	if r.follow == nil {
		return LogStats{}
	}
	r.follow.mu.Lock()
	defer r.follow.mu.Unlock()
	return r.follow.stats
}

// logReading reports whether the relay streams its table's log now: then
// the poller only makes its safety-net probes.
func (r *Relay) logReading() bool {
	if r.follow == nil {
		return false
	}
	r.follow.mu.Lock()
	defer r.follow.mu.Unlock()
	return r.follow.stats.Reading
}

// logState says whether the relay reads the log, and whether it stands by
// for another relay that does.
func (r *Relay) logState() (reading, standby bool) {
	if r.follow == nil {
		return false, false
	}
	r.follow.mu.Lock()
	defer r.follow.mu.Unlock()
	return r.follow.stats.Reading, r.follow.stats.Standby
}

// checkLog verifies, at Start, that the database is set up for the feed.
func (r *Relay) checkLog(ctx context.Context) error {
	err := r.follow.feed.Check(ctx)
	if err != nil && !errors.Is(err, ferrystore.ErrLogGap) {
		return fmt.Errorf("log relay: %w", err)
	}
	return nil
}

// followLog runs the log feed: it waits for the table's log lease, then
// streams from the checkpoint, hands each transaction's events to the
// lanes, and saves the checkpoint as their claims commit. It returns on
// Stop.
func (r *Relay) followLog() {
	f := r.follow
	backoff := 100 * time.Millisecond
	standbyLogged := false
	for {
		select {
		case <-r.stopping:
			return
		default:
		}
		st, held, err := f.ckpt.AcquireLease(r.workCtx, ferrystore.LeaseLog, r.cfg.ID, f.feed.Source(), r.cfg.LogLease)
		pos := st.Position
		if err != nil {
			r.log.Warn("log relay: taking the log lease failed", "error", err, "retry_in", backoff)
			if !r.sleep(backoff) {
				return
			}
			backoff = min(backoff*2, r.cfg.LogLease/3)
			continue
		}
		if !held {
			f.update(func(s *LogStats) { s.Standby = true })
			if !standbyLogged {
				r.log.Info("log relay: standing by: another relay reads the table's log", "lease", r.cfg.LogLease)
				standbyLogged = true
			}
			if !r.sleep(r.cfg.LogLease / 3) {
				return
			}
			continue
		}
		standbyLogged = false
		f.update(func(s *LogStats) { s.Takeovers++; s.Standby = false })
		r.log.Info("log relay: reading the table's log", "source", f.feed.Source(), "from", string(pos))
		err = r.stream(pos)
		f.update(func(s *LogStats) { s.Reading = false })
		select {
		case <-r.stopping:
			r.saveLog(context.WithoutCancel(r.workCtx))
			if err := f.ckpt.ReleaseLease(context.WithoutCancel(r.workCtx), ferrystore.LeaseLog, r.cfg.ID); err != nil {
				r.log.Warn("log relay: releasing the log lease failed; a standby takes over when it ends", "error", err)
			}
			return
		default:
		}
		r.scan.Store(true) // the table, meanwhile
		r.kickOne()
		switch {
		case errors.Is(err, errLeaseLost):
			r.log.Warn("log relay: the log lease went to another relay; standing by")
			backoff = 100 * time.Millisecond
			continue
		case errors.Is(err, ferrystore.ErrLogGap):
			r.logGap(err)
			backoff = 100 * time.Millisecond
			continue
		}
		f.update(func(s *LogStats) { s.StreamErrors++ })
		r.log.Warn("log relay: reading the log failed; polling the table meanwhile", "error", err, "retry_in", backoff)
		if !r.sleep(backoff) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

var errLeaseLost = errors.New("log lease lost")

// logGap handles a log that no longer holds the checkpoint: nothing in it
// can be trusted to be complete, so the relay starts again from the log's
// end and claims from the table whatever is NEW. No event is skipped: the
// table holds every one.
func (r *Relay) logGap(cause error) {
	f := r.follow
	f.update(func(s *LogStats) { s.Gaps++ })
	r.log.Error("log relay: the log no longer holds the checkpoint; resuming from its end and claiming what is pending "+
		"from the table, so no event is skipped", "error", cause)
	if rs, ok := f.feed.(interface{ Reset(context.Context) error }); ok {
		if err := rs.Reset(r.workCtx); err != nil {
			r.log.Error("log relay: resetting the feed failed", "error", err)
			return
		}
	}
	head, err := f.feed.Position(r.workCtx)
	if err != nil {
		r.log.Error("log relay: reading the log's end failed", "error", err)
		return
	}
	f.q.reset(head)
	if _, err := f.ckpt.RenewLease(r.workCtx, ferrystore.LeaseLog, r.cfg.ID, head, r.cfg.LogLease); err != nil {
		r.log.Error("log relay: saving the checkpoint failed", "error", err)
	}
	r.scan.Store(true)
	r.kickOne()
}

// stream reads the log from pos (from its end when empty) until Stop, an
// error, or the loss of the lease.
func (r *Relay) stream(pos ferrystore.LogPosition) error {
	f := r.follow
	ctx, cancel := context.WithCancelCause(r.workCtx)
	defer cancel(nil)
	if pos == "" {
		// First start: the log from now on, and what the table holds
		// already by a polling claim (kicked by Start).
		head, err := f.feed.Position(ctx)
		if err != nil {
			return err
		}
		pos = head
		if saved, err := f.ckpt.RenewLease(ctx, ferrystore.LeaseLog, r.cfg.ID, pos, r.cfg.LogLease); err != nil {
			return err
		} else if !saved {
			return errLeaseLost
		}
		r.scan.Store(true)
		r.kickOne()
	}
	f.q.reset(pos)
	f.update(func(s *LogStats) { s.Reading, s.Checkpoint = true, pos })

	// The checkpointer saves the position handled as soon as events were
	// handled, and renews the lease (saving the position too) every
	// LogLease/3: an idle relay writes once per renewal, however busy
	// the database's other tables are.
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.LogCheckpointInterval)
		defer t.Stop()
		renew := time.Now()
		_, savedEvents := f.q.progress()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.stopping:
				cancel(nil)
				return
			case <-t.C:
			}
			handled, events := f.q.progress()
			if time.Since(renew) < r.cfg.LogLease/3 && (handled == f.checkpoint() || events == savedEvents) {
				continue
			}
			renew = time.Now()
			saved, err := f.ckpt.RenewLease(ctx, ferrystore.LeaseLog, r.cfg.ID, handled, r.cfg.LogLease)
			switch {
			case err != nil:
				r.log.Warn("log relay: saving the checkpoint failed", "error", err)
			case !saved:
				cancel(errLeaseLost)
				return
			default:
				savedEvents = events
				f.feed.Flushed(handled)
				f.update(func(s *LogStats) { s.Checkpoint = handled; s.Checkpoints++ })
			}
		}
	}()
	err := f.feed.Stream(ctx, pos, func(_ context.Context, b ferrystore.LogBatch) error {
		f.update(func(s *LogStats) {
			s.Batches++
			s.Events += int64(len(b.Events))
			if !b.Committed.IsZero() {
				s.LastEvent = b.Committed
			}
		})
		f.q.push(b)
		if len(b.Events) > 0 {
			for range (len(b.Events) + r.cfg.BatchSize - 1) / r.cfg.BatchSize {
				r.kickOne()
			}
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

// checkpoint returns the checkpoint last saved.
func (f *logFollower) checkpoint() ferrystore.LogPosition {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats.Checkpoint
}

// saveLog saves the position handled, at Stop.
func (r *Relay) saveLog(ctx context.Context) {
	f := r.follow
	_, handled := f.q.state()
	if handled == "" {
		return
	}
	if saved, err := f.ckpt.RenewLease(ctx, ferrystore.LeaseLog, r.cfg.ID, handled, r.cfg.LogLease); err == nil && saved {
		f.feed.Flushed(handled)
		f.update(func(s *LogStats) { s.Checkpoint = handled; s.Checkpoints++ })
	}
}

// retryMissed tries again, after a short delay, the ids of a claim by id
// that it did not take (got are those it took).
func (r *Relay) retryMissed(ids, got []string) {
	q := &r.follow.q
	q.claimed(got)
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
	again, delay, gaveUp := q.missed(missed)
	r.follow.update(func(s *LogStats) {
		s.Missed += int64(len(missed))
		s.GivenUp += int64(len(missed) - len(again))
	})
	if gaveUp {
		// Left to the table: a claim from it now rather than at the next
		// probe (one claim; it finds nothing when they were taken).
		r.scan.Store(true)
		r.kickOne()
	}
	if len(again) == 0 {
		return
	}
	time.AfterFunc(delay, func() {
		b := ferrystore.LogBatch{Events: make([]ferrystore.LogEvent, len(again))}
		for i, id := range again {
			b.Events[i].ID = id
		}
		q.push(b)
		r.kickOne()
	})
}

func msgIDs(msgs []ferrytype.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].ID
	}
	return out
}
