package ferryadmin_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestRelays(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			t.Run("AliveAndGone", func(t *testing.T) {
				b := setup(t, kind)
				reg := b.admin
				require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "z-alive", Host: "h1", PID: 7, Version: "v1",
					Lanes: 2, BrokerConnected: true, Broker: "nats://mq:4222", InFlight: 3}))
				require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "a-killed", Host: "h2", PID: 8}))
				_, err := b.st.DB.ExecContext(b.ctx, "UPDATE "+b.st.Driver.Table()+"_relay SET last_seen = '2001-02-03 04:05:06'"+
					" WHERE relay_id = 'a-killed'")
				require.NoError(t, err)

				rs, err := ferryadmin.Relays(b.ctx, b.admin, 0)
				require.NoError(t, err)
				require.Len(t, rs, 2)
				require.Equal(t, "z-alive", rs[0].ID, "alive relays first")
				require.True(t, rs[0].Alive)
				require.Equal(t, int64(3), rs[0].InFlight)
				require.Less(t, rs[0].Age, ferryadmin.DefaultRelayStaleAfter)
				require.Equal(t, "a-killed", rs[1].ID)
				require.False(t, rs[1].Alive)
				require.Greater(t, rs[1].Age, 20*365*24*time.Hour)
				require.InDelta(t, rs[1].Age.Seconds(), rs[1].AgeSeconds, 1)

				var m map[string]any
				raw, err := json.Marshal(rs[0])
				require.NoError(t, err)
				require.NoError(t, json.Unmarshal(raw, &m))
				for _, k := range []string{"id", "host", "pid", "version", "started_at", "last_seen", "lanes", "ordered",
					"in_flight", "broker_connected", "broker", "alive", "age_seconds"} {
					require.Contains(t, m, k, string(raw))
				}
				require.NotContains(t, m, "Age")
				require.NotContains(t, m, "broker_error", "empty: left out")

				_, err = ferryadmin.Relays(b.ctx, b.admin, -time.Second)
				require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			})

			t.Run("ARelayThatStopsBeatingDies", func(t *testing.T) {
				b := setup(t, kind)
				reg := b.admin
				require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r"}))
				var rs []ferryadmin.RelayInfo
				eventually(t, 30*time.Second, func() bool {
					var err error
					rs, err = ferryadmin.Relays(b.ctx, b.admin, 50*time.Millisecond)
					require.NoError(t, err)
					require.Len(t, rs, 1)
					return !rs[0].Alive
				}, "a relay that does not beat is dead once its last beat is staleAfter old")
				require.GreaterOrEqual(t, rs[0].Age, 50*time.Millisecond)
				require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r"}))
				rs, err := ferryadmin.Relays(b.ctx, b.admin, time.Hour)
				require.NoError(t, err)
				require.True(t, rs[0].Alive, "a beat brings it back")
			})

			t.Run("StatusSaysNoRelayAlive", func(t *testing.T) {
				b := setup(t, kind)
				reg := b.admin
				b.enqueue(t, event("OrderPaid", "1"), event("OrderPaid", "2"))
				rep, err := ferryadmin.Status(b.ctx, b.admin, nil)
				require.NoError(t, err)
				require.Empty(t, rep.Relays)
				require.Len(t, rep.Attention, 1)
				require.Contains(t, rep.Attention[0], "no relay alive: 2 events pending")
				require.Contains(t, rep.Attention[0], "none is recorded")

				require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r1", Host: "box"}))
				rep, err = ferryadmin.Status(b.ctx, b.admin, nil)
				require.NoError(t, err)
				require.Len(t, rep.Relays, 1)
				require.True(t, rep.Relays[0].Alive)
				require.Empty(t, rep.Attention, "a relay is alive: the pending events are young")

				var attention []string
				eventually(t, 30*time.Second, func() bool {
					rep, err = ferryadmin.Status(b.ctx, b.admin, &ferryadmin.StatusOptions{RelayStaleAfter: 50 * time.Millisecond})
					require.NoError(t, err)
					attention = rep.Attention
					return len(rep.Relays) == 1 && !rep.Relays[0].Alive
				}, "the relay stops beating")
				require.Len(t, attention, 1)
				require.Contains(t, attention[0], "no relay alive: 2 events pending")
				require.Contains(t, attention[0], "the last one, r1 on box, beat")

				raw, err := json.Marshal(rep)
				require.NoError(t, err)
				require.Contains(t, string(raw), `"relays":[{"id":"r1","host":"box"`)
			})

			t.Run("StatusBeforeMigration0003", func(t *testing.T) {
				b := setup(t, kind)
				_, err := b.st.DB.ExecContext(b.ctx, "DROP TABLE "+b.st.Driver.Table()+"_relay")
				require.NoError(t, err)
				b.enqueue(t, event("OrderPaid", "1"))
				rep, err := ferryadmin.Status(b.ctx, b.admin, nil)
				require.NoError(t, err, "status works without the heartbeat table")
				require.Equal(t, int64(1), rep.Stats.New)
				require.NotEmpty(t, rep.RelaysError)
				require.Len(t, rep.Attention, 1)
				require.Contains(t, rep.Attention[0], "heartbeat table "+b.st.Driver.Table()+"_relay is missing")
				require.Contains(t, rep.Attention[0], "run ferry migrate")
			})
		})
	}
}
