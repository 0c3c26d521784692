package ferry

import (
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// HookClaim is called after each claim that returned events, with the
// number of events and the claim's duration.
type HookClaim interface {
	OnClaim(events int, took time.Duration)
}

// HookPublish is called after each published batch, with the messages, the
// broker's outcome for each, and the batch's publish duration.
type HookPublish interface {
	OnPublish(msgs []ferrytype.Message, results []ferrytype.PublishResult, took time.Duration)
}

// HookFenced is called when outcome marks changed fewer rows than asked:
// the lease had passed to another owner, whose outcome stands.
type HookFenced interface {
	OnFenced(events int64)
}

// HookSweep is called when the sweeper returned expired leases.
type HookSweep interface {
	OnSweep(events int64)
}

type relayHooks struct {
	claim_   []HookClaim
	publish_ []HookPublish
	fence_   []HookFenced
	sweep_   []HookSweep
}

func collectRelayHooks(hooks []Hook) relayHooks {
	var h relayHooks
	for _, x := range hooks {
		if v, ok := x.(HookClaim); ok {
			h.claim_ = append(h.claim_, v)
		}
		if v, ok := x.(HookPublish); ok {
			h.publish_ = append(h.publish_, v)
		}
		if v, ok := x.(HookFenced); ok {
			h.fence_ = append(h.fence_, v)
		}
		if v, ok := x.(HookSweep); ok {
			h.sweep_ = append(h.sweep_, v)
		}
	}
	return h
}

func (h relayHooks) claim(n int, d time.Duration) {
	for _, x := range h.claim_ {
		x.OnClaim(n, d)
	}
}

func (h relayHooks) publish(m []ferrytype.Message, r []ferrytype.PublishResult, d time.Duration) {
	for _, x := range h.publish_ {
		x.OnPublish(m, r, d)
	}
}

func (h relayHooks) fence(n int64) {
	for _, x := range h.fence_ {
		x.OnFenced(n)
	}
}

func (h relayHooks) sweep(n int64) {
	for _, x := range h.sweep_ {
		x.OnSweep(n)
	}
}
