package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// windowReport is a report behind a backlog larger than the pending window,
// or not.
func windowReport(windowed bool) ferryadmin.StatusReport {
	st := ferrystore.Stats{New: 3, Ready: 3, OldestPending: time.Hour, OldestPendingID: "e1", Windowed: windowed}
	if windowed {
		st.New, st.Ready = 1_000_000, 1_000_000
	}
	return ferryadmin.StatusReport{Table: "outbox_event", Dialect: "mysql", Stats: st, Ready: st.Ready,
		Counts:               map[string]int64{"NEW": st.New, "SENDING": 0, "DEAD": 0, "DISCARDED": 0},
		OldestPendingSeconds: st.OldestPending.Seconds(), PendingWindow: ferrystore.PendingWindow, PendingWindowed: windowed,
		OldestPending: &ferryadmin.Event{ID: "e1", Status: ferrytype.StatusNew, Type: "OrderPaid", Destination: "orders.paid"},
		Destinations:  []ferrystore.DestinationStats{{Destination: "orders.paid", New: 3, OldestPending: time.Hour}},
		Attempts:      []ferrystore.AttemptCount{{Status: ferrytype.StatusNew, Events: 3}},
		Failed: []ferryadmin.Event{{ID: "e2", Status: ferrytype.StatusNew, Attempts: 1, Type: "OrderPaid",
			Destination: "orders.paid", LastError: "attempt 1: nack"}},
		Attention: []string{}, Relays: []ferryadmin.RelayInfo{}}
}

func TestStatusSaysWhatTheFiguresOfABacklogAreOf(t *testing.T) {
	t.Run("BehindABacklogLargerThanTheWindow", func(t *testing.T) {
		rep := windowReport(true)
		var out bytes.Buffer
		printStatus(&out, &rep)
		for _, line := range []string{
			"NEW        1000000 (1000000 ready now)",
			"oldest pending event among the 10000 next in line: 1h0m0s old",
			"pending by destination among the 10000 next in line, oldest first:",
			"attempts of pending events among the 10000 next in line:",
			"events that failed, oldest first (DEAD, and pending among the 10000 next in line):",
		} {
			require.Contains(t, out.String(), line)
		}
		out.Reset()
		require.NoError(t, writeJSON(&out, rep))
		var v map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &v))
		require.Equal(t, float64(ferrystore.PendingWindow), v["pending_window"])
		require.Equal(t, true, v["pending_windowed"])
		require.Equal(t, 3600.0, v["oldest_pending_seconds"], "the documented fields stay")
	})

	t.Run("WithinTheWindowTheFiguresAreExact", func(t *testing.T) {
		rep := windowReport(false)
		var out bytes.Buffer
		printStatus(&out, &rep)
		require.NotContains(t, out.String(), "next in line")
		for _, line := range []string{"oldest pending event: 1h0m0s old", "pending by destination, oldest first:",
			"attempts of pending events:", "events that failed, oldest first:"} {
			require.Contains(t, out.String(), line)
		}
		out.Reset()
		require.NoError(t, writeJSON(&out, rep))
		require.Contains(t, out.String(), `"pending_windowed": false`)
	})
}
