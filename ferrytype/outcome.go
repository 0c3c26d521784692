package ferrytype

import (
	"errors"
	"fmt"
)

// Outcome is what a broker said about one published message.
type Outcome int

const (
	// OutcomeUnknown means the publisher cannot tell whether the broker
	// took the message: a confirm timed out, the connection or channel
	// closed with the confirm pending, the context ended. The message may
	// or may not be stored. It is never treated as sent nor as failed: it
	// goes back to the retry policy with the same event id, and consumers
	// must absorb the duplicate if it was stored.
	OutcomeUnknown Outcome = iota
	// OutcomeConfirmed means the broker confirmed it took responsibility for
	// the message (publisher confirm, JetStream PubAck, Kafka ack). Only
	// this outcome marks an event SENT.
	OutcomeConfirmed
	// OutcomeReturned means the broker accepted the publish but routed it
	// nowhere (AMQP basic.return of a mandatory message, no JetStream
	// stream for the subject), or has nowhere to route it (a Kafka topic
	// that does not exist).
	OutcomeReturned
	// OutcomeRejected means the broker refused the message (AMQP nack, a
	// JetStream API error, a Kafka record too large or not authorized).
	OutcomeRejected
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case OutcomeUnknown:
		return "unknown"
	case OutcomeConfirmed:
		return "confirmed"
	case OutcomeReturned:
		return "returned"
	case OutcomeRejected:
		return "rejected"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// PublishResult is the outcome of publishing one message.
type PublishResult struct {
	Outcome Outcome
	// Duplicate is set on a confirmed message the broker recognised as a
	// duplicate of one it already stored (JetStream's Nats-Msg-Id window).
	Duplicate bool
	// Err says why a message was not confirmed. Nil when confirmed.
	Err error
}

// Confirmed reports a confirmed result.
func Confirmed() PublishResult { return PublishResult{Outcome: OutcomeConfirmed} }

// Unknown reports an unknown outcome caused by err.
func Unknown(err error) PublishResult { return PublishResult{Outcome: OutcomeUnknown, Err: err} }

// NotSent reports an unknown outcome of a message that provably never
// left the process, caused by err: its Err is in the ErrNotSent class.
// Publishers use it only where nothing of the message can have reached
// the broker; anything written to the connection is Unknown.
func NotSent(err error) PublishResult {
	if err == nil {
		err = errors.New("not sent")
	}
	return PublishResult{Outcome: OutcomeUnknown, Err: Classed(err, ErrNotSent)}
}

// NotSent reports an unknown outcome whose message never left the
// process (see ErrNotSent).
func (r PublishResult) NotSent() bool {
	return r.Outcome == OutcomeUnknown && errors.Is(r.Err, ErrNotSent)
}

// Returned reports an unroutable message.
func Returned(err error) PublishResult { return PublishResult{Outcome: OutcomeReturned, Err: err} }

// Rejected reports a message the broker refused.
func Rejected(err error) PublishResult { return PublishResult{Outcome: OutcomeRejected, Err: err} }
