package ferry

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
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
