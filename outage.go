package ferry

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// outage tracks a broker outage: from the first sign that publishes cannot
// leave the process (the publisher reports no connection, or a batch came
// back not sent) to the first batch that reaches the broker again, or the
// publisher reporting its connection back. It is logged once at each end.
// The lanes ask it before each claim (down) and tell it each batch's
// outcome (observe); the heartbeat reads it (state).
type outage struct {
	// conn is the publisher's connectivity, nil when it has none.
	conn    ferrybroker.Connectivity
	store   ferrystore.Store
	poll    time.Duration
	log     *slog.Logger
	outages *atomic.Int64

	mu    sync.Mutex
	since time.Time // zero: no outage
	// byConn is true while the publisher's Connectivity gates claims; false
	// when the outage was seen in results only, and claims are then tried
	// again after backoff.
	byConn bool
	// heldBack counts the publishes given back not sent during the
	// outage; what was never claimed meanwhile is logged as pending.
	heldBack int64
	nextTry  time.Time
	backoff  time.Duration
	// cause is what started the outage, for the heartbeat.
	cause error
	// ended is when the last outage ended.
	ended time.Time
}

func newOutage(pub ferrybroker.Publisher, store ferrystore.Store, poll time.Duration, log *slog.Logger, outages *atomic.Int64) *outage {
	o := &outage{store: store, poll: poll, log: log, outages: outages}
	o.conn, _ = pub.(ferrybroker.Connectivity)
	return o
}

// down reports whether the relay should claim nothing now: the publisher
// reports its connection down, or a batch came back not sent less than the
// trial backoff ago.
func (o *outage) down(ctx context.Context) bool {
	if o.conn != nil {
		if err := o.conn.Disconnected(); err != nil {
			o.begin(err, true)
			return true
		}
	}
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return false
	}
	if o.byConn {
		// The connection is back: claim again at once.
		o.mu.Unlock()
		o.end(ctx)
		return false
	}
	wait := time.Now().Before(o.nextTry)
	o.mu.Unlock()
	return wait
}

// observe takes a batch's outcome: results that never left the process
// start (or extend) an outage; a batch the broker answered ends it.
func (o *outage) observe(ctx context.Context, b batchOutcome) {
	switch {
	case b.notSent > 0 && o.tail(b):
		// A publish begun before the last outage ended, which came back
		// after it: the outage's tail, not a new one. A publish begun
		// since then tells whether the broker is down again.
	case b.notSent > 0:
		o.begin(b.notSentErr, false)
		o.mu.Lock()
		o.heldBack += int64(b.notSent)
		o.mu.Unlock()
	case b.answered && !o.before(b):
		o.end(ctx) // the broker answered, and every message left
	}
}

// tail reports whether b, a batch with messages not sent, was published
// before the last outage ended, with no outage since.
func (o *outage) tail(b batchOutcome) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.since.IsZero() && !b.published.IsZero() && b.published.Before(o.ended)
}

// before reports whether b was published before the current outage
// began: the broker's answer to it says nothing of the broker since.
func (o *outage) before(b batchOutcome) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero() && !b.published.IsZero() && b.published.Before(o.since)
}

// begin records a sign of an outage caused by cause; byConn says whether
// the publisher's connectivity reported it (else a batch's results did).
// The first sign starts the outage and is logged.
func (o *outage) begin(cause error, byConn bool) {
	o.mu.Lock()
	start := o.since.IsZero()
	if start {
		o.since, o.heldBack, o.backoff, o.cause = time.Now(), 0, 0, cause
		o.outages.Add(1)
	}
	o.byConn = byConn
	if !byConn {
		// Results say the broker is unreachable although the publisher
		// (if it can tell) says otherwise: try again after a backoff.
		o.backoff = min(max(o.backoff*2, o.poll, 10*time.Millisecond), max(o.poll, time.Second))
		o.nextTry = time.Now().Add(o.backoff)
	}
	o.mu.Unlock()
	if start {
		msg := "<nil>"
		if cause != nil {
			msg = ferrytype.RedactURL(cause.Error())
		}
		o.log.Warn("broker unreachable: claiming paused, pending events stay NEW and spend no attempt",
			"cause", msg)
	}
}

// end ends the outage, if any, and logs how long it lasted.
func (o *outage) end(ctx context.Context) {
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return
	}
	took, held := time.Since(o.since), o.heldBack
	o.since, o.heldBack, o.backoff, o.nextTry, o.byConn, o.cause = time.Time{}, 0, 0, time.Time{}, false, nil
	o.ended = time.Now()
	o.mu.Unlock()
	attrs := []any{"outage", took.Round(time.Millisecond), "held_back", held}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if st, err := o.store.Stats(ctx); err == nil {
		attrs = append(attrs, "pending", st.New)
	}
	o.log.Info("broker reachable again: claiming resumed", attrs...)
}

// state says whether a publish made now could reach the broker, and why
// not (redacted): the publisher's connectivity when it reports one, and an
// outage seen in results.
func (o *outage) state() (bool, string) {
	if o.conn != nil {
		if err := o.conn.Disconnected(); err != nil {
			return false, ferrytype.RedactURL(err.Error())
		}
	}
	o.mu.Lock()
	down, byConn, cause := !o.since.IsZero(), o.byConn, o.cause
	o.mu.Unlock()
	if !down || byConn {
		// byConn: the publisher reported the outage, and now reports its
		// connection back.
		return true, ""
	}
	msg := "publishes came back not sent"
	if cause != nil {
		msg = ferrytype.RedactURL(cause.Error())
	}
	return false, msg
}
