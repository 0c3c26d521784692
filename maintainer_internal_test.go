package ferry

import (
	"testing"
	"time"
)

// The last minute's count is taken from the newest sample at least a minute
// old, or from the first one while the relay is younger.
func TestSentWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var w sentWindow
	steps := []struct {
		after time.Duration
		sent  int64
		want  int64
	}{
		{0, 0, 0},
		{5 * time.Second, 100, 100},
		{30 * time.Second, 400, 400},
		{60 * time.Second, 1000, 1000}, // the first sample is exactly a minute old
		{65 * time.Second, 1100, 1000}, // from the sample at 5 s
		{95 * time.Second, 1100, 700},  // from the sample at 30 s
		{200 * time.Second, 1100, 0},   // nothing sent in the last minute
		{205 * time.Second, 1150, 50},
	}
	for _, s := range steps {
		if got := w.add(t0.Add(s.after), s.sent); got != s.want {
			t.Fatalf("at %s with %d sent: last minute %d, want %d", s.after, s.sent, got, s.want)
		}
	}
	if len(w.samples) > 3 {
		t.Fatalf("%d samples kept, want only those of the last minute and one older", len(w.samples))
	}
}
