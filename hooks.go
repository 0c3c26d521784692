package ferry

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// HookInbox is called after each operation an Inbox processed, with its
// outcome and duration.
type HookInbox interface {
	OnInbox(consumer string, outcome InboxOutcome, took time.Duration)
}

// Relay hooks. Each receives the outbox table's name, so one hook can serve
// several relays. Hooks run on the relay's goroutines: keep them fast.

// HookClaim is called after each claim that returned events, with the
// number of events and the claim's duration.
type HookClaim interface {
	OnClaim(table string, events int, took time.Duration)
}

// HookPublish is called after each published batch, with the messages, the
// broker's outcome for each, and the batch's publish duration.
type HookPublish interface {
	OnPublish(table string, msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration)
}

// HookFenced is called when outcome marks changed fewer rows than asked:
// the lease had passed to another owner, whose outcome stands.
type HookFenced interface {
	OnFenced(table string, events int64)
}

// HookSweep is called when the sweeper returned expired leases, with the
// number of rows it changed. The same rows are reported to HookSettle as
// retried or dead.
type HookSweep interface {
	OnSweep(table string, events int64)
}

// HookSettle is called after outcomes were written, by a batch or by the
// sweeper: sent events marked SENT, retried events back to NEW, dead events
// DEAD. Every transition out of SENDING that the relay wrote is reported
// here exactly once, but releases (HookRelease).
type HookSettle interface {
	OnSettle(table string, sent, retried, dead int64)
}

// DestinationSettled counts the outcomes written for the events of one
// destination: where each is published, its destination or, when it has
// none, its type (ferrytype.Message.Route); "" when the relay cannot tell
// (a malformed row recorded DEAD at its claim).
type DestinationSettled struct {
	Destination         string
	Sent, Retried, Dead int64
}

// HookSettleDestinations is HookSettle split by destination: it is called
// at the same moments, for the same rows, with one DestinationSettled per
// destination that had rows changed. ferryprom.Metrics implements it (and
// not HookSettle). When a SENT mark changed fewer rows than it was given
// (leases that had passed to another owner) and its batch spans several
// destinations, which rows were fenced is not known: the sent rows are
// then attributed in batch order, and only their total is exact.
type HookSettleDestinations interface {
	OnSettleDestinations(table string, settled []DestinationSettled)
}

// HookRelease is called after events whose publish never left the process
// (ferrytype.ErrNotSent: the broker was unreachable) were given back to NEW
// without spending an attempt, with the number of rows changed.
type HookRelease interface {
	OnRelease(table string, events int64)
}

// HookHeartbeat is called after each heartbeat of a relay
// (RelayConfig.Heartbeat), with nil when the beat was recorded and the
// error when it failed.
type HookHeartbeat interface {
	OnHeartbeat(table string, err error)
}

// HookLog is called with a log relay's LogStats (RelayConfig.Log.Feed) after
// each change of its state: a checkpoint saved, the lease taken or lost,
// a gap, a stream error, and each measure of the log it retains
// (LogStats.RetainedBytes, every LogLagInterval).
type HookLog interface {
	OnLog(table string, st LogStats)
}

type relayHooks struct {
	table    string
	log_     []HookLog
	claim_   []HookClaim
	publish_ []HookPublish
	fence_   []HookFenced
	sweep_   []HookSweep
	settle_  []HookSettle
	release_ []HookRelease
	beat_    []HookHeartbeat
	dest_    []HookSettleDestinations
}

