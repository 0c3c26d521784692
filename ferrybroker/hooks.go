package ferrybroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Hook is a value given to a consumer's config (ConsumerConfig.Hooks) that
// implements one or more of the consumer hook interfaces below; the
// consumer detects each by type assertion. ferryprom.ConsumerMetrics and
// ferryotel.Tracing are hooks. Each hook receives the consumer's name
// (ConsumerConfig.Name), so that one hook serves several consumers. Hooks
// run on the consumer's goroutines: keep them fast.
type Hook any

// HookDelivered is called when a consumer took a delivery from the
// broker, before validation and the handler. Each delivery reported here
// is later reported to HookSettled exactly once.
type HookDelivered interface {
	OnDelivered(consumer string, d *Delivery)
}

// HookHandleStart is called just before the handler runs; the context it
// returns is the handler's (a tracing hook starts a span in it). It must
// return ctx or a context derived from it.
type HookHandleStart interface {
	OnHandleStart(ctx context.Context, consumer string, d *Delivery) context.Context
}

// HookHandled is called when the handler returned, with the handler's
// context, its error (a panic is reported as an error) and the call's
// duration.
type HookHandled interface {
	OnHandled(ctx context.Context, consumer string, d *Delivery, err error, took time.Duration)
}

// HookSettled is called once for each delivery, when the consumer settled
// it, with what it did.
type HookSettled interface {
	OnSettled(consumer string, d *Delivery, s Settlement)
}

// Rewind is a consumer going back over records it had read: Kafka's client
// found, after a leader change, that the log it had read diverged from the
// new leader's (records lost by the brokers), and reset the partition to
// an earlier offset. The records from To up to From are delivered again;
// the inbox finds those it applied and reports them as duplicates. From
// equal to To is a loss found with nothing to read again: records below
// From may have been replaced and are not re-read.
type Rewind struct {
	// Route is the topic, Partition its partition.
	Route     string
	Partition int32
	// From is the offset read up to, To the offset reset to.
	From, To int64
}

// Records is how many records are read again: From - To, or 0.
func (r Rewind) Records() int64 { return max(r.From-r.To, 0) }

// HookRewound is called when a consumer rewinds a partition (see Rewind).
type HookRewound interface {
	OnRewound(consumer string, r Rewind)
}

// SettledFunc adapts a function to HookSettled.
type SettledFunc func(consumer string, d *Delivery, s Settlement)

// OnSettled implements HookSettled.
func (f SettledFunc) OnSettled(consumer string, d *Delivery, s Settlement) { f(consumer, d, s) }

// Action is what a consumer did with a delivery.
type Action int

// The ways a delivery is settled (see Consumer).
const (
	// ActionAcked: the handler returned nil (its effect is committed) and
	// the ack was sent.
	ActionAcked Action = iota + 1
	// ActionRetried: the handler failed transiently (or parking failed);
	// the broker delivers it again after a delay.
	ActionRetried
	// ActionParked: a copy with the park headers was stored where the
	// consumer parks, and then the original was settled.
	ActionParked
	// ActionLeft: not settled by the consumer (stopping, cut off, a fault
	// point, a failed ack): the broker delivers it again.
	ActionLeft
)

