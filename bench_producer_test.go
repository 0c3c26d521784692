package ferry_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// BenchmarkProducer measures, in one run, a business transaction (insert
// an order row) alone, with a hand-written outbox INSERT of the seed's
// columns, with EnqueueTx (which also assigns the aggregate sequence), and
// with EnqueueTx under SkipSequence, at 1 and 16 writers.
//
//	go test -run '^$' -bench Producer -benchtime 2x .
func BenchmarkProducer(b *testing.B) {
	const txs = 3000
	for _, kind := range []string{"mysql", "postgres"} {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/writers=%d", kind, writers), func(b *testing.B) {
				st := testsvc.Store(b, kind)
				ctx := testsvc.Context(b, 10*time.Minute)
				ob, err := ferry.NewOutbox(st.Driver, nil)
				require.NoError(b, err)
				obNoSeq, err := ferry.NewOutbox(st.Driver, &ferry.OutboxConfig{SkipSequence: true})
				require.NoError(b, err)
				orders := testsvc.Name("orders_")
				_, err = st.DB.Exec("CREATE TABLE " + orders + " (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)")
				require.NoError(b, err)
				b.Cleanup(func() { _, _ = st.DB.Exec("DROP TABLE " + orders) })
				ph := func(q string) string { return q }
				if kind == "postgres" {
					ph = func(q string) string {
						n := 0
						out := []byte{}
						for i := 0; i < len(q); i++ {
							if q[i] == '?' {
								n++
								out = append(out, fmt.Sprintf("$%d", n)...)
								continue
							}
							out = append(out, q[i])
						}
						return string(out)
					}
				}
				insertOrder := ph("INSERT INTO " + orders + " (id, status) VALUES (?, 'PAID')")
				now := "NOW(6)"
				if kind == "postgres" {
					now = "now()"
				}
				handOutbox := ph("INSERT INTO " + st.Driver.Table() + " (event_id, aggregate_id, event_type, payload, status, available_at, created_at)" +
					" VALUES (?, ?, 'OrderPaid', ?, 'NEW', " + now + ", " + now + ")")
				var id atomic.Int64
				payload := json.RawMessage(`{"orderId":1,"amount":10,"currency":"EUR","items":[{"sku":"A-1","qty":2}]}`)
				run := func(body func(ctx context.Context, tx *sql.Tx, n int64) error) time.Duration {
					var wg sync.WaitGroup
					var done atomic.Int64
					start := time.Now()
					for w := 0; w < writers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for done.Add(1) <= txs {
								n := id.Add(1)
								tx, err := st.DB.BeginTx(ctx, nil)
								if err == nil {
									if _, err = tx.ExecContext(ctx, insertOrder, n); err == nil {
										err = body(ctx, tx, n)
									}
									if err == nil {
										err = tx.Commit()
									} else {
										tx.Rollback()
									}
								}
								if err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					return time.Since(start)
				}
				var business, hand, enqueue, noseq time.Duration
				for i := 0; i < b.N; i++ {
					business += run(func(context.Context, *sql.Tx, int64) error { return nil })
					hand += run(func(ctx context.Context, tx *sql.Tx, n int64) error {
						_, err := tx.ExecContext(ctx, handOutbox, fmt.Sprintf("order-%d-paid", n), fmt.Sprint(n), string(payload))
						return err
					})
					enqueue += run(func(ctx context.Context, tx *sql.Tx, n int64) error {
						_, err := ob.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(n),
							Type: "OrderPaid", Payload: payload})
						return err
					})
					noseq += run(func(ctx context.Context, tx *sql.Tx, n int64) error {
						_, err := obNoSeq.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(n),
							Type: "OrderPaid", Payload: payload})
						return err
					})
				}
				rate := func(d time.Duration) float64 { return float64(txs*b.N) / d.Seconds() }
				b.ReportMetric(rate(business), "business_tx/s")
				b.ReportMetric(rate(hand), "hand_tx/s")
				b.ReportMetric(rate(enqueue), "enqueue_tx/s")
				b.ReportMetric(rate(noseq), "enqueue_noseq_tx/s")
				b.ReportMetric(rate(enqueue)/rate(hand), "enqueue/hand")
				b.ReportMetric(rate(noseq)/rate(hand), "noseq/hand")
			})
		}
	}
}
