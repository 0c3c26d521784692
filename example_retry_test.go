package ferry_test

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry"
)

// The default retry policy doubles the delay from one second, with ±20%
// jitter, and gives up after 20 attempts.
func ExampleExponentialBackoff() {
	policy := ferry.ExponentialBackoff{Initial: time.Second, Max: time.Minute, Jitter: -1, MaxAttempts: 5}
	for attempt := 1; attempt <= 5; attempt++ {
		delay, dead := policy.Next(attempt, ferry.PublishResult{})
		fmt.Println(attempt, delay, dead)
	}
	// Output:
	// 1 1s false
	// 2 2s false
	// 3 4s false
	// 4 8s false
	// 5 0s true
}
