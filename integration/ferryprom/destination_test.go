package ferryprom_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrytype"
)

// byDestination sums a counter of table by its destination label.
func byDestination(t *testing.T, g prometheus.Gatherer, name, table string, labels ...string) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			if have["table"] != table {
				continue
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			out[have["destination"]] += m.GetCounter().GetValue()
		}
	}
	return out
}

// publish reports one batch of msgs, one per destination, through the
// relay hooks, as a relay does: outcomes, then the settles.
func publish(m *ferryprom.Metrics, table string, dests []string, outcome ferrytype.PublishResult) {
	msgs := make([]ferrytype.Message, len(dests))
	res := make([]ferrytype.PublishResult, len(dests))
	settled := make([]ferry.DestinationSettled, len(dests))
	for i, d := range dests {
		msgs[i] = ferrytype.Message{ID: fmt.Sprint(i), Type: "T", Destination: d, Attempt: 1, CreatedAt: time.Now()}
		res[i] = outcome
		if outcome.Outcome == ferrytype.OutcomeConfirmed {
			settled[i] = ferry.DestinationSettled{Destination: msgs[i].Route(), Sent: 1}
		} else {
			settled[i] = ferry.DestinationSettled{Destination: msgs[i].Route(), Dead: 1}
		}
	}
	m.OnPublish(table, msgs, res, time.Millisecond)
	m.OnSettleDestinations(table, settled)
}

// The destination label takes at most MaxDestinations values (default
// 100) across every table; later destinations are counted under "_other",
// so that totals stay exact while the series stay bounded.
func TestDestinationLabelIsBounded(t *testing.T) {
	t.Parallel()
	t.Run("Default100", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := ferryprom.New(reg, nil)
		require.NoError(t, err)
		dests := make([]string, 150)
		for i := range dests {
			dests[i] = fmt.Sprintf("orders.%03d", i)
		}
		publish(m, "t1", dests, ferrytype.Confirmed())
		publish(m, "t1", dests[:10], ferrytype.Confirmed())  // admitted: their own series
		publish(m, "t1", dests[140:], ferrytype.Confirmed()) // not: _other
		sent := byDestination(t, reg, "ferry_relay_sent_total", "t1")
		require.Len(t, sent, ferryprom.DefaultMaxDestinations+1)
		require.Equal(t, 2.0, sent["orders.000"])
		require.Equal(t, 1.0, sent["orders.099"])
		require.NotContains(t, sent, "orders.100")
		require.Equal(t, 60.0, sent[ferryprom.DestinationOther], "50 + 10 past the bound")
		total := 0.0
		for _, v := range sent {
			total += v
		}
		require.Equal(t, 170.0, total, "the bound loses no event")
		confirmed := byDestination(t, reg, "ferry_relay_publish_outcomes_total", "t1", "outcome", "confirmed")
		require.Len(t, confirmed, ferryprom.DefaultMaxDestinations+1)
		require.Equal(t, 60.0, confirmed[ferryprom.DestinationOther])
	})

	t.Run("SharedAcrossTables", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := ferryprom.New(reg, &ferryprom.Config{MaxDestinations: 3})
		require.NoError(t, err)
		publish(m, "t1", []string{"a", "b"}, ferrytype.Confirmed())
		publish(m, "t2", []string{"c", "d", "a"}, ferrytype.Rejected(errors.New("too big")))
		require.Equal(t, map[string]float64{"a": 1, "b": 1}, byDestination(t, reg, "ferry_relay_sent_total", "t1"))
		require.Equal(t, map[string]float64{"a": 1, "c": 1, ferryprom.DestinationOther: 1},
			byDestination(t, reg, "ferry_relay_dead_total", "t2"))
		require.Equal(t, map[string]float64{"a": 1, "c": 1, ferryprom.DestinationOther: 1},
			byDestination(t, reg, "ferry_relay_publish_outcomes_total", "t2", "outcome", "rejected"))
	})

	t.Run("NegativeIsOtherOnly", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := ferryprom.New(reg, &ferryprom.Config{MaxDestinations: -1})
		require.NoError(t, err)
		publish(m, "t1", []string{"a", "b", ""}, ferrytype.Confirmed())
		// An event without a destination goes to its type.
		require.Equal(t, map[string]float64{ferryprom.DestinationOther: 3}, byDestination(t, reg, "ferry_relay_sent_total", "t1"))
	})

	t.Run("UnknownDestination", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := ferryprom.New(reg, &ferryprom.Config{MaxDestinations: 1})
		require.NoError(t, err)
		// Malformed rows: DEAD at their claim, destination unknown.
		m.OnSettleDestinations("t1", []ferry.DestinationSettled{{Dead: 2}, {Destination: "a", Retried: 3}})
		require.Equal(t, map[string]float64{ferryprom.DestinationUnknown: 2}, byDestination(t, reg, "ferry_relay_dead_total", "t1"))
		require.Equal(t, 3.0, value(t, reg, "ferry_relay_retries_total", "table", "t1"), "retries have no destination label")
		m.OnHeartbeat("t1", nil)
		m.OnHeartbeat("t1", errors.New("no table"))
		require.Equal(t, 1.0, value(t, reg, "ferry_relay_heartbeat_failures_total", "table", "t1"))
	})
}

// ferry_build_info is 1, labelled with the version given (or read from the
// binary), the revision and the Go version.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	require.NoError(t, ferryprom.RegisterBuildInfo(reg, ferryprom.BuildInfo{Version: "v1.2.3", Revision: "abc123"}))
	require.Equal(t, 1.0, value(t, reg, "ferry_build_info", "version", "v1.2.3", "revision", "abc123",
		"goversion", runtime.Version()))
	err := ferryprom.RegisterBuildInfo(reg, ferryprom.BuildInfo{Version: "v1.2.3", Revision: "abc123"})
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &are, "registered once")
	require.ErrorIs(t, ferryprom.RegisterBuildInfo(nil, ferryprom.BuildInfo{}), ferrytype.ErrInvalidConfig)

	reg = prometheus.NewRegistry()
	require.NoError(t, reg.Register(ferryprom.NewBuildInfo(ferryprom.BuildInfo{}, prometheus.Labels{"service": "orders"})))
	m, ok := series(t, reg, "ferry_build_info", "service", "orders", "goversion", runtime.Version())
	require.True(t, ok)
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "version" {
			require.NotEmpty(t, lp.GetValue(), "read from the binary when not given")
		}
	}
}
