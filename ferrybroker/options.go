package ferrybroker

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// ConsumerOptions are the settings every broker's consumer has. Each
// broker's ConsumerConfig (ferryamqp, ferrynats, ferrykafka,
// ferrywatermill) embeds them next to its own: what it consumes, where it
// parks, how it talks to its broker. Zero fields take the default named in
// their comment; WithDefaults sets them, Check reports a field out of
// range.
type ConsumerOptions struct {
	// Concurrency is the number of handlers running at once. Default 4;
	// at most 4096.
	Concurrency int
	// Redelivery says when a delivery whose handler failed is delivered
	// again and when it is parked (defaults: 10 deliveries, 200ms
	// doubling up to 30s). How each broker delivers again, and how it
	// counts deliveries, is said by its ConsumerConfig.
	Redelivery RedeliveryPolicy
	// HandlerTimeout bounds one handler call through its context. Default
	// 0: no bound.
	HandlerTimeout time.Duration
	// Validate, when set, checks each delivery before the handler runs; an
	// error parks the delivery as malformed (RequireHeaders is one). A
	// message with a JSON content type, or none, is always checked to hold
	// valid JSON (CheckPayload).
	Validate func(d *Delivery) error
	// Decoding, when set, reads each delivery's metadata and payload
	// (Decode) in place of ferry's headers: ferrycloudevents.Decoding reads
	// CloudEvents, those of other producers among them. A delivery it
	// cannot read is parked as malformed.
	Decoding Decoding
	// ParkTimeout bounds the storing of a parked copy (its publish and
	// the broker's acknowledgement). Default 30s.
	ParkTimeout time.Duration
	// ShutdownTimeout bounds the stop at the end of Run. Default 30s.
	ShutdownTimeout time.Duration
	// Name is the consumer's name given to the hooks. Default: what it
	// consumes (the queue, the durable consumer, the group, the topic).
	Name string
	// Hooks observe the consumer: each value implements some of the
	// consumer hook interfaces (HookSettled, ...), as
	// ferryprom.ConsumerMetrics and ferryotel.Tracing do.
	Hooks []Hook
	// Logger receives the consumer's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Default values and limits of ConsumerOptions.
const (
	DefaultConcurrency     = 4
	MaxConcurrency         = 4096
	DefaultParkTimeout     = 30 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// WithDefaults returns o with its zero fields set to their defaults; name
// is the default of Name: what the consumer consumes.
func (o ConsumerOptions) WithDefaults(name string) ConsumerOptions {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	o.Redelivery = o.Redelivery.WithDefaults()
	if o.ParkTimeout == 0 {
		o.ParkTimeout = DefaultParkTimeout
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.Name == "" {
		o.Name = name
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Check reports the first field of o out of range, naming it as a field
// of the broker's ConsumerConfig; the error wraps
// ferrytype.ErrInvalidConfig. Call it on o.WithDefaults().
func (o ConsumerOptions) Check() error {
	switch {
	case o.Concurrency < 1 || o.Concurrency > MaxConcurrency:
		return fmt.Errorf("%w: ConsumerConfig.Concurrency %d must be within 1..%d", ferrytype.ErrInvalidConfig, o.Concurrency, MaxConcurrency)
	case o.Redelivery.Validate() != nil:
		return fmt.Errorf("ConsumerConfig.Redelivery: %w", o.Redelivery.Validate())
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"HandlerTimeout", o.HandlerTimeout}, {"ParkTimeout", o.ParkTimeout}, {"ShutdownTimeout", o.ShutdownTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%w: ConsumerConfig.%s %s must not be negative", ferrytype.ErrInvalidConfig, d.name, d.v)
		}
	}
	for i, h := range o.Hooks {
		if !isConsumerHook(h) {
			return fmt.Errorf("%w: ConsumerConfig.Hooks[%d] (%T) implements none of the consumer's hooks (HookDelivered, "+
				"HookHandleStart, HookHandled, HookSettled, HookRewound): it would observe nothing", ferrytype.ErrInvalidConfig, i, h)
		}
	}
	return nil
}

// isConsumerHook reports whether h implements one of the consumer hooks.
func isConsumerHook(h Hook) bool {
	switch h.(type) {
	case HookDelivered, HookHandleStart, HookHandled, HookSettled, HookRewound:
		return true
	}
	return false
}
