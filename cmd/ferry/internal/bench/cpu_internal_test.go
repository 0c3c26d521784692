package bench

import (
	"testing"
	"time"
)

func TestProcCPUSinceIsNeverNegative(t *testing.T) {
	before := procCPU{"10": 5 * time.Second, "11": 3 * time.Second, "12": time.Second}
	// 11 ended (its CPU gone from the sum), 12 went on, 13 started.
	after := procCPU{"10": 5 * time.Second, "12": 1500 * time.Millisecond, "13": 200 * time.Millisecond}
	if got, want := after.since(before), 700*time.Millisecond; got != want {
		t.Fatalf("since = %s, want %s", got, want)
	}
	if got := (procCPU{}).since(before); got != 0 {
		t.Fatalf("every process ended: since = %s, want 0", got)
	}
}
