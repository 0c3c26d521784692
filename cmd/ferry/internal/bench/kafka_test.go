package bench_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestBenchOnKafka runs the broker scenarios at a tiny size on a SQLite
// outbox and an in-process Kafka cluster (kfake): the raw franz-go
// producer, the relay in the bench's process and as ferry relay
// processes, the plain relay, and the live scenario, whose consumer reads
// the topic from the offsets the bench took as its baseline. It checks
// that each produced its figures and the relay / raw publish ratio, and
// that the bench deleted its topic. It times nothing: kfake shares the
// test's cores.
func TestBenchOnKafka(t *testing.T) {
	seeds := testsvc.Kafka(t)
	ctx := testsvc.Context(t, 2*time.Minute)
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		DatabaseURL: "sqlite:///" + filepath.Join(t.TempDir(), "bench.db"),
		BrokerURL:   "kafka://" + strings.Join(seeds, ","),
		Scenarios:   []string{bench.ScenarioRawBroker, bench.ScenarioRelay, bench.ScenarioPlain, bench.ScenarioLive},
		Events:      300, Repeat: 1, Batch: 50, Relays: []int{1}, LiveRate: 100, LiveFor: 500 * time.Millisecond,
		RelayBinary: relayBinary(t),
	}, &progress)
	require.NoError(t, err, progress.String())
	t.Log("\n" + progress.String())

	require.True(t, strings.HasPrefix(rep.Broker, "kafka "), rep.Broker)
	require.Positive(t, rep.RawBroker)
	require.Len(t, rep.Relay, 2) // unordered and ordered
	require.Len(t, rep.RelayProcess, 2)
	require.Len(t, rep.Plain, 1)
	for _, f := range append(append(rep.Relay, rep.RelayProcess...), rep.Plain...) {
		require.Positive(t, f.Rate, "%+v", f)
	}
	for _, l := range []*bench.LiveResult{rep.Live, rep.LiveProcess, rep.LivePlain} {
		require.NotNil(t, l)
		require.Equal(t, 50, l.Events, l.Mode)
		require.Positive(t, l.P99, l.Mode)
	}
	ratios := map[string]float64{}
	for _, r := range rep.Ratios {
		ratios[r.Name] = r.Value
	}
	for _, name := range []string{"relay (1, unordered) / raw publish", "relay (1, ordered) / raw publish"} {
		require.Positive(t, ratios[name], "ratio %q in %v", name, ratios)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	require.Contains(t, text.String(), "raw publish with confirms")
	require.Contains(t, text.String(), "relay (1, unordered) / raw publish")

	// The bench deleted its topic.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	require.NoError(t, err)
	for _, name := range topics.Names() {
		require.False(t, strings.HasPrefix(name, "ferrybench."), "topic %s left behind", name)
	}
}
