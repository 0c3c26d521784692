package testsvc

import (
	"testing"
	"time"
)

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test if d passes first; why, when not nil, says what was awaited.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			msg := "condition not met"
			if why != nil {
				msg = why()
			}
			t.Fatalf("not reached within %s: %s", d, msg)
		case <-tick.C:
		}
	}
}
