package ferry_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrytype"
)

// poisonRow is an outbox row written by hand, with a malformed column.
type poisonRow struct {
	name, headers, payload string
	reason                 string
	unchecked              bool // written with the table's CHECK constraints off
}

// insertPoison writes p by hand, next to the relay's well-formed events,
// to the same subject.
func (b *relayBundle) insertPoison(t *testing.T, id string, p poisonRow) {
	t.Helper()
	table := `"` + b.st.Driver.Table() + `"`
	if b.st.Kind == "mysql" {
		table = "`" + b.st.Driver.Table() + "`"
	}
	q := fmt.Sprintf("INSERT INTO %s (event_id, aggregate_id, event_type, payload, headers, destination)"+
		" VALUES ('%s', '%s', 'OrderPaid', '%s', '%s', '%s')", table, id, id, p.payload, p.headers, b.subject)
	switch {
	case p.unchecked && b.st.Kind == "mysql":
		q = "SET STATEMENT check_constraint_checks = 0 FOR " + q
	case p.unchecked && b.st.Kind == "sqlite":
		q = "PRAGMA ignore_check_constraints = ON; " + q + "; PRAGMA ignore_check_constraints = OFF"
	}
	_, err := b.st.DB.ExecContext(b.ctx, q)
	require.NoError(t, err, q)
}

// Malformed rows among good events: every good event is published and
// SENT exactly once, each malformed row ends DEAD at once with its reason
// and is never published, and the relay neither fails a cycle nor logs in
// a loop.
func TestRelayMalformedRowsNeverStallTheOutbox(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			b := setupRelay(t, kind)
			poison := []poisonRow{
				{name: "headers", headers: `{"retry":1}`, payload: `{}`,
					reason: "malformed row: headers: json: cannot unmarshal number into Go value of type string"},
				{name: "header-name", headers: `{"":"x"}`, payload: `{}`, reason: "malformed row: headers: a header name is empty"},
			}
			if kind != "postgres" { // PostgreSQL's json type refuses it outright
				poison = append(poison, poisonRow{name: "payload", headers: `{}`, payload: `not json`, unchecked: true,
					reason: "malformed row: payload: not valid JSON"})
			}
			// Good events before and after the malformed rows, all in
			// one batch.
			good := b.enqueue(t, 20, func(i int) string { return fmt.Sprint("a", i) })
			var bad []string
			for _, p := range poison {
				id := "poison-" + p.name
				b.insertPoison(t, id, p)
				bad = append(bad, id)
			}
			good = append(good, b.enqueue(t, 20, func(i int) string { return fmt.Sprint("b", i) })...)

			var logs syncBuffer
			pub := b.publisher(t)
			reg := prometheus.NewRegistry()
			metrics, err := ferryprom.New(reg, nil)
			require.NoError(t, err)
			rec := &settleRecorder{}
			r := b.relay(t, pub, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Hooks: []ferry.Hook{metrics, rec},
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			st := b.waitSettled(t, 20*time.Second)
			require.Equal(t, int64(len(bad)), st.Dead)

			msgs := b.read(t, len(good))
			require.Len(t, msgs, len(good), "every good event published once, no malformed one")
			for _, id := range good {
				require.Equal(t, 1, pub.count(id), id)
				row, err := b.st.Driver.Get(b.ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferrytype.StatusSent, row.Status, id)
			}
			for i, id := range bad {
				require.Zero(t, pub.count(id), "%s reached the publisher", id)
				row, err := b.st.Driver.Get(b.ctx, id)
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
			require.Equal(t, int64(len(good)), rec.destinations()[b.subject].Sent)
			families, err := reg.Gather()
			require.NoError(t, err)
			counters := map[string]float64{}
			for _, f := range families {
				for _, m := range f.GetMetric() {
					if m.GetCounter() != nil {
						counters[f.GetName()] += m.GetCounter().GetValue()
					}
				}
			}
			require.Equal(t, float64(len(bad)), counters["ferry_relay_dead_total"])
			require.Equal(t, float64(len(good)), counters["ferry_relay_sent_total"])
			require.Equal(t, float64(len(good)), counters["ferry_relay_claimed_events_total"])
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
		})
	}
}
