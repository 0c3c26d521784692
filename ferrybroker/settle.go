package ferrybroker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry/ferryfault"
)

// An Acknowledger settles one delivery on its broker, as a Settler decides.
// Each broker's consumer implements it for its deliveries (a RabbitMQ
// delivery tag on its channel, a JetStream message, a Kafka record's
// offset, a Watermill message); applications do not need it.
//
// Ack, Retry and Park return ErrSettlesItself when the acknowledger reports
// the settlement to the consumer's ConsumerObserver itself, now or later:
// Kafka's, whose ack is the commit of an offset past the record, made
// later and only once every earlier record of the partition is settled;
// RabbitMQ's, whose retry waits its delay before the nack.
type Acknowledger interface {
	// Ack tells the broker that the delivery's effect is committed: it
	// may forget the message. It covers this delivery only, never another
	// still in flight. An error leaves the delivery: the broker delivers
	// it again, a duplicate for the inbox.
	Ack() error
	// Retry hands the delivery back, to be delivered again after delay;
	// cause is the failure. An error leaves the delivery.
	Retry(delay time.Duration, cause error) error
	// Leave hands the delivery back undecided (the consumer is stopping,
	// its handler was cut off): the broker delivers it again.
	Leave()
	// Abandon leaves the delivery as a crash at this point would: neither
	// settled nor handed back, until the broker finds the consumer gone
	// (its channel closed, the ack wait passed, the partition assigned
	// again, the consumer stopped).
	Abandon()
	// Park stores a copy of the message, with the park headers (the
	// reason among them), where the consumer parks, and only once the
	// copy is stored settles the original. An error means that no copy
	// was stored: the delivery is retried instead.
	Park(reason error) error
}

// ErrSettlesItself is returned by an Acknowledger's Ack, Retry or Park
// that reports the delivery's settlement itself (see Acknowledger). From
// Park it also says that the copy is stored.
var ErrSettlesItself = errors.New("the acknowledger settles the delivery itself")

// ErrStopping is the cause of a delivery left because its consumer was
// stopping.
var ErrStopping = errors.New("consumer stopping")

// Step is how far a consumer got with a delivery when it settles it.
type Step int

// The steps a delivery settles after.
const (
	// StepStopping: the delivery was taken while the consumer was
	// stopping; no handler ran. It is left.
	StepStopping Step = iota + 1
	// StepMalformed: the check before the handler (CheckDelivery) found
	// the message malformed; no handler ran. It is parked, the check's
	// error its reason.
	StepMalformed
	// StepHandled: the handler returned (nil: its effect is committed).
	StepHandled
)

// A Settler is a consumer's settle policy: it decides what becomes of
// each delivery — acked, parked, retried after a delay, or left — tells
// the delivery's Acknowledger, records the Settlement through the
// consumer's ConsumerObserver and logs the decision once. Every broker's
// consumer settles through one, so that they settle alike; it is the
// building block of consumer adapters.
type Settler struct {
	// Redelivery decides between retrying and parking a failed delivery,
	// and the delay of a retry.
	Redelivery RedeliveryPolicy
	// HandlerTimeout bounds a handler call made by Handle (0: none).
	HandlerTimeout time.Duration
	// Observer keeps the consumer's stats and calls its hooks.
	Observer *ConsumerObserver
	// Logger receives the decisions' logs.
	Logger *slog.Logger
	// ParkedTo names where parked copies go, in the logs (the key
	// parking_queue, park_subject or park_topic with its name).
	ParkedTo slog.Attr
}

// NewSettler returns the Settler of a consumer configured with o (with its
// defaults set), logging to log and parking to parkedTo.
func NewSettler(o ConsumerOptions, log *slog.Logger, parkedTo slog.Attr) *Settler {
	return &Settler{Redelivery: o.Redelivery, HandlerTimeout: o.HandlerTimeout,
		Observer: NewConsumerObserver(o.Name, o.Hooks), Logger: log, ParkedTo: parkedTo}
}

// Handle runs the order of work on d after its check: when malformed (the
// check's error) is nil it runs h within HandlerTimeout, then settles d
// (StepHandled); otherwise it parks d (StepMalformed) without running h.
// ctx is the handler's context, which the consumer cancels when it gives
// up on its handlers.
func (s *Settler) Handle(ctx context.Context, d *Delivery, a Acknowledger, h Handler, malformed error) {
	if malformed != nil {
		s.Settle(ctx, d, a, StepMalformed, malformed)
		return
	}
	err := s.Observer.HandleWithin(ctx, h, d, s.HandlerTimeout, s.Logger)
	s.Settle(ctx, d, a, StepHandled, err)
}

