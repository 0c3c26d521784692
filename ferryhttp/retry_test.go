package ferryhttp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Retry-After is twice the typical request's time, at least a second, and
// never more than the lease the running claim has left: a 30 s lease does
// not send every duplicate of a 5 ms request away for 30 s.
func TestRetryAfterFollowsTheTypicalRequestNotTheLease(t *testing.T) {
	var k Keys[struct{}]
	require.Equal(t, time.Second, k.retryAfter(30*time.Second), "no request seen yet")
	for range 50 {
		k.sample(5 * time.Millisecond)
	}
	require.Equal(t, time.Second, k.retryAfter(30*time.Second), "fast requests: the one-second floor")
	for range 100 {
		k.sample(4 * time.Second)
	}
	got := k.retryAfter(30 * time.Second)
	require.InDelta(t, float64(8*time.Second), float64(got), float64(100*time.Millisecond), "slow requests: twice their time")
	require.Equal(t, 3*time.Second, k.retryAfter(3*time.Second), "never past the lease left")
	require.Equal(t, 200*time.Millisecond, k.retryAfter(200*time.Millisecond))
}

func TestFailOutsideAMiddlewareHandlerDoesNothing(t *testing.T) {
	require.False(t, Fail(context.Background(), errors.New("deadlock")))
	f := &failure{}
	ctx := context.WithValue(context.Background(), failKey{}, f)
	require.False(t, Fail(ctx, nil), "a nil error is not a failure")
	first, second := errors.New("first"), errors.New("second")
	require.True(t, Fail(ctx, first))
	require.True(t, Fail(ctx, second))
	require.Same(t, first, f.err, "the first error handed back counts")
}
