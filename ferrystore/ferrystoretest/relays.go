package ferrystoretest

import (
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseRelays checks the relays' heartbeat table (ferrystore.RelayRegistry,
// part of every Store).
func exerciseRelays[TTx any](t *testing.T, h Harness[TTx]) {
	find := func(t *testing.T, beats []ferrystore.RelayBeat, id string) (ferrystore.RelayBeat, bool) {
		t.Helper()
		for _, b := range beats {
			if b.ID == id {
				return b, true
			}
		}
		return ferrystore.RelayBeat{}, false
	}

	t.Run("Migration", func(t *testing.T) {
		if h.Schemaless {
			t.Skip("the store is Schemaless: no migration creates the heartbeat table")
		}
		b := setup(t, h)
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		up, err := fs.ReadFile(fsys, "0003_relay.up.sql")
		require.NoError(t, err)
		require.Contains(t, string(up), b.store.Table()+"_relay")
		down, err := fs.ReadFile(fsys, "0003_relay.down.sql")
		require.NoError(t, err)
		require.Contains(t, string(down), "DROP TABLE IF EXISTS")
		require.Contains(t, string(down), b.store.Table()+"_relay")
	})

	t.Run("BeatRecordsAndUpdates", func(t *testing.T) {
		b := setup(t, h)
		reg := b.store
		beats, err := reg.Relays(b.ctx)
		require.NoError(t, err)
		require.Empty(t, beats, "no relay has beat on a fresh table")

		want := ferrystore.RelayBeat{ID: "host-a-42-x1", Host: "host-a", PID: 42, Version: "v1.2.3", Lanes: 3,
			Ordered: true, InFlight: 7, BrokerConnected: true, Broker: "nats://broker:4222", Sent: 1 << 40, SentLastMinute: 12345,
			Source: ferrystore.RelaySourceLog, Claims: "0123456789abcdef"}
		require.NoError(t, reg.Beat(b.ctx, want))
		beats, err = reg.Relays(b.ctx)
		require.NoError(t, err)
		require.Len(t, beats, 1)
		got := beats[0]
		require.WithinDuration(t, time.Now(), got.LastSeen, time.Minute, "last beat just now, by the database clock")
		require.WithinDuration(t, got.LastSeen, got.StartedAt, time.Second)
		got.StartedAt, got.LastSeen = time.Time{}, time.Time{}
		require.Equal(t, want, got)

		// Later beats change every field but the start: the start stays
		// while the last beat moves on with the database clock.
		next := want
		next.InFlight, next.BrokerConnected, next.BrokerError, next.Ordered, next.Lanes = 0, false, "dial tcp: refused", false, 1
		next.Sent, next.SentLastMinute, next.Source, next.Claims = 1<<40+5, 0, ferrystore.RelaySourceTable, "fedcba9876543210"
		var last ferrystore.RelayBeat
		waitFor(t, 30*time.Second, func() bool {
			require.NoError(t, reg.Beat(b.ctx, next))
			beats, err = reg.Relays(b.ctx)
			require.NoError(t, err)
			require.Len(t, beats, 1, "a beat updates the relay's row, it adds none")
			last = beats[0]
			return last.LastSeen.Sub(last.StartedAt) >= 20*time.Millisecond
		})
		require.Equal(t, int64(0), last.InFlight)
		require.False(t, last.BrokerConnected)
		require.Equal(t, "dial tcp: refused", last.BrokerError)
		require.False(t, last.Ordered)
		require.Equal(t, 1, last.Lanes)
		require.Equal(t, int64(1<<40+5), last.Sent)
		require.Zero(t, last.SentLastMinute)
		require.Equal(t, ferrystore.RelaySourceTable, last.Source)
		require.Equal(t, "fedcba9876543210", last.Claims, "a restarted process beats with its new prefix")
	})

	t.Run("SecretsAndSizes", func(t *testing.T) {
		b := setup(t, h)
		reg := b.store
		long := strings.Repeat("h", 400)
		require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r1", Host: long, Version: long, Source: long,
			Broker: "amqp://ferry:s3cr3tpw@mq:5672/", BrokerError: "dial amqp://ferry:s3cr3tpw@mq:5672/: refused " + long}))
		beats, err := reg.Relays(b.ctx)
		require.NoError(t, err)
		require.Len(t, beats, 1)
		got := beats[0]
		require.NotContains(t, got.Broker, "s3cr3tpw")
		require.Contains(t, got.Broker, "mq:5672")
		require.NotContains(t, got.BrokerError, "s3cr3tpw")
		require.LessOrEqual(t, len(got.Host), ferrystore.MaxRelayHostLen)
		require.LessOrEqual(t, len(got.Version), ferrystore.MaxRelayVersionLen)
		require.LessOrEqual(t, len(got.BrokerError), ferrystore.MaxRelayBrokerErrorLen)
		require.Equal(t, long[:ferrystore.MaxRelaySourceLen], got.Source)
		require.True(t, strings.HasPrefix(long, got.Host) && len(got.Host) > 200, "the host is cut, not dropped")

		for _, id := range []string{"", strings.Repeat("i", ferrystore.MaxRelayIDLen+1)} {
			err := reg.Beat(b.ctx, ferrystore.RelayBeat{ID: id})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "id %q", id)
		}
		require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: strings.Repeat("i", ferrystore.MaxRelayIDLen)}))

		// The claims prefix is checked, never cut: a cut prefix would name
		// another relay's claims.
		for _, claims := range []string{"ABCDEF", "01234x", "0123.", strings.Repeat("a", ferrystore.MaxClaimsPrefixLen+1)} {
			err := reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r2", Claims: claims})
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "claims %q", claims)
		}
		longest := strings.Repeat("a", ferrystore.MaxClaimsPrefixLen)
		require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r2", Claims: longest}))
		beats, err = reg.Relays(b.ctx)
		require.NoError(t, err)
		r2, ok := find(t, beats, "r2")
		require.True(t, ok)
		require.Equal(t, longest, r2.Claims)
		_, ok = find(t, beats, "r1")
		require.True(t, ok)
	})

	t.Run("ForgetAndPrune", func(t *testing.T) {
		b := setup(t, h)
		reg := b.store
		for _, id := range []string{"alive", "stopped", "killed"} {
			require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: id, Host: "h", PID: 1}))
		}
		require.NoError(t, reg.ForgetRelay(b.ctx, "stopped"))
		require.NoError(t, reg.ForgetRelay(b.ctx, "never-was"), "forgetting a relay without a row is no error")
		beats, err := reg.Relays(b.ctx)
		require.NoError(t, err)
		require.Len(t, beats, 2)
		_, ok := find(t, beats, "stopped")
		require.False(t, ok)

		_, err = reg.PruneRelays(b.ctx, 0, "")
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		n, err := reg.PruneRelays(b.ctx, time.Hour, "")
		require.NoError(t, err)
		require.Zero(t, n, "nothing is an hour old")

		if h.Exec == nil {
			without(t, "Exec", "the pruning of a relay killed long ago")
			return
		}
		// A relay killed long ago: its last beat is years old.
		h.Exec(b.ctx, t, b.store, "UPDATE "+b.store.Table()+"_relay SET last_seen = '2001-02-03 04:05:06' WHERE relay_id = 'killed'")
		beats, err = reg.Relays(b.ctx)
		require.NoError(t, err)
		killed, ok := find(t, beats, "killed")
		require.True(t, ok)
		require.Greater(t, time.Since(killed.LastSeen), 20*365*24*time.Hour, "the age comes from the stored last beat")
		alive, ok := find(t, beats, "alive")
		require.True(t, ok)
		require.Less(t, time.Since(alive.LastSeen), time.Hour)

		// The caller's own row is kept, however old.
		n, err = reg.PruneRelays(b.ctx, 24*time.Hour, "killed")
		require.NoError(t, err)
		require.Zero(t, n, "the row of the relay that prunes is kept")
		n, err = reg.PruneRelays(b.ctx, 24*time.Hour, "alive")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		beats, err = reg.Relays(b.ctx)
		require.NoError(t, err)
		require.Len(t, beats, 1)
		require.Equal(t, "alive", beats[0].ID)
	})

	t.Run("BeatTouchesNoEvent", func(t *testing.T) {
		b := setup(t, h)
		reg := b.store
		id := b.enqueue(t, ev("OrderPaid", "1", `{}`))[0]
		before := b.get(t, id)
		require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "r"}))
		require.NoError(t, reg.ForgetRelay(b.ctx, "r"))
		_, err := reg.PruneRelays(b.ctx, time.Nanosecond, "")
		require.NoError(t, err)
		require.Equal(t, before, b.get(t, id))
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.New)
	})
}
