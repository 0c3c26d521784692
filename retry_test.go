package ferry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestExponentialBackoffStaysWithinJitterAndCap(t *testing.T) {
	p := ferry.ExponentialBackoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2, MaxAttempts: 30}
	for attempt := 1; attempt < 30; attempt++ {
		base := min(100*time.Millisecond<<min(attempt-1, 20), 2*time.Second)
		for i := 0; i < 200; i++ {
			d, dead := p.Next(attempt, ferrytype.Unknown(nil))
			require.False(t, dead)
			require.GreaterOrEqual(t, d, time.Duration(float64(base)*0.8), "attempt %d", attempt)
			require.LessOrEqual(t, d, time.Duration(float64(base)*1.2), "attempt %d", attempt)
		}
	}
	_, dead := p.Next(30, ferrytype.Unknown(nil))
	require.True(t, dead)
	// Defaults: 20 attempts.
	_, dead = ferry.ExponentialBackoff{}.Next(19, ferrytype.PublishResult{})
	require.False(t, dead)
	_, dead = ferry.ExponentialBackoff{}.Next(20, ferrytype.PublishResult{})
	require.True(t, dead)
}

func TestRelayConfigValidationNamesTheField(t *testing.T) {
	cases := map[string]*ferry.RelayConfig{
		"BatchSize":      {BatchSize: -1},
		"Lanes":          {Lanes: 100},
		"PublishTimeout": {Lease: time.Second, PublishTimeout: 2 * time.Second},
		"Retention":      {Retention: -time.Second},
	}
	for field, cfg := range cases {
		_, err := ferry.NewRelay(nopStore{}, nopPublisher{}, cfg)
		require.ErrorIs(t, err, ferry.ErrInvalidConfig, field)
		require.ErrorContains(t, err, field)
	}
}