// Settle settles d, taken from the broker and reported to the observer as
// delivered, once it reached step with err: the handler's error (nil: its
// effect is committed), or the check's for StepMalformed. ctx is the
// context the handler ran with; once it ended, the consumer gave up on its
// handlers (Stop's context ended, Kafka's partition was revoked or lost).
// In this order:
//
//   - stopping: left (ErrStopping);
//   - malformed: parked at once, the check's error its reason;
//   - handled with nil: the fault point ferryfault.ConsumerAfterHandle,
//     whose error abandons the delivery (as a crash would); then acked,
//     or left when the ack fails;
//   - handled with an error after ctx ended: left, neither a failure nor
//     counted towards parking;
//   - an error Redelivery parks (poison, or a failure on the last
//     delivery allowed; never a database not migrated): parked;
//   - any other error: retried after Redelivery's delay, or left when the
//     broker cannot take it back.
//
// A park that fails is counted (ConsumerStats.ParkFailed) and the delivery
// retried after the delay instead: nothing is acked without a stored copy.
// A park that fails once ctx ended leaves the delivery.
func (s *Settler) Settle(ctx context.Context, d *Delivery, a Acknowledger, step Step, err error) {
	switch {
	case step == StepStopping:
		s.leave(d, a, ErrStopping)
	case step == StepMalformed:
		s.park(ctx, d, a, err)
	case err == nil:
		if ferr := ferryfault.At(ctx, ferryfault.ConsumerAfterHandle); ferr != nil {
			s.Logger.Warn("fault after handle: delivery left unacked", "message_id", d.MessageID, "error", ferr)
			a.Abandon()
			s.settled(d, ActionLeft, ferr)
			return
		}
		// The effect is committed: only now may the broker forget the
		// message.
		switch aerr := a.Ack(); {
		case aerr == nil:
			s.settled(d, ActionAcked, nil)
		case errors.Is(aerr, ErrSettlesItself):
		default:
			// The effect is committed; the redelivery is a duplicate.
			s.Logger.Warn("ack after commit failed; the message will come again and the handler must find its effect done",
				"message_id", d.MessageID, "error", aerr)
			s.settled(d, ActionLeft, aerr)
		}
	case ctx.Err() != nil:
		// The consumer gave up on the handler: not a failure of the
		// message.
		s.leave(d, a, err)
	default:
		if reason := s.Redelivery.ParkReason(err, d.DeliveryCount); reason != nil {
			s.park(ctx, d, a, reason)
			return
		}
		delay := s.delay(d)
		s.Logger.Debug("handler failed; delivering again later", "message_id", d.MessageID,
			"delivery_count", d.DeliveryCount, "retry_in", delay, "error", err)
		s.retry(d, a, delay, err)
	}
}

func (s *Settler) delay(d *Delivery) time.Duration {
	return s.Redelivery.Delay(max(d.DeliveryCount, 1))
}

func (s *Settler) settled(d *Delivery, a Action, err error) {
	s.Observer.Settled(d, Settlement{Action: a, Err: err})
}

func (s *Settler) leave(d *Delivery, a Acknowledger, cause error) {
	a.Leave()
	s.settled(d, ActionLeft, cause)
}

func (s *Settler) retry(d *Delivery, a Acknowledger, delay time.Duration, cause error) {
	switch err := a.Retry(delay, cause); {
	case err == nil:
		s.settled(d, ActionRetried, cause)
	case errors.Is(err, ErrSettlesItself):
	default:
		s.Logger.Warn("hand back for a retry failed; the broker delivers the message again later",
			"message_id", d.MessageID, "error", err)
		s.settled(d, ActionLeft, err)
	}
}

func (s *Settler) park(ctx context.Context, d *Delivery, a Acknowledger, reason error) {
	err := a.Park(reason)
	switch {
	case err == nil || errors.Is(err, ErrSettlesItself):
		s.Logger.Warn("message parked", "message_id", d.MessageID, s.ParkedTo, "reason", reason)
		if err == nil {
			s.settled(d, ActionParked, reason)
		}
		return
	case ctx.Err() != nil:
		// Cut off with the consumer's handlers: not a failed park.
		s.leave(d, a, reason)
		return
	}
	s.Observer.ParkFailed()
	delay := s.delay(d)
	s.Logger.Error("park failed; the message will be delivered again", "message_id", d.MessageID, s.ParkedTo,
		"reason", reason, "retry_in", delay, "error", err)
	s.retry(d, a, delay, reason)
}
