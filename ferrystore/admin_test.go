package ferrystore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
)

// DestinationStats' JSON form gives its age in seconds, and reads back.
func TestDestinationStatsJSON(t *testing.T) {
	d := ferrystore.DestinationStats{Destination: "orders.paid", New: 3, Sending: 1, OldestPending: 1500 * time.Millisecond}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"destination":"orders.paid","new":3,"sending":1,"oldest_pending_seconds":1.5}`
	if string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	var back ferrystore.DestinationStats
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != d {
		t.Fatalf("read back %+v, want %+v", back, d)
	}
}
