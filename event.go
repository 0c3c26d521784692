package ferry

import "github.com/ferrydev/ferry/ferrytype"

// Event is a business event to write to the outbox; see ferrytype.Event.
type Event = ferrytype.Event

// Message is an event claimed from the outbox; see ferrytype.Message.
type Message = ferrytype.Message

// PublishResult is the broker's outcome for one message; see
// ferrytype.PublishResult.
type PublishResult = ferrytype.PublishResult

// Sentinel errors, re-exported from ferrytype for convenience.
var (
	ErrInvalidEvent      = ferrytype.ErrInvalidEvent
	ErrInvalidPayload    = ferrytype.ErrInvalidPayload
	ErrPayloadTooLarge   = ferrytype.ErrPayloadTooLarge
	ErrInvalidIdentifier = ferrytype.ErrInvalidIdentifier
	ErrInvalidConfig     = ferrytype.ErrInvalidConfig
	ErrClosed            = ferrytype.ErrClosed
)
