package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// pipeline publishes a claimed batch and records each event's outcome
// under the claim's lease token: SENT after a confirm of that very
// message, back to NEW (given back, or after the retry policy's delay) or
// DEAD otherwise. It returns what the batch says of the broker and of the
// events put back, for the lanes to pass on; it calls nothing of theirs.
type pipeline struct {
	store   ferrystore.Store
	pub     ferrybroker.Publisher
	retry   RetryPolicy
	timeout time.Duration
	log     *slog.Logger
	hooks   *relayHooks
	c       *relayCounters
}

// batchOutcome is what a published batch says.
type batchOutcome struct {
	// abandoned: a fault point abandoned the batch; nothing was recorded.
	abandoned bool
	// answered: every message left the process and the broker answered at
	// least one (confirmed, returned or rejected).
	answered bool
	// notSent counts the messages that never left the process
	// (ferrytype.ErrNotSent), notSentErr the cause of one of them.
	notSent    int
	notSentErr error
	// retryIn is the shortest delay of the events put back to NEW by the
	// retry policy; negative when none was.
	retryIn time.Duration
	// published is when the batch's publish began.
	published time.Time
}

// run publishes msgs, claimed under token until leaseEnd, and settles
// them.
func (p *pipeline) run(ctx context.Context, token string, leaseEnd time.Time, msgs []ferrytype.Message) batchOutcome {
	pubCtx, cancel := context.WithTimeout(ctx, p.timeout)
	start := time.Now()
	results := p.pub.Publish(pubCtx, msgs)
	cancel()
	if len(results) != len(msgs) {
		p.log.Error("publisher returned the wrong number of results; treating all as unknown",
			"want", len(msgs), "got", len(results))
		results = ferrybroker.AllUnknown(len(msgs), errors.New("publisher returned the wrong number of results"))
	}
	p.hooks.publish(msgs, results, time.Since(start))
	if err := ferryfault.At(ctx, ferryfault.RelayAfterPublish); err != nil {
		p.log.Warn("fault after publish: outcomes not recorded", "token", token, "events", len(msgs), "error", err)
		return batchOutcome{abandoned: true, retryIn: -1}
	}
	out := p.settle(ctx, token, leaseEnd, msgs, results)
	out.published = start
	return out
}

// outcomes is a batch's results sorted by the mark each needs.
type outcomes struct {
	sent   []string             // confirmed: marked SENT
	fails  []ferrystore.Failure // returned, rejected or unknown: through the retry policy
	unsent []string             // never left the process: given back
	// With a hook that counts by destination: the messages marked SENT,
	// in order, and the destination of each failed one.
	sentMsgs []*ferrytype.Message
	route    map[string]string
}

// settle records each message's outcome under the claim's lease token.
func (p *pipeline) settle(ctx context.Context, token string, leaseEnd time.Time, msgs []ferrytype.Message,
	results []ferrytype.PublishResult) batchOutcome {
	out := batchOutcome{retryIn: -1}
	o := p.sort(ctx, token, msgs, results, &out)
	if out.notSent = len(o.unsent); out.notSent > 0 {
		out.answered = false
		p.c.notSent.Add(int64(len(o.unsent)))
		p.release(ctx, token, leaseEnd, o.unsent)
	}
	if len(o.sent) > 0 {
		p.markSent(ctx, token, leaseEnd, o.sent, o.sentMsgs)
	}
	if len(o.fails) > 0 {
		out.retryIn = p.markFailed(ctx, token, leaseEnd, o.fails, o.route)
	}
	return out
}

// sort sorts a batch's results by the mark each needs, counts and logs
// each failure, and notes in out what the batch says of the broker.
func (p *pipeline) sort(ctx context.Context, token string, msgs []ferrytype.Message, results []ferrytype.PublishResult,
	out *batchOutcome) outcomes {
	o := outcomes{sent: make([]string, 0, len(msgs))}
	wantDest := p.hooks.wantDestinations()
	for i := range msgs {
		m, res := &msgs[i], results[i]
		if res.Outcome != ferrytype.OutcomeUnknown {
			out.answered = true
		}
		if res.Outcome == ferrytype.OutcomeConfirmed {
			if err := ferryfault.At(ctx, ferryfault.RelayLoseConfirm); err != nil {
				res = ferrytype.Unknown(fmt.Errorf("confirm lost: %w", err))
			}
		}
		if res.NotSent() {
			// It never left the process: not the event's fault.
			o.unsent = append(o.unsent, m.ID)
			out.notSentErr = res.Err
			continue
		}
		switch res.Outcome {
		case ferrytype.OutcomeConfirmed:
			o.sent = append(o.sent, m.ID)
			if wantDest {
				o.sentMsgs = append(o.sentMsgs, m)
			}
			if res.Duplicate {
				p.c.duplicates.Add(1)
			}
			continue
		case ferrytype.OutcomeReturned:
			p.c.returned.Add(1)
		case ferrytype.OutcomeRejected:
			p.c.rejected.Add(1)
		default:
			p.c.unknown.Add(1)
		}
		delay, dead := p.retry.Next(m.Attempt, res)
		msg := res.Outcome.String()
		if res.Err != nil {
			msg += ": " + res.Err.Error()
		}
		o.fails = append(o.fails, ferrystore.Failure{ID: m.ID, Token: token, Dead: dead, Delay: delay,
			Error: fmt.Sprintf("attempt %d: %s", m.Attempt, msg)})
		if wantDest {
			if o.route == nil {
				o.route = map[string]string{}
			}
			o.route[m.ID] = m.Route()
		}
		level := slog.LevelWarn
		if dead {
			level = slog.LevelError
		}
		p.log.Log(ctx, level, "publish not confirmed", "event_id", m.ID, "event_type", m.Type,
			"attempt", m.Attempt, "outcome", res.Outcome.String(), "error", res.Err, "dead", dead, "retry_in", delay)
	}
	return o
}

