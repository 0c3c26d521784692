// Package ferryfault is ferry's one seam for fault injection. A test, or
// the reference shop's own binary, puts a Func in the context it starts a
// part with (With); each named fault point of the relay, the inbox, the
// consumers, the publishers and the HTTP middleware calls it (At), and a
// non-nil error acts as a crash at that point: the part abandons what it
// was doing exactly as a killed process would, or the Func kills the
// process itself (see the chaos suite).
//
// The parts keep the values of the context they are started with (Start's
// ctx, a request's context), so a Func set there reaches every point of
// that part. Production code never sets one: no command-line flag or
// environment variable of ferry's does, and a context without a Func
// costs one context lookup per point.
package ferryfault

import "context"

// Func is called at each fault point reached with the point's name; a
// non-nil error is a crash there.
type Func func(ctx context.Context, point string) error

type key struct{}

// With returns a copy of ctx whose fault points call fn. A nil fn removes
// the Func ctx had.
func With(ctx context.Context, fn Func) context.Context {
	return context.WithValue(ctx, key{}, fn)
}

// At is the fault point named point: it calls the Func of ctx, if any,
// and returns its error. Parts call it; tests set the Func with With.
func At(ctx context.Context, point string) error {
	fn, _ := ctx.Value(key{}).(Func)
	if fn == nil {
		return nil
	}
	return fn(ctx, point)
}

// The fault points. Each marks a crash window that ferry's guarantees
// must survive; the tests that prove each is survived are listed in
// docs/guarantees.md.
const (
	// RelayAfterClaim is reached after a claim committed and before the
	// batch is published. An error abandons the batch there, as a crash
	// would: its leases expire (or its relay is found dead) and the
	// maintainer returns it.
	RelayAfterClaim = "relay.after-claim"
	// RelayAfterPublish is reached after the broker answered and before
	// any outcome is written. An error abandons the batch there: the
	// events were published but are not marked, so they are published
	// again with the same ids once their claims are returned.
	RelayAfterPublish = "relay.after-publish"
	// RelayLoseConfirm is reached for each confirmed message. An error
	// turns the confirm into an unknown outcome, as if the confirm were
	// lost on the wire: the event is retried although the broker has it.
	RelayLoseConfirm = "relay.lose-confirm"
	// RelayBeforeForget is reached in the relay's Stop, after it stopped
	// and before it deletes its heartbeat row. An error leaves the row,
	// as a relay that was killed does: it stops beating and ages.
	RelayBeforeForget = "relay.before-forget"
	// RelayMidSweep is reached in the maintainer's sweep, after it read
	// the claims to return and before it returns them. A crash there
	// leaves them: the next maintainer, once the dead one's lease ended,
	// returns them.
	RelayMidSweep = "relay.mid-sweep"
	// PublishBeforeConfirm is the publishers' point: reached after a
	// batch was written to the broker and before its confirms are awaited.
	// A crash there leaves messages the broker may have stored and the
	// relay never heard about: they are published again, with the same
	// ids.
	PublishBeforeConfirm = "publish.before-confirm"
	// ConsumerAfterHandle is reached after the handler returned nil — its
	// transaction committed — and before the delivery is acked. A crash
	// here leaves a committed effect whose delivery comes again: the inbox
	// must report it as a duplicate. An error leaves the delivery unacked.
	ConsumerAfterHandle = "consumer.after-handle"
	// InboxBeforeCommit is reached inside an operation's transaction,
	// after the marker and the business function, before the commit. A
	// crash there rolls everything back: the redelivery applies the
	// operation.
	InboxBeforeCommit = "inbox.before-commit"
	// HTTPAfterCommit is reached by ferryhttp's middleware after a
	// request's transaction (its writes, events and stored response)
	// committed and before the response is written to the client. A crash
	// there leaves a committed result the client never saw: its retry
	// with the same Idempotency-Key gets the stored response.
	HTTPAfterCommit = "idempotency.after-commit"
)