// collectRelayHooks sorts hooks by the relay hooks each implements. A nil
// hook, or one that implements none of them, is an error naming it: a
// plugin given to the wrong part would otherwise observe nothing, silently.
func collectRelayHooks(table string, hooks []Hook) (relayHooks, error) {
	h := relayHooks{table: table}
	for i, x := range hooks {
		if nilness.Nil(x) {
			return h, fmt.Errorf("%w: RelayConfig.Hooks[%d] is nil", ErrInvalidConfig, i)
		}
		n := 0
		if v, ok := x.(HookClaim); ok {
			h.claim_ = append(h.claim_, v)
			n++
		}
		if v, ok := x.(HookPublish); ok {
			h.publish_ = append(h.publish_, v)
			n++
		}
		if v, ok := x.(HookFenced); ok {
			h.fence_ = append(h.fence_, v)
			n++
		}
		if v, ok := x.(HookSweep); ok {
			h.sweep_ = append(h.sweep_, v)
			n++
		}
		if v, ok := x.(HookSettle); ok {
			h.settle_ = append(h.settle_, v)
			n++
		}
		if v, ok := x.(HookRelease); ok {
			h.release_ = append(h.release_, v)
			n++
		}
		if v, ok := x.(HookHeartbeat); ok {
			h.beat_ = append(h.beat_, v)
			n++
		}
		if v, ok := x.(HookLog); ok {
			h.log_ = append(h.log_, v)
			n++
		}
		if v, ok := x.(HookSettleDestinations); ok {
			h.dest_ = append(h.dest_, v)
			n++
		}
		if n == 0 {
			return h, fmt.Errorf("%w: RelayConfig.Hooks[%d] (%T) implements none of the relay's hooks (HookClaim, HookPublish, "+
				"HookSettle, ...): it would observe nothing", ErrInvalidConfig, i, x)
		}
	}
	return h, nil
}

func (h relayHooks) claim(n int, d time.Duration) {
	for _, x := range h.claim_ {
		x.OnClaim(h.table, n, d)
	}
}

func (h relayHooks) publish(m []ferrytype.Message, r []ferrytype.PublishResult, d time.Duration) {
	for _, x := range h.publish_ {
		x.OnPublish(h.table, m, r, d)
	}
}

func (h relayHooks) fence(n int64) {
	for _, x := range h.fence_ {
		x.OnFenced(h.table, n)
	}
}

func (h relayHooks) sweep(n int64) {
	for _, x := range h.sweep_ {
		x.OnSweep(h.table, n)
	}
}

func (h relayHooks) settle(sent, retried, dead int64) {
	for _, x := range h.settle_ {
		x.OnSettle(h.table, sent, retried, dead)
	}
}

func (h relayHooks) release(n int64) {
	for _, x := range h.release_ {
		x.OnRelease(h.table, n)
	}
}

func (h relayHooks) logState(st LogStats) {
	for _, x := range h.log_ {
		x.OnLog(h.table, st)
	}
}

func (h relayHooks) heartbeat(err error) {
	for _, x := range h.beat_ {
		x.OnHeartbeat(h.table, err)
	}
}

// wantDestinations reports whether a hook takes settles by destination,
// which the relay then tallies.
func (h relayHooks) wantDestinations() bool { return len(h.dest_) > 0 }

func (h relayHooks) settleDest(t destTally) {
	if len(t) == 0 {
		return
	}
	for _, x := range h.dest_ {
		x.OnSettleDestinations(h.table, t)
	}
}

// destTally adds up settles by destination, in the order destinations
// first appear; a batch has few, so a linear search does.
type destTally []DestinationSettled

func (t *destTally) add(dest string, sent, retried, dead int64) {
	for i := range *t {
		if (*t)[i].Destination == dest {
			(*t)[i].Sent += sent
			(*t)[i].Retried += retried
			(*t)[i].Dead += dead
			return
		}
	}
	*t = append(*t, DestinationSettled{Destination: dest, Sent: sent, Retried: retried, Dead: dead})
}

// tallyFailed adds up a MarkFailed result, route giving each id's
// destination.
func tallyFailed(res ferrystore.MarkFailedResult, route map[string]string) destTally {
	var t destTally
	for _, id := range res.Retried {
		t.add(route[id], 0, 1, 0)
	}
	for _, id := range res.Dead {
		t.add(route[id], 0, 0, 1)
	}
	return t
}
