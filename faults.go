package ferry

// Fault points name the crash windows of the relay and the inbox, for
// tests that prove each is survived: a test (or the reference shop's own
// binary, examples/shop) sets RelayConfig.FaultPoint or
// InboxConfig.FaultPoint to a function that kills the process, or returns
// an error, when the point is reached. Production code leaves those fields
// nil; nothing in ferry's command line or environment sets them.

// The relay's fault points, passed to RelayConfig.FaultPoint. They mark
// the crash windows the outbox pattern must survive.
const (
	// FaultAfterClaim is reached after a claim committed and before the
	// batch is published. An error abandons the batch there, as a crash
	// would: its leases expire and the sweeper returns it.
	FaultAfterClaim = "relay.after-claim"
	// FaultAfterPublish is reached after the broker answered and before
	// any outcome is written. An error abandons the batch there: the
	// events were published but are not marked, so they are published
	// again after their leases expire, with the same ids.
	FaultAfterPublish = "relay.after-publish"
	// FaultLoseConfirm is reached for each confirmed message. An error
	// turns the confirm into an unknown outcome, as if the confirm were
	// lost on the wire: the event is retried although the broker has it.
	FaultLoseConfirm = "relay.lose-confirm"
	// FaultBeforeForget is reached in Stop, after the relay stopped and
	// before it deletes its heartbeat row. An error leaves the row, as a
	// relay that was killed does: it stops beating and ages.
	FaultBeforeForget = "relay.before-forget"
	// FaultMidSweep is reached in the maintenance leader's sweep, after
	// it read expired leases and before it returns them. A crash there
	// leaves them expired: the next leader, elected once the dead one's
	// heartbeat is stale, returns them.
	FaultMidSweep = "relay.mid-sweep"
)

// FaultInboxBeforeCommit is reached inside an operation's transaction,
// after the marker and the business function, before the commit. A crash
// there rolls everything back: the redelivery applies the operation.
const FaultInboxBeforeCommit = "inbox.before-commit"
