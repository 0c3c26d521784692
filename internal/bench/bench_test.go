package bench_test

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/bench"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestRunMeasuresEveryScenario runs every scenario at a tiny size on each
// database the tests reach, and checks that each produced its figures and
// ratios and that the bench removed its tables. It times nothing.
func TestRunMeasuresEveryScenario(t *testing.T) {
	cases := []struct {
		name string
		db   func(t *testing.T) (url string, conn *sql.DB)
		amqp bool
	}{
		{"sqlite+nats", func(t *testing.T) (string, *sql.DB) {
			path := filepath.Join(t.TempDir(), "bench.db")
			db, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return "sqlite:///" + path, db
		}, false},
		{"mysql+amqp", func(t *testing.T) (string, *sql.DB) { return testsvc.URL(testsvc.EnvMySQL), testsvc.MySQL(t) }, true},
		{"postgres+amqp", func(t *testing.T) (string, *sql.DB) {
			return testsvc.URL(testsvc.EnvPostgres), testsvc.PostgresSQL(t)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, db := c.db(t)
			broker := testsvc.URL(testsvc.EnvAMQP)
			if c.amqp {
				testsvc.RabbitMQ(t)
			} else {
				srv, err := natsembed.Start(t.TempDir())
				require.NoError(t, err)
				t.Cleanup(srv.Shutdown)
				broker = srv.ClientURL()
			}
			ctx := testsvc.Context(t, 5*time.Minute)
			var progress bytes.Buffer
			rep, err := bench.Run(ctx, bench.Config{
				DatabaseURL: url, BrokerURL: broker, Events: 400, Repeat: 1, Batch: 50,
				Relays: []int{1, 2}, LiveRate: 200, LiveFor: time.Second, Retained: 100001,
				ClaimRounds: 10, ProducerTxs: 100, InboxOps: 100,
			}, &progress)
			require.NoError(t, err, progress.String())

			require.Positive(t, rep.RawBroker)
			require.Positive(t, rep.RawDB)
			require.Len(t, rep.Relay, 4)
			for _, f := range rep.Relay {
				require.Positive(t, f.Rate, "%+v", f)
			}
			require.NotNil(t, rep.Live)
			require.Equal(t, 200, rep.Live.Events)
			require.Positive(t, rep.Live.P99)
			require.LessOrEqual(t, rep.Live.P50, rep.Live.P99)
			require.Len(t, rep.Producer, 2)
			require.Len(t, rep.Inbox, 2)
			for _, p := range rep.Producer {
				require.True(t, p.Business > 0 && p.Hand > 0 && p.Enqueue > 0 && p.NoSeq > 0, "%+v", p)
			}
			for _, in := range rep.Inbox {
				require.True(t, in.Bare > 0 && in.Inbox > 0, "%+v", in)
			}
			require.NotNil(t, rep.Claim)
			require.Positive(t, rep.Claim.EmptyP99)
			require.Positive(t, rep.Claim.FullP99)
			names := map[string]bool{}
			for _, r := range rep.Ratios {
				names[r.Name] = true
			}
			for _, want := range []string{"relay (2, unordered) / raw claim+mark", "relay (2, ordered) / raw publish",
				"EnqueueTx / hand INSERT, 16 writer(s)", "inbox / bare, 8 worker(s)", "claim p99 with 100001 SENT rows / empty"} {
				require.True(t, names[want], "ratio %q missing from %v", want, names)
			}
			var text bytes.Buffer
			rep.WriteText(&text)
			require.Contains(t, text.String(), "raw claim + mark SENT")

			// The bench dropped every table it created.
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'ferry_bench_%'"
			if strings.HasPrefix(url, "sqlite") {
				q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'ferry_bench_%'"
			}
			var left int
			require.NoError(t, db.QueryRowContext(context.Background(), q).Scan(&left))
			require.Zero(t, left, "tables left behind")
		})
	}
}
