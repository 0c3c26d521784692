package ferrytype

// Transition is one edge of an outbox row's state machine: the change of
// status one operation makes. Stores write each edge's source status into
// the WHERE clause of the statement that makes it, so that a row not in
// From is left alone (fenced) instead of being moved from the wrong state.
type Transition struct {
	// Name says which operation makes the change.
	Name string
	// From is the status the row must have.
	From Status
	// To is the status the row gets; empty when the operation deletes the
	// row.
	To Status
	// By names who performs it: the relay, its sweeper, retention, or an
	// operator.
	By string
}

// The edges of the state machine. Every other change is refused: SENT is
// terminal (only retention deletes it), DEAD and DISCARDED rows move only
// by an operator's hand (a DISCARDED row back to DEAD, or deleted by
// retention), and a SENDING row is changed only under the lease token it
// was claimed with.
var (
	// TransitionClaim leases an available NEW row to one relay (Store.Claim).
	TransitionClaim = Transition{Name: "claim", From: StatusNew, To: StatusSending, By: "relay"}
	// TransitionConfirm records the broker's confirm (Store.MarkSent, under the
	// lease token).
	TransitionConfirm = Transition{Name: "confirm", From: StatusSending, To: StatusSent, By: "relay"}
	// TransitionFailRetry records a failed attempt that will be retried after its
	// delay (Store.MarkFailed, under the lease token).
	TransitionFailRetry = Transition{Name: "fail-retry", From: StatusSending, To: StatusNew, By: "relay"}
	// TransitionFailDead records a failed attempt past the retry policy's limit
	// (Store.MarkFailed, under the lease token).
	TransitionFailDead = Transition{Name: "fail-dead", From: StatusSending, To: StatusDead, By: "relay"}
	// TransitionRelease gives back a row whose publish never left the
	// process (ferrytype.ErrNotSent: the broker was unreachable): NEW,
	// available at once, the claim's attempt taken back (Store.Release,
	// under the lease token).
	TransitionRelease = Transition{Name: "release", From: StatusSending, To: StatusNew, By: "relay"}
	// TransitionMalformed records a claimed row that cannot be turned into
	// a message (ErrMalformedRow) as DEAD at once, under the claim's lease
	// token, with the reason as last_error (Store.Claim): retrying cannot
	// help.
	TransitionMalformed = Transition{Name: "malformed", From: StatusSending, To: StatusDead, By: "relay"}
	// TransitionSweepRetry returns a row whose lease expired before any outcome was
	// recorded (Store.ExpiredClaims, then Store.MarkFailed under the
	// expired token).
	TransitionSweepRetry = Transition{Name: "sweep-retry", From: StatusSending, To: StatusNew, By: "sweeper"}
	// TransitionSweepDead is TransitionSweepRetry past the retry policy's limit.
	TransitionSweepDead = Transition{Name: "sweep-dead", From: StatusSending, To: StatusDead, By: "sweeper"}
	// TransitionRevive makes a DEAD row NEW again with attempts reset
	// (ferrystore.Admin.Retry, `ferry dead retry`).
	TransitionRevive = Transition{Name: "retry", From: StatusDead, To: StatusNew, By: "operator"}
	// TransitionDiscard gives up on a DEAD row for good, keeping it as the record
	// (ferrystore.Admin.Discard, `ferry dead discard`).
	TransitionDiscard = Transition{Name: "discard", From: StatusDead, To: StatusDiscarded, By: "operator"}
	// TransitionRestore takes a DISCARDED row back to DEAD, for a person to
	// retry or discard it again; the discard's record stays, with who
	// restored it and when (ferrystore.Admin.Restore, `ferry dead restore`).
	TransitionRestore = Transition{Name: "restore", From: StatusDiscarded, To: StatusDead, By: "operator"}
	// TransitionPurgeSent deletes a SENT row past retention (Store.PurgeSent).
	TransitionPurgeSent = Transition{Name: "purge-sent", From: StatusSent, By: "retention"}
	// TransitionPurgeDiscarded deletes a DISCARDED row past its retention
	// (ferrystore.Admin.PurgeDiscarded).
	TransitionPurgeDiscarded = Transition{Name: "purge-discarded", From: StatusDiscarded, By: "operator"}
)

// Transitions returns every edge of the state machine, in the order a row
// usually meets them.
func Transitions() []Transition {
	return []Transition{TransitionClaim, TransitionConfirm, TransitionFailRetry, TransitionFailDead, TransitionMalformed, TransitionRelease, TransitionSweepRetry, TransitionSweepDead, TransitionRevive, TransitionDiscard, TransitionRestore, TransitionPurgeSent, TransitionPurgeDiscarded}
}

// Allowed reports whether some operation moves a row from one status to
// another; to is empty for a deletion.
func Allowed(from, to Status) bool {
	for _, t := range Transitions() {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}

// Terminal reports whether no operation but a purge moves a row out of s.
func (s Status) Terminal() bool {
	for _, t := range Transitions() {
		if t.From == s && t.To != "" {
			return false
		}
	}
	return true
}