// release gives back to NEW the events whose publish never left the
// process, with the claim's attempt taken back.
func (p *pipeline) release(ctx context.Context, token string, leaseEnd time.Time, ids []string) {
	n, err := retryMark(ctx, leaseEnd, func() (int64, error) { return p.store.Release(ctx, token, ids) })
	if err != nil {
		p.c.errors.Add(1)
		p.log.Error("giving back unsent events failed; the sweeper will return them after their lease",
			"error", err, "token", token, "events", len(ids))
		return
	}
	p.c.released.Add(n)
	p.hooks.release(n)
	p.fenced(token, int64(len(ids))-n)
}

// markSent marks SENT the confirmed events; msgs are their messages when
// a hook counts by destination.
func (p *pipeline) markSent(ctx context.Context, token string, leaseEnd time.Time, ids []string, msgs []*ferrytype.Message) {
	n, err := retryMark(ctx, leaseEnd, func() (int64, error) { return p.store.MarkSent(ctx, token, ids) })
	if err != nil {
		p.c.errors.Add(1)
		p.log.Error("mark sent failed; the events will be published again after their lease", "error", err,
			"token", token, "events", len(ids))
		return
	}
	p.c.confirmed.Add(n)
	p.hooks.settle(n, 0, 0)
	if p.hooks.wantDestinations() {
		// Fenced rows (fewer than asked) are not known by id: count the
		// first n in batch order.
		var t destTally
		for _, m := range msgs[:min(int(n), len(msgs))] {
			t.add(m.Route(), 1, 0, 0)
		}
		p.hooks.settleDest(t)
	}
	p.fenced(token, int64(len(ids))-n)
}

// markFailed records the failed attempts through the retry policy, and
// returns the shortest delay of the events put back to NEW (negative when
// none was).
func (p *pipeline) markFailed(ctx context.Context, token string, leaseEnd time.Time, fails []ferrystore.Failure,
	route map[string]string) time.Duration {
	res, err := retryMark(ctx, leaseEnd, func() (ferrystore.MarkFailedResult, error) { return p.store.MarkFailed(ctx, fails) })
	if err != nil {
		p.c.errors.Add(1)
		p.log.Error("mark failed attempts failed; the sweeper will return the events", "error", err, "token", token)
		return -1
	}
	recordFailed(p.c, p.hooks, res, route)
	p.fenced(token, int64(len(res.Fenced)))
	if len(res.Retried) == 0 {
		return -1
	}
	return minDelay(fails)
}

// recordFailed counts and reports what MarkFailed did, for a batch's
// settle or for the maintainer returning claims. route gives each id's
// destination, for the hooks that count by destination.
func recordFailed(c *relayCounters, h *relayHooks, res ferrystore.MarkFailedResult, route map[string]string) {
	retried, dead := int64(len(res.Retried)), int64(len(res.Dead))
	c.dead.Add(dead)
	c.retried.Add(retried)
	h.settle(0, retried, dead)
	if h.wantDestinations() {
		h.settleDest(tallyFailed(res, route))
	}
}

// minDelay is the shortest delay of fails that go back to NEW.
func minDelay(fails []ferrystore.Failure) time.Duration {
	d := time.Duration(-1)
	for _, f := range fails {
		if !f.Dead && (d < 0 || f.Delay < d) {
			d = f.Delay
		}
	}
	return max(d, 0)
}

func (p *pipeline) fenced(token string, n int64) {
	if n <= 0 {
		return
	}
	p.c.fenced.Add(n)
	p.hooks.fence(n)
	p.log.Warn("lease lost before the outcome was recorded; left as the new owner set it",
		"token", token, "events", n)
}

// retryMark retries a failing outcome write with backoff while the lease
// lasts: every mark it saves is a duplicate publish avoided.
func retryMark[T any](ctx context.Context, leaseEnd time.Time, fn func() (T, error)) (T, error) {
	backoff := 50 * time.Millisecond
	var zero T
	for {
		n, err := fn()
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(leaseEnd) {
			return zero, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, err
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}
