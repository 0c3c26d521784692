package ferrybroker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// RedeliveryPolicy says what a consumer does with a delivery its handler did
// not finish. Every consumer's config holds one (ConsumerOptions.Redelivery);
// zero fields take the default named in their comment.
//
//   - nil: the delivery is acked.
//   - An error wrapping ferrytype.ErrPoison: parked at once, whatever the
//     delivery count. So is a malformed message, before the handler runs.
//   - An error wrapping ferrytype.ErrSchemaOutdated or ErrUndefinedTable
//     (the consumer's tables are not migrated): retried, never parked,
//     however many deliveries it takes; the message is not at fault.
//   - Any other error is transient: the delivery comes again after Delay,
//     until a failure on delivery MaxDeliveries parks it with its last
//     error.
//   - A handler cut off by the consumer's Stop: left to the broker,
//     neither a failure nor counted towards parking by the consumer.
type RedeliveryPolicy struct {
	// MaxDeliveries parks a delivery whose handler failed with a transient
	// error once its delivery count reached this. Default 10.
	MaxDeliveries int
	// RetryDelay is the delay before a delivery whose handler failed
	// comes again, doubling with each delivery up to MaxRetryDelay, with
	// ±20% jitter: no hot loop. Defaults 200ms and 30s.
	RetryDelay, MaxRetryDelay time.Duration
}

// Default values of RedeliveryPolicy.
const (
	DefaultMaxDeliveries = 10
	DefaultRetryDelay    = 200 * time.Millisecond
	DefaultMaxRetryDelay = 30 * time.Second
)

// WithDefaults returns p with its zero fields set to their defaults.
func (p RedeliveryPolicy) WithDefaults() RedeliveryPolicy {
	if p.MaxDeliveries == 0 {
		p.MaxDeliveries = DefaultMaxDeliveries
	}
	if p.RetryDelay == 0 {
		p.RetryDelay = DefaultRetryDelay
	}
	if p.MaxRetryDelay == 0 {
		p.MaxRetryDelay = max(DefaultMaxRetryDelay, p.RetryDelay)
	}
	return p
}

// Validate reports a field out of range, naming it.
func (p RedeliveryPolicy) Validate() error {
	switch {
	case p.MaxDeliveries < 1:
		return fmt.Errorf("%w: RedeliveryPolicy.MaxDeliveries %d must be positive", ferrytype.ErrInvalidConfig, p.MaxDeliveries)
	case p.RetryDelay < 0 || p.MaxRetryDelay < p.RetryDelay:
		return fmt.Errorf("%w: RedeliveryPolicy.RetryDelay %s must be within 0..MaxRetryDelay (%s)",
			ferrytype.ErrInvalidConfig, p.RetryDelay, p.MaxRetryDelay)
	}
	return nil
}

// Delay returns how long a delivery that failed on delivery deliveryCount
// (1 for the first) waits before it comes again: RetryDelay doubled per
// earlier delivery, at most MaxRetryDelay, ±20% jitter.
func (p RedeliveryPolicy) Delay(deliveryCount int) time.Duration {
	d := p.RetryDelay
	// At most 63 doublings, none past MaxRetryDelay: the count can come
	// from a header a publisher set (x-delivery-count on a classic queue).
	for i := 1; i < deliveryCount && d > 0 && d < p.MaxRetryDelay; i++ {
		if d > p.MaxRetryDelay/2 {
			d = p.MaxRetryDelay
			break
		}
		d *= 2
	}
	d = min(d, p.MaxRetryDelay)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// ParkReason returns why a delivery whose handler failed with err on
// delivery deliveryCount must be parked, or nil if it is to be retried.
func (p RedeliveryPolicy) ParkReason(err error, deliveryCount int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ferrytype.ErrPoison):
		return err
	case errors.Is(err, ferrytype.ErrSchemaOutdated), errors.Is(err, ferrytype.ErrUndefinedTable):
		// The message is good; the consumer's database is not ready (a
		// table its migrations create is missing). Retried at the longest
		// delay until someone migrates, however many deliveries that
		// takes: parking it would dead-letter every message meanwhile.
		return nil
	case deliveryCount >= p.MaxDeliveries:
		return fmt.Errorf("failed on delivery %d of at most %d: %w", deliveryCount, p.MaxDeliveries, err)
	}
	return nil
}

// ErrMalformed marks a message that cannot be handled as it is: its
// payload does not decode, or a header it needs is missing. Consumers park
// it without running the handler; the park reason wraps it.
var ErrMalformed = errors.New("malformed message")

// CheckDelivery is what a consumer checks before it runs the handler: the
// payload against its content type (CheckPayload), then validate, when not
// nil. Any error it returns wraps ErrMalformed.
func CheckDelivery(contentType string, d *Delivery, validate func(*Delivery) error) error {
	if err := CheckPayload(contentType, d.Payload); err != nil {
		return err
	}
	if validate == nil {
		return nil
	}
	if err := validate(d); err != nil {
		return malformed(err)
	}
	return nil
}

// CheckPayload returns an error wrapping ErrMalformed if a message of the
// given content type cannot hold body: a JSON content type, or none, must
// hold valid JSON (an event's payload is JSON).
func CheckPayload(contentType string, body []byte) error {
	ct := strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	if (ct == "" || ct == "application/json" || strings.HasSuffix(ct, "+json")) && !json.Valid(body) {
		return fmt.Errorf("%w: payload is not valid JSON", ErrMalformed)
	}
	return nil
}

// RequireHeaders returns a validation for a consumer's config
// (ConsumerConfig.Validate) that finds a delivery malformed when one of
// the named headers is missing or empty. RequireHeaders(HeaderEventID,
// HeaderEventType) accepts only events published by a ferry relay.
func RequireHeaders(names ...string) func(d *Delivery) error {
	return func(d *Delivery) error {
		for _, n := range names {
			if d.Headers[n] == "" {
				return fmt.Errorf("%w: missing header %s", ErrMalformed, n)
			}
		}
		return nil
	}
}
