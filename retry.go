package ferry

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// RetryPolicy decides what happens to an event whose publish attempt did
// not end confirmed: an unknown, returned or rejected outcome, or a lease
// that expired mid-attempt.
type RetryPolicy interface {
	// Next is called after attempt number attempts (1 for the first) ended
	// with res. It returns how long to wait before the next attempt, or
	// dead=true to give up and move the event to DEAD.
	Next(attempts int, res ferrytype.PublishResult) (delay time.Duration, dead bool)
}

// Defaults of ExponentialBackoff, which a zero field takes.
const (
	DefaultRetryInitial    = time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultRetryMultiplier = 2.0
	DefaultRetryJitter     = 0.2
	DefaultMaxAttempts     = 20
)

// ExponentialBackoff is the default RetryPolicy: the delay doubles from
// Initial up to Max, with random jitter, and the event goes DEAD after
// MaxAttempts attempts. Zero fields take their defaults.
type ExponentialBackoff struct {
	// Initial is the delay after the first failed attempt. Default 1s.
	Initial time.Duration
	// Max caps the delay. Default 5m.
	Max time.Duration
	// Multiplier grows the delay per attempt. Default 2.
	Multiplier float64
	// Jitter spreads each delay uniformly by ±Jitter×delay. Default 0.2;
	// negative means none.
	Jitter float64
	// MaxAttempts is the number of attempts before the event goes DEAD.
	// Default 20 (the 19 delays between them add up to about an hour with
	// the other defaults: 511 s doubling to the cap, then 10 × 5 min).
	MaxAttempts int
}

// Next implements RetryPolicy.
func (b ExponentialBackoff) Next(attempts int, _ ferrytype.PublishResult) (time.Duration, bool) {
	b = b.withDefaults()
	if attempts >= b.MaxAttempts {
		return 0, true
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(max(attempts-1, 0)))
	if d > float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d *= 1 + b.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d), false
}

func (b ExponentialBackoff) withDefaults() ExponentialBackoff {
	if b.Initial <= 0 {
		b.Initial = DefaultRetryInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultRetryMax
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultRetryMultiplier
	}
	if b.Jitter == 0 {
		b.Jitter = DefaultRetryJitter
	} else if b.Jitter < 0 {
		b.Jitter = 0
	}
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = DefaultMaxAttempts
	}
	return b
}
