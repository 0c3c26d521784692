package ferry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// BenchmarkRelayDrain measures how fast 1 and 4 relays drain 20,000
// pre-filled events from each store to NATS JetStream (file storage), in
// events per second. The raw limits to compare with are in ferry bench.
//
//	go test -run '^$' -bench RelayDrain -benchtime 3x .
func BenchmarkRelayDrain(b *testing.B) {
	const events = 20000
	for _, kind := range testsvc.Kinds {
		for _, ordered := range []bool{false, true} {
			for _, relays := range []int{1, 4} {
				name := fmt.Sprintf("%s/ordered=%v/relays=%d", kind, ordered, relays)
				b.Run(name, func(b *testing.B) {
					bb := setupRelay(b, kind)
					var elapsed time.Duration
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						// 2,000 aggregates of 10 events: ordered mode has
						// enough independent aggregates to fill batches.
						bb.enqueue(b, events, func(i int) string { return fmt.Sprint(i % 2000) })
						b.StartTimer()
						start := time.Now()
						rs := make([]*ferry.Relay, relays)
						for j := range rs {
							var err error
							rs[j], err = ferry.NewRelay(bb.st.Driver, bb.publisher(b), &ferry.RelayConfig{
								BatchSize: 100, Lanes: 2, Ordered: ordered, PollInterval: 5 * time.Millisecond,
							})
							require.NoError(b, err)
							require.NoError(b, rs[j].Start(bb.ctx))
						}
						// Wait on the relays' own counters: polling the table
						// would load the database under measurement.
						waitFor(b, 5*time.Minute, func() bool {
							var n int64
							for _, r := range rs {
								n += r.Stats().Confirmed
							}
							return n >= events
						}, func() string { return "relays did not confirm every event" })
						elapsed += time.Since(start)
						for _, r := range rs {
							require.NoError(b, r.Stop(bb.ctx))
						}
					}
					b.ReportMetric(float64(events*b.N)/elapsed.Seconds(), "events/s")
				})
			}
		}
	}
}
