package ferry

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
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

// Each relay alive that polls the table runs an equal share of TableLanes,
// the older ones one more while they do not divide evenly, at most its own
// Lanes, and no more than it ran while the number of relays alive
// changes; a relay not in the rows, or a log relay, runs all its lanes.
func TestMaintainerShareOfTableLanes(t *testing.T) {
	now := time.Now()
	beat := func(id string, startedAgo time.Duration, source string) ferrystore.RelayBeat {
		return ferrystore.RelayBeat{ID: id, StartedAt: now.Add(-startedAgo), LastSeen: now, Source: source}
	}
	rows := []ferrystore.RelayBeat{
		beat("d", 1*time.Minute, ferrystore.RelaySourceTable),
		beat("a", 4*time.Minute, ferrystore.RelaySourceTable),
		beat("c", 2*time.Minute, ""), // a relay older than the source column
		beat("b", 3*time.Minute, ferrystore.RelaySourceTable),
		beat("log", 9*time.Minute, ferrystore.RelaySourceLog),
		{ID: "dead", StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Minute), Source: ferrystore.RelaySourceTable},
	}
	for _, c := range []struct {
		id          string
		tableLanes  int
		lanes       int
		source      string
		rows        []ferrystore.RelayBeat
		ok          bool
		wantAllowed int64
	}{
		{"a", 6, 4, ferrystore.RelaySourceTable, rows, true, 2}, // 6 over 4: a and b two, c and d one
		{"b", 6, 4, ferrystore.RelaySourceTable, rows, true, 2},
		{"c", 6, 4, ferrystore.RelaySourceTable, rows, true, 1},
		{"d", 6, 4, ferrystore.RelaySourceTable, rows, true, 1},
		{"a", 8, 1, ferrystore.RelaySourceTable, rows, true, 1},  // at most its own lanes
		{"d", 3, 2, ferrystore.RelaySourceTable, rows, true, 0},  // a standby
		{"x", 3, 2, ferrystore.RelaySourceTable, rows, true, 2},  // not in the rows
		{"a", 3, 2, ferrystore.RelaySourceTable, rows, false, 2}, // the rows could not be read
		{"log", 3, 2, ferrystore.RelaySourceLog, rows, true, 2},  // a log relay
	} {
		cfg := &RelayConfig{ID: c.id, Lanes: c.lanes, TableLanes: c.tableLanes, Heartbeat: HeartbeatConfig{Interval: time.Second},
			Logger: slog.New(slog.DiscardHandler)}
		st := &laneState{changed: make(chan struct{})}
		st.allowed.Store(1) // as NewRelay starts a relay that shares
		m := &maintainer{cfg: cfg, state: st, source: c.source, log: cfg.Logger}
		m.share(c.rows, c.ok)
		first := st.allowed.Load()
		m.share(c.rows, c.ok)
		if got := st.allowed.Load(); got != c.wantAllowed {
			t.Errorf("%s with TableLanes %d, Lanes %d, source %q, rows read %v: %d lanes, want %d", c.id, c.tableLanes,
				c.lanes, c.source, c.ok, got, c.wantAllowed)
		}
		// The first round that finds the relay in the rows gives it at
		// most the one lane it started with: the relays started with it
		// may not be there yet; the second, with the same relays, its
		// share.
		wantFirst := c.wantAllowed
		if slices.ContainsFunc(c.rows, func(b ferrystore.RelayBeat) bool { return b.ID == c.id }) && c.ok &&
			c.source == ferrystore.RelaySourceTable {
			wantFirst = min(wantFirst, 1)
		}
		if first != wantFirst {
			t.Errorf("%s with TableLanes %d, Lanes %d, source %q, rows read %v: first round %d lanes, want %d", c.id,
				c.tableLanes, c.lanes, c.source, c.ok, first, wantFirst)
		}
	}
}

// A relay's share falls at once when relays join, and rises only once two
// rounds in a row found the same number alive: relays coming up one after
// another never run more lanes together than the table's.
func TestMaintainerShareRisesOnlyOnAStableCount(t *testing.T) {
	now := time.Now()
	beat := func(id string, startedAgo time.Duration) ferrystore.RelayBeat {
		return ferrystore.RelayBeat{ID: id, StartedAt: now.Add(-startedAgo), LastSeen: now, Source: ferrystore.RelaySourceTable}
	}
	a, b, c := beat("a", 3*time.Minute), beat("b", 2*time.Minute), beat("c", time.Minute)
	cfg := &RelayConfig{ID: "a", Lanes: 4, TableLanes: 4, Heartbeat: HeartbeatConfig{Interval: time.Second},
		Logger: slog.New(slog.DiscardHandler)}
	st := &laneState{changed: make(chan struct{})}
	st.allowed.Store(1)
	m := &maintainer{cfg: cfg, state: st, source: ferrystore.RelaySourceTable, log: cfg.Logger}
	for i, round := range []struct {
		rows []ferrystore.RelayBeat
		want int64
	}{
		{[]ferrystore.RelayBeat{a}, 1},       // its first round: the one lane it started with
		{[]ferrystore.RelayBeat{a}, 4},       // alone twice: all four
		{[]ferrystore.RelayBeat{a, b}, 2},    // b joined: down at once
		{[]ferrystore.RelayBeat{a, b, c}, 2}, // c joined: 4 over 3, a is the oldest: 2
		{[]ferrystore.RelayBeat{a, b}, 2},    // c gone: not up yet
		{[]ferrystore.RelayBeat{a}, 2},       // b gone: not up yet
		{[]ferrystore.RelayBeat{a}, 4},       // alone twice again
	} {
		m.share(round.rows, true)
		if got := st.allowed.Load(); got != round.want {
			t.Fatalf("round %d, %d relays alive: %d lanes, want %d", i+1, len(round.rows), got, round.want)
		}
	}
}
