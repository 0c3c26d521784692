package ferry_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// BenchmarkInboxVsBare measures, in one run, the seed's business write
// (award points) as a bare transaction and wrapped in the inbox, with 1 and
// 8 concurrent workers, and reports both rates and their ratio.
//
//	go test -run '^$' -bench InboxVsBare -benchtime 3x .
func BenchmarkInboxVsBare(b *testing.B) {
	const ops, accounts = 4000, 1000
	for _, kind := range []string{"mysql", "postgres"} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", kind, workers), func(b *testing.B) {
				ctx := testsvc.Context(b, 10*time.Minute)
				var (
					db   *sql.DB
					drv  ferrystore.InboxDriver[*sql.Tx]
					bind = func(q string) string { return q }
				)
				m, c, v := testsvc.InboxTables()
				switch kind {
				case "mysql":
					db = testsvc.MySQL(b)
					s, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
					require.NoError(b, err)
					drv = s
				case "postgres":
					db = testsvc.PostgresSQL(b)
					s, err := ferrypg.NewStdlibInbox(db, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
					require.NoError(b, err)
					drv = s
					bind = func(string) string { return "" }
				}
				testsvc.MigratedInbox(b, drv, func(q string) error { _, err := db.Exec(q); return err }, m, m, c, v)
				points := testsvc.Name("points_")
				_, err := db.Exec("CREATE TABLE " + points + " (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)")
				require.NoError(b, err)
				b.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + points) })
				for u := 0; u < accounts; u += 500 {
					q := "INSERT INTO " + points + " VALUES "
					for i := u; i < u+500; i++ {
						if i > u {
							q += ","
						}
						q += fmt.Sprintf("(%d, 0)", i)
					}
					_, err := db.Exec(q)
					require.NoError(b, err)
				}
				update := "UPDATE " + points + " SET points = points + ? WHERE user_id = ?"
				if bind("x") == "" {
					update = "UPDATE " + points + " SET points = points + $1 WHERE user_id = $2"
				}
				in, err := ferry.NewInbox(drv, &ferry.InboxConfig{Consumer: "points-award"})
				require.NoError(b, err)

				run := func(op func(i int) error) time.Duration {
					var next atomic.Int64
					var wg sync.WaitGroup
					start := time.Now()
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								i := int(next.Add(1))
								if i > ops {
									return
								}
								if err := op(i); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					return time.Since(start)
				}
				var bare, inbox time.Duration
				for iter := 0; iter < b.N; iter++ {
					bare += run(func(i int) error {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							return err
						}
						if err := ferry.ExpectResult(tx.ExecContext(ctx, update, 1, i%accounts)); err != nil {
							tx.Rollback()
							return err
						}
						return tx.Commit()
					})
					inbox += run(func(i int) error {
						_, err := in.Process(ctx, ferry.Operation{
							Key: fmt.Sprintf("order:%d:%d:paid", iter, i), EventID: fmt.Sprint(i),
							Fields: map[string]int{"user_id": i % accounts, "amount": 1},
						}, func(ctx context.Context, tx *sql.Tx) error {
							return ferry.ExpectResult(tx.ExecContext(ctx, update, 1, i%accounts))
						})
						return err
					})
				}
				bareRate := float64(ops*b.N) / bare.Seconds()
				inboxRate := float64(ops*b.N) / inbox.Seconds()
				b.ReportMetric(bareRate, "bare_ops/s")
				b.ReportMetric(inboxRate, "inbox_ops/s")
				b.ReportMetric(inboxRate/bareRate, "inbox/bare")
			})
		}
	}
}
