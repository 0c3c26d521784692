package relaytest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// poisonRow is an outbox row written by hand, with a malformed column.
type poisonRow struct {
	name, headers, payload string
	reason                 string
	unchecked              bool // written with the table's CHECK constraints off
}

// RelayMalformedRowsNeverStallTheOutbox: malformed rows among good events:
// every good event is published and SENT exactly once, each malformed row
// ends DEAD at once with its reason and is never published, and the relay
// neither fails a cycle nor logs in a loop. The metrics a relay keeps are
// checked where the Env has Metrics.
func RelayMalformedRowsNeverStallTheOutbox[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	needs(t, e.Kind, e.InsertRaw != nil, "InsertRaw", "the malformed rows are written by hand")
	poison := []poisonRow{
		{name: "headers", headers: `{"retry":1}`, payload: `{}`,
			reason: "malformed row: headers: json: cannot unmarshal number into Go value of type string"},
		{name: "header-name", headers: `{"":"x"}`, payload: `{}`, reason: "malformed row: headers: a header name is empty"},
	}
	if e.Kind != "postgres" { // PostgreSQL's json type refuses it outright
		poison = append(poison, poisonRow{name: "payload", headers: `{}`, payload: `not json`, unchecked: true,
			reason: "malformed row: payload: not valid JSON"})
	}
	// Good events before and after the malformed rows, all in
	// one batch.
	good := e.Enqueue(t, 20, func(i int) string { return fmt.Sprint("a", i) })
	var bad []string
	for _, p := range poison {
		id := "poison-" + p.name
		e.InsertRaw(t, id, []string{"aggregate_id", "event_type", "payload", "headers", "destination"},
			[]string{id, "OrderPaid", p.payload, p.headers, e.Destination}, p.unchecked)
		bad = append(bad, id)
	}
	good = append(good, e.Enqueue(t, 20, func(i int) string { return fmt.Sprint("b", i) })...)

	var logs testenv.LogBuffer
	pub := e.CountingPublisher(t)
	rec := &settleRecorder{}
	hooks := []ferry.Hook{rec}
	var counted func() map[string]float64
	if e.Metrics != nil {
		var metrics ferry.Hook
		metrics, counted = e.Metrics(t)
		hooks = append(hooks, metrics)
	}
	r := e.Relay(t, pub, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Hooks: hooks,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	st := e.WaitSettled(t, 20*time.Second)
	require.Equal(t, int64(len(bad)), st.Dead)

	msgs := e.ReadAll(t, len(good))
	require.Len(t, msgs, len(good), "every good event published once, no malformed one")
	for _, id := range good {
		require.Equal(t, 1, pub.Count(id), id)
		row, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusSent, row.Status, id)
	}
	for i, id := range bad {
		require.Zero(t, pub.Count(id), "%s reached the publisher", id)
		row, err := e.Store.Get(e.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusDead, row.Status, id)
		require.Equal(t, 1, row.Attempt, "%s: DEAD on its first claim", id)
		require.Contains(t, row.LastError, poison[i].reason, id)
	}

	stats := r.Stats()
	require.Equal(t, int64(len(bad)), stats.Dead)
	require.Equal(t, int64(len(good)), stats.Confirmed)
	require.Zero(t, stats.Errors, "no relay cycle failed")
	require.Zero(t, stats.Retried)
	require.Equal(t, int64(len(good)), stats.Claimed, "malformed rows are never counted as claimed for a publish")
	// Hooks and metrics: each malformed row is one dead event.
	_, sent, retried, dead := rec.get()
	require.Equal(t, [3]int64{int64(len(good)), 0, int64(len(bad))}, [3]int64{sent, retried, dead})
	require.Equal(t, int64(len(bad)), rec.destinations()[""].Dead, "a malformed row's destination is unknown")
	require.Equal(t, int64(len(good)), rec.destinations()[e.Destination].Sent)
	if counted != nil {
		counters := counted()
		require.Equal(t, float64(len(bad)), counters["ferry_relay_dead_total"])
		require.Equal(t, float64(len(good)), counters["ferry_relay_sent_total"])
		require.Equal(t, float64(len(good)), counters["ferry_relay_claimed_events_total"])
	} else {
		t.Logf("the %s store's Env has no Metrics: the metrics' counters are not checked", e.Kind)
	}
	// One WARN line per malformed row, naming it; no error lines.
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level, Msg string
			EventID    string `json:"event_id"`
			Error      string
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		require.NotEqual(t, "ERROR", rec.Level, line)
		if strings.Contains(rec.Msg, "malformed") {
			require.Equal(t, "WARN", rec.Level, line)
			require.Contains(t, rec.Error, "malformed row", line)
			warned = append(warned, rec.EventID)
		}
	}
	require.ElementsMatch(t, bad, warned)
}