// String returns the action's name in lower case.
func (a Action) String() string {
	switch a {
	case ActionAcked:
		return "acked"
	case ActionRetried:
		return "retried"
	case ActionParked:
		return "parked"
	case ActionLeft:
		return "left"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Settlement reports how one delivery was settled.
type Settlement struct {
	Action Action
	// Err is the handler's (or validation's) error for retried and parked
	// deliveries (for parked ones, the park reason), the cause for a left
	// one; nil when acked.
	Err error
}

// ConsumerObserver keeps a consumer's stats and calls its hooks, so that
// every broker's consumer counts and reports the same way. It is the
// building block of consumer adapters; applications do not need it.
type ConsumerObserver struct {
	name      string
	delivered []HookDelivered
	start     []HookHandleStart
	handled   []HookHandled
	settled   []HookSettled
	rewound   []HookRewound

	nDelivered, nHandled, nAcked, nRetried, nParked, nParkFailed, nLeft atomic.Int64
	nRewinds, nRewound                                                  atomic.Int64
}

// NewConsumerObserver returns the observer of the consumer named name with
// hooks.
func NewConsumerObserver(name string, hooks []Hook) *ConsumerObserver {
	o := &ConsumerObserver{name: name}
	for _, x := range hooks {
		if v, ok := x.(HookDelivered); ok {
			o.delivered = append(o.delivered, v)
		}
		if v, ok := x.(HookHandleStart); ok {
			o.start = append(o.start, v)
		}
		if v, ok := x.(HookHandled); ok {
			o.handled = append(o.handled, v)
		}
		if v, ok := x.(HookSettled); ok {
			o.settled = append(o.settled, v)
		}
		if v, ok := x.(HookRewound); ok {
			o.rewound = append(o.rewound, v)
		}
	}
	return o
}

// Rewound records that the consumer rewound a partition.
func (o *ConsumerObserver) Rewound(r Rewind) {
	o.nRewinds.Add(1)
	o.nRewound.Add(r.Records())
	for _, h := range o.rewound {
		h.OnRewound(o.name, r)
	}
}

// Name returns the consumer's name given to the hooks.
func (o *ConsumerObserver) Name() string { return o.name }

// Delivered records that d was taken from the broker.
func (o *ConsumerObserver) Delivered(d *Delivery) {
	o.nDelivered.Add(1)
	for _, h := range o.delivered {
		h.OnDelivered(o.name, d)
	}
}

// Handle runs h for d between the handle hooks, turning a panic into an
// error.
func (o *ConsumerObserver) Handle(ctx context.Context, h Handler, d *Delivery) error {
	for _, x := range o.start {
		ctx = x.OnHandleStart(ctx, o.name, d)
	}
	start := time.Now()
	err := call(ctx, h, d)
	took := time.Since(start)
	o.nHandled.Add(1)
	for _, x := range o.handled {
		x.OnHandled(ctx, o.name, d, err, took)
	}
	return err
}

// HandleWithin is Handle with the handler's context bounded by timeout
// (none when zero or less), and a panic logged on log with its stack: the
// handler call every consumer makes.
func (o *ConsumerObserver) HandleWithin(ctx context.Context, h Handler, d *Delivery, timeout time.Duration, log *slog.Logger) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := o.Handle(ctx, h, d)
	if pe := (*PanicError)(nil); errors.As(err, &pe) && log != nil {
		log.Error("handler panicked", "message_id", d.MessageID, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	return err
}

// RunUntilDone is the body of every consumer's Run: start, wait for ctx to
// end, then stop, giving the handlers in flight up to shutdown to finish.
func RunUntilDone(ctx context.Context, start, stop func(context.Context) error, shutdown time.Duration) error {
	if err := start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
	defer cancel()
	return stop(stopCtx)
}

func call(ctx context.Context, h Handler, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h(ctx, d)
}

// PanicError is the error of a handler that panicked: a transient
// failure. Consumers log its Stack.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns the panic's value, without the stack.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Settled records how d was settled.
func (o *ConsumerObserver) Settled(d *Delivery, s Settlement) {
	switch s.Action {
	case ActionAcked:
		o.nAcked.Add(1)
	case ActionRetried:
		o.nRetried.Add(1)
	case ActionParked:
		o.nParked.Add(1)
	default:
		o.nLeft.Add(1)
	}
	for _, h := range o.settled {
		h.OnSettled(o.name, d, s)
	}
}

// ParkFailed records a failed attempt to park.
func (o *ConsumerObserver) ParkFailed() { o.nParkFailed.Add(1) }

// Stats returns the counters.
func (o *ConsumerObserver) Stats() ConsumerStats {
	s := ConsumerStats{Handled: o.nHandled.Load(), Acked: o.nAcked.Load(), Retried: o.nRetried.Load(),
		Parked: o.nParked.Load(), ParkFailed: o.nParkFailed.Load(), Left: o.nLeft.Load(),
		Rewinds: o.nRewinds.Load(), Rewound: o.nRewound.Load()}
	// Delivered last: a delivery settled between the loads is counted in
	// Delivered, so InFlight is never negative.
	s.Delivered = o.nDelivered.Load()
	s.InFlight = s.Delivered - s.Acked - s.Retried - s.Parked - s.Left
	return s
}
