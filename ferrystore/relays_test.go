package ferrystore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
)

func TestMaintenanceLeader(t *testing.T) {
	now := time.Now()
	beat := func(id string, startedAgo, lastAgo time.Duration) ferrystore.RelayBeat {
		return ferrystore.RelayBeat{ID: id, StartedAt: now.Add(-startedAgo), LastSeen: now.Add(-lastAgo)}
	}
	const stale = 15 * time.Second
	for _, c := range []struct {
		name  string
		beats []ferrystore.RelayBeat
		want  string
	}{
		{"None", nil, ""},
		{"OldestAliveLeads", []ferrystore.RelayBeat{beat("b", time.Minute, time.Second), beat("a", 2*time.Minute, 2*time.Second)}, "a"},
		{"SilentOldestDoesNot", []ferrystore.RelayBeat{beat("a", time.Hour, stale), beat("b", time.Minute, time.Second)}, "b"},
		{"AllSilent", []ferrystore.RelayBeat{beat("a", time.Hour, time.Minute)}, ""},
		{"TieByID", []ferrystore.RelayBeat{beat("c", time.Minute, 0), beat("b", time.Minute, 0)}, "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ferrystore.MaintenanceLeader(c.beats, now, stale); got != c.want {
				t.Fatalf("MaintenanceLeader = %q, want %q", got, c.want)
			}
		})
	}
}

// The relays of a table read its heartbeat rows after each beat; the
// oldest relay alive leads the table's maintenance.
func ExampleMaintenanceLeader() {
	now := time.Now()
	beats := []ferrystore.RelayBeat{
		{ID: "relay-1", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Minute)}, // killed a minute ago
		{ID: "relay-2", StartedAt: now.Add(-30 * time.Minute), LastSeen: now.Add(-time.Second)},
		{ID: "relay-3", StartedAt: now.Add(-time.Minute), LastSeen: now.Add(-2 * time.Second)},
	}
	fmt.Println(ferrystore.MaintenanceLeader(beats, now, 15*time.Second))
	// Output: relay-2
}
