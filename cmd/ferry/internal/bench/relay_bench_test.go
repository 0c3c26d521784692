package bench_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/cmd/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The Go benchmarks run the scenarios of ferry bench (internal/bench) on
// the test services, each with the raw figure it is a fraction of, and
// report both rates and their ratio. ferry bench runs them all in one
// process against any database and broker and prints a table.

// benchTarget opens a bench target on the test database of kind, or skips
// (fails under FERRY_REQUIRE_SERVICES=1) when it is not running.
func benchTarget(b *testing.B, kind string) (*bench.Target, context.Context) {
	ctx := testsvc.Context(b, 20*time.Minute)
	var url string
	switch kind {
	case "mysql":
		testsvc.MySQL(b) // skips when MariaDB/MySQL is not running
		url = testsvc.URL(testsvc.EnvMySQL)
	case "postgres":
		testsvc.Postgres(b)
		url = testsvc.URL(testsvc.EnvPostgres)
	default:
		url = "sqlite:///" + filepath.Join(b.TempDir(), "bench.db")
	}
	t, err := bench.OpenTarget(ctx, url, testsvc.Name("fb_"))
	require.NoError(b, err)
	b.Cleanup(t.Close)
	return t, ctx
}

// benchBroker opens a bench destination on RabbitMQ ("amqp") or NATS.
func benchBroker(b *testing.B, ctx context.Context, kind string) *bench.Broker {
	url := testsvc.URL(testsvc.EnvNATS)
	if kind == "amqp" {
		testsvc.RabbitMQ(b)
		url = testsvc.URL(testsvc.EnvAMQP)
	} else {
		testsvc.NATS(b)
	}
	br, err := bench.OpenBroker(ctx, url, testsvc.Name("fb-"), "quorum")
	require.NoError(b, err)
	b.Cleanup(br.Close)
	return br
}

// BenchmarkRelay measures 1 and 4 relays draining 20,000 pre-filled events
// from each store to RabbitMQ (quorum queue) and to NATS JetStream, next to
// the raw claim+mark limit (4 loops) and the raw publish limit (window
// 1000) measured in the same run.
//
//	go test -run '^$' -bench Relay -benchtime 3x .
func BenchmarkRelay(b *testing.B) {
	const events = 20000
	for _, db := range testsvc.Kinds {
		for _, broker := range []string{"amqp", "nats"} {
			if db == "sqlite" && broker == "amqp" {
				continue
			}
			b.Run(db+"/"+broker, func(b *testing.B) {
				t, ctx := benchTarget(b, db)
				br := benchBroker(b, ctx, broker)
				var rawDB, rawPub float64
				for range b.N {
					r, err := bench.RawDB(ctx, t, events, 4, 100)
					require.NoError(b, err)
					rawDB += r / float64(b.N)
					require.NoError(b, br.Purge(ctx))
					took, err := br.Raw(ctx, events, 1000)
					require.NoError(b, err)
					rawPub += events / took.Seconds() / float64(b.N)
				}
				b.ReportMetric(rawDB, "raw_claim_mark/s")
				b.ReportMetric(rawPub, "raw_publish/s")
				for _, ordered := range []bool{false, true} {
					for _, relays := range []int{1, 4} {
						b.Run(fmt.Sprintf("ordered=%v/relays=%d", ordered, relays), func(b *testing.B) {
							var rate float64
							for range b.N {
								r, err := bench.Drain(ctx, t, br, events, bench.RelaySpec{Relays: relays, Ordered: ordered, Batch: 100})
								require.NoError(b, err)
								rate += r / float64(b.N)
							}
							b.ReportMetric(rate, "events/s")
							b.ReportMetric(rate/rawDB, "relay/raw_db")
							b.ReportMetric(rate/rawPub, "relay/raw_publish")
						})
					}
				}
			})
		}
	}
}

// BenchmarkProducer measures, in one run, a business transaction (insert
// an order row) alone, with a hand-written outbox INSERT of the seed's
// columns, with EnqueueTx (which also assigns the aggregate sequence), and
// with EnqueueTx under SkipSequence, at 1 and 16 writers.
//
//	go test -run '^$' -bench Producer -benchtime 2x .
func BenchmarkProducer(b *testing.B) {
	for _, kind := range []string{"mysql", "postgres"} {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/writers=%d", kind, writers), func(b *testing.B) {
				t, ctx := benchTarget(b, kind)
				var sum bench.ProducerResult
				for range b.N {
					r, err := bench.Producer(ctx, t, 3000, writers)
					require.NoError(b, err)
					sum.Business += r.Business / float64(b.N)
					sum.Hand += r.Hand / float64(b.N)
					sum.Enqueue += r.Enqueue / float64(b.N)
					sum.NoSeq += r.NoSeq / float64(b.N)
				}
				b.ReportMetric(sum.Business, "business_tx/s")
				b.ReportMetric(sum.Hand, "hand_tx/s")
				b.ReportMetric(sum.Enqueue, "enqueue_tx/s")
				b.ReportMetric(sum.NoSeq, "enqueue_noseq_tx/s")
				b.ReportMetric(sum.Enqueue/sum.Hand, "enqueue/hand")
				b.ReportMetric(sum.NoSeq/sum.Hand, "noseq/hand")
			})
		}
	}
}

// BenchmarkInboxVsBare measures, in one run, the seed's business write
// (award points) as a bare transaction and wrapped in the inbox, with 1 and
// 8 concurrent workers, and reports both rates and their ratio.
//
//	go test -run '^$' -bench InboxVsBare -benchtime 3x .
func BenchmarkInboxVsBare(b *testing.B) {
	for _, kind := range []string{"mysql", "postgres"} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", kind, workers), func(b *testing.B) {
				t, ctx := benchTarget(b, kind)
				var bare, inbox float64
				for range b.N {
					r, err := bench.Inbox(ctx, t, 4000, workers)
					require.NoError(b, err)
					bare += r.Bare / float64(b.N)
					inbox += r.Inbox / float64(b.N)
				}
				b.ReportMetric(bare, "bare_ops/s")
				b.ReportMetric(inbox, "inbox_ops/s")
				b.ReportMetric(inbox/bare, "inbox/bare")
			})
		}
	}
}
