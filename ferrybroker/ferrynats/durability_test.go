package ferrynats

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/testenv"
)

// durabilityNATS connects to the test NATS server (FERRY_TEST_NATS_URL),
// skipping the test when it is unreachable unless FERRY_REQUIRE_SERVICES=1.
// (ferrynatstest.NATS does the same, but imports this package.)
func durabilityNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(testenv.URL(testenv.EnvNATS), nats.Timeout(3*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.URL(testenv.EnvNATS), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// durabilityStream creates a stream of a fresh name with storage, deleted
// when the test ends, and returns its name.
func durabilityStream(t *testing.T, nc *nats.Conn, storage jetstream.StorageType) string {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	name := testenv.Name("FD_")
	_, err = js.CreateStream(testenv.Context(t, 10*time.Second), jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: storage,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return name
}

// durabilityRow returns the one row of p.Durability.
func durabilityRow(t *testing.T, p *Publisher) ferrybroker.Durability {
	t.Helper()
	rows, err := p.Durability(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	return rows[0]
}

func TestDurabilityFileStreamOneReplicaIsSingle(t *testing.T) {
	t.Parallel()
	nc := durabilityNATS(t)
	stream := durabilityStream(t, nc, jetstream.FileStorage)
	p, err := New(testenv.Context(t, 10*time.Second), nc, &Config{Stream: stream})
	require.NoError(t, err)
	d := durabilityRow(t, p)
	require.Equal(t, ferrybroker.Durability{
		Destination: "stream " + stream,
		Level:       ferrybroker.DurabilitySingle,
		Settings: "stream " + stream + ": 1 replica, file storage; fsync: the server's sync_interval, not reported to clients " +
			"(default 2m: an acknowledged message may not be on disk yet, unless its jetstream block says sync_interval: always)",
		Fix: "declare the stream with 3 replicas on a 3-node JetStream cluster (ferry relay --declare --stream-replicas 3, Config.Replicas in Go, or nats stream edit " +
			stream + " --replicas 3), file storage; and sync_interval: always in the server's jetstream block, for an acknowledged message to be fsynced",
	}, d)
}

// A stream the publisher declares is file storage on Config.Replicas
// (1 by default): single.
func TestDurabilityDeclaredStreamIsSingle(t *testing.T) {
	t.Parallel()
	nc := durabilityNATS(t)
	stream := testenv.Name("FD_")
	p, err := New(testenv.Context(t, 10*time.Second), nc, &Config{Stream: stream, Subjects: []string{stream + ".>"}, Declare: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.JetStream().DeleteStream(ctx, stream)
	})
	d := durabilityRow(t, p)
	require.Equal(t, ferrybroker.DurabilitySingle, d.Level, "%+v", d)
	require.Contains(t, d.Settings, "stream "+stream+": 1 replica, file storage;")
}

func TestDurabilityMemoryStreamIsVolatile(t *testing.T) {
	t.Parallel()
	nc := durabilityNATS(t)
	stream := durabilityStream(t, nc, jetstream.MemoryStorage)
	p, err := New(testenv.Context(t, 10*time.Second), nc, &Config{Stream: stream})
	require.NoError(t, err)
	require.Equal(t, ferrybroker.Durability{
		Destination: "stream " + stream,
		Level:       ferrybroker.DurabilityVolatile,
		Settings:    "stream " + stream + ": 1 replica, memory storage (an acknowledged message is in memory only)",
		Fix: "recreate stream " + stream + " with file storage (a stream's storage cannot be edited) and 3 replicas " +
			"on a 3-node JetStream cluster (ferry relay --declare --stream-replicas 3 declares it so)",
	}, durabilityRow(t, p))
}

func TestDurabilityWithoutStreamIsUnknown(t *testing.T) {
	t.Parallel()
	p, err := New(testenv.Context(t, 10*time.Second), durabilityNATS(t), nil)
	require.NoError(t, err)
	require.Equal(t, ferrybroker.Durability{
		Destination: "subjects (no stream named)",
		Level:       ferrybroker.DurabilityUnknown,
		Settings:    "no stream named: each event goes to whichever stream captures its subject",
		Fix:         "name the stream (--stream) so ferry can read its replicas and storage",
	}, durabilityRow(t, p))
}

// A stream deleted after the publisher started (New refuses a missing
// one) is a row of unknown that says so, not an error.
func TestDurabilityMissingStreamIsUnknown(t *testing.T) {
	t.Parallel()
	nc := durabilityNATS(t)
	stream := durabilityStream(t, nc, jetstream.FileStorage)
	p, err := New(testenv.Context(t, 10*time.Second), nc, &Config{Stream: stream})
	require.NoError(t, err)
	require.NoError(t, p.JetStream().DeleteStream(testenv.Context(t, 10*time.Second), stream))
	d := durabilityRow(t, p)
	require.Equal(t, "stream "+stream, d.Destination)
	require.Equal(t, ferrybroker.DurabilityUnknown, d.Level)
	require.Contains(t, d.Settings, "stream "+stream+": not found (")
	require.Contains(t, d.Settings, "stream not found")
	require.Equal(t, "create stream "+stream+" (--declare with --subjects), or name the stream the events go to (--stream)", d.Fix)
}

// A server that cannot be asked is an error, not a row, and the error
// has no password of the URL.
func TestDurabilityClosedConnectionIsAnError(t *testing.T) {
	t.Parallel()
	nc := durabilityNATS(t) // skips when there is no server
	stream := durabilityStream(t, nc, jetstream.FileStorage)
	u := "nats://ferry:s3cret@" + nc.ConnectedAddr()
	p, err := Dial(testenv.Context(t, 10*time.Second), u, &DialConfig{Config: Config{Stream: stream}})
	if err != nil {
		t.Skipf("the test server refuses a user and password it does not know: %v", err)
	}
	require.NoError(t, p.Close())
	rows, err := p.Durability(testenv.Context(t, 10*time.Second))
	require.Error(t, err)
	require.Nil(t, rows)
	require.ErrorContains(t, err, "read stream "+stream)
	require.NotContains(t, err.Error(), "s3cret")
}

// The classification of every stream shape the shared single server
// cannot make (replicated, async persist mode), from the stream info
// JetStream returns.
func TestDurabilityClassification(t *testing.T) {
	t.Parallel()
	peers := func(current ...bool) []*jetstream.PeerInfo {
		var ps []*jetstream.PeerInfo
		for i, c := range current {
			ps = append(ps, &jetstream.PeerInfo{Name: string(rune('b' + i)), Current: c})
		}
		return ps
	}
	const fsync = "; fsync: the server's sync_interval, not reported to clients " +
		"(default 2m: an acknowledged message may not be on disk yet, unless its jetstream block says sync_interval: always)"
	for _, tc := range []struct {
		name     string
		cfg      jetstream.StreamConfig
		cluster  *jetstream.ClusterInfo
		level    ferrybroker.DurabilityLevel
		settings string
		fix      string // a part of Fix; "" means Fix is empty
	}{
		{"R3 all current", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, true)},
			ferrybroker.DurabilityReplicated, "stream S: 3 replicas (3 current), file storage" + fsync, ""},
		{"R3 one lagging", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, false)},
			ferrybroker.DurabilityReplicated, "stream S: 3 replicas (2 current), file storage" + fsync, ""},
		{"R3 offline peer", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: []*jetstream.PeerInfo{{Name: "b", Current: true, Offline: true}, {Name: "c", Current: true}}},
			ferrybroker.DurabilityReplicated, "stream S: 3 replicas (2 current), file storage" + fsync, ""},
		{"R3 leader alone", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(false, false)},
			ferrybroker.DurabilitySingle, "stream S: 3 replicas (1 current), file storage (no majority current: it acknowledges nothing " +
				"until 2 of its replicas are, and what it acknowledged before is on fewer than 2 current ones)" + fsync,
			"bring its replicas back (b, c); and sync_interval: always"},
		{"R3 no leader", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Replicas: peers(true, true)},
			ferrybroker.DurabilitySingle, "stream S: 3 replicas (no leader), file storage (no majority current: it acknowledges nothing " +
				"until 2 of its replicas are, and what it acknowledged before is on fewer than 2 current ones)" + fsync,
			"bring its replicas back; and"},
		{"R3 no cluster info", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage}, nil,
			ferrybroker.DurabilitySingle, "stream S: 3 replicas (no leader), file storage (no majority current: it acknowledges nothing " +
				"until 2 of its replicas are, and what it acknowledged before is on fewer than 2 current ones)" + fsync,
			"bring its replicas back; and"},
		{"R5 two behind", jetstream.StreamConfig{Replicas: 5, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, true, false, false)},
			ferrybroker.DurabilityReplicated, "stream S: 5 replicas (3 current), file storage" + fsync, ""},
		{"R5", jetstream.StreamConfig{Replicas: 5, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, true, true, true)},
			ferrybroker.DurabilityReplicated, "stream S: 5 replicas (5 current), file storage" + fsync, ""},
		{"R2", jetstream.StreamConfig{Replicas: 2, Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true)},
			ferrybroker.DurabilitySingle, "stream S: 2 replicas (2 current), file storage (a majority of 2 is 2: an acknowledged message is on both, " +
				"but either one down stops every acknowledgement until the stream is scaled down to 1 replica, so ferry counts it as single)" + fsync,
			"nats stream edit S --replicas 3"},
		{"R1 replicas unset", jetstream.StreamConfig{Storage: jetstream.FileStorage},
			&jetstream.ClusterInfo{Leader: "a"},
			ferrybroker.DurabilitySingle, "stream S: 1 replica, file storage" + fsync, "sync_interval: always"},
		{"R1 async persist", jetstream.StreamConfig{Replicas: 1, Storage: jetstream.FileStorage, PersistMode: jetstream.AsyncPersistMode},
			&jetstream.ClusterInfo{Leader: "a"},
			ferrybroker.DurabilityVolatile, "stream S: 1 replica, file storage, async persist mode (a message is acknowledged before it is written: a server crash loses it)",
			"recreate stream S without async persist mode"},
		{"R3 memory", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.MemoryStorage},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, true)},
			ferrybroker.DurabilityVolatile, "stream S: 3 replicas (3 current), memory storage (an acknowledged message is in memory only)",
			"recreate stream S with file storage"},
		{"unknown storage", jetstream.StreamConfig{Replicas: 3, Storage: jetstream.StorageType(7)},
			&jetstream.ClusterInfo{Leader: "a", Replicas: peers(true, true)},
			ferrybroker.DurabilityUnknown, "stream S: 3 replicas (3 current), storage type 7 (neither file nor memory)", "--replicas 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := streamDurability("S", &jetstream.StreamInfo{Config: tc.cfg, Cluster: tc.cluster})
			require.Equal(t, "stream S", d.Destination)
			require.Equal(t, tc.level, d.Level)
			require.Equal(t, tc.settings, d.Settings)
			if tc.fix == "" {
				require.Empty(t, d.Fix)
			} else {
				require.Contains(t, d.Fix, tc.fix)
			}
		})
	}
}
