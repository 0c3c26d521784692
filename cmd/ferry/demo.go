package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/natsembed"
)

func newDemo() *cobra.Command {
	var (
		orders   int
		lostPct  int
		keep     bool
		dirFlag  string
		quietOut bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an order service, the outbox and a relay on SQLite and an embedded NATS, with injected crashes",
		Long: `Runs the whole outbox path with no setup: a SQLite database and a NATS server
with JetStream inside this process. An order service commits orders and their
events in the same transactions; a relay publishes them in per-order sequence
while the demo injects faults: one batch is abandoned after it was published
(as if the relay crashed before recording it) and some confirms are lost. Then
it reads the stream back and checks that every committed event arrived once,
in order, with its original id. Exits 1 if the check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if quietOut {
				out = io.Discard
			}
			return runDemo(cmd.Context(), out, demoOptions{orders: orders, lostPct: lostPct, keep: keep, dir: dirFlag})
		},
	}
	cmd.Flags().IntVar(&orders, "orders", 200, "orders to place (each makes a created and a paid event)")
	cmd.Flags().IntVar(&lostPct, "lost-confirms", 5, "percent of broker confirms to lose")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's directory (database, stream) afterwards")
	cmd.Flags().StringVar(&dirFlag, "dir", "", "directory for the demo's files (default: a new temporary one)")
	cmd.Flags().BoolVarP(&quietOut, "quiet", "q", false, "print nothing; the exit code tells")
	return cmd
}

type demoOptions struct {
	orders, lostPct int
	keep            bool
	dir             string
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) (err error) {
	if o.orders < 1 || o.lostPct < 0 || o.lostPct > 90 {
		return usageError{errors.New("--orders must be positive and --lost-confirms within 0..90")}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ferry-demo-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	// The embedded default: SQLite and an in-process NATS with JetStream.
	srv, err := natsembed.Start(filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "demo.db"), nil)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS purchase_order (id INTEGER PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		return err
	}
	fmt.Fprintf(out, "ferry demo: SQLite %s, embedded NATS JetStream %s\n", filepath.Join(dir, "demo.db"), srv.ClientURL())

	// The order service: each change and its event commit together.
	wake := ferry.NewWakeup()
	outbox, err := ferry.NewOutbox(store, &ferry.OutboxConfig{Wakeup: wake})
	if err != nil {
		return err
	}
	var ids []string
	for i := 1; i <= o.orders; i++ {
		for _, step := range []struct{ sql, typ, status string }{
			{`INSERT INTO purchase_order (id, status) VALUES (?, 'NEW')`, "OrderCreated", "NEW"},
			{`UPDATE purchase_order SET status = 'PAID' WHERE id = ?`, "OrderPaid", "PAID"},
		} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, step.sql, i); err != nil {
				tx.Rollback()
				return err
			}
			got, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
				AggregateType: "order", AggregateID: strconv.Itoa(i), Type: step.typ,
				Payload:     json.RawMessage(fmt.Sprintf(`{"orderId":%d,"status":%q}`, i, step.status)),
				Destination: "orders." + step.status,
			})
			if err != nil {
				tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			ids = append(ids, got...)
		}
	}
	fmt.Fprintf(out, "committed %d orders: %d events written to the outbox in the same transactions\n", o.orders, len(ids))

	// The relay, with faults injected at its named crash windows.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	pub, err := ferrynats.New(ctx, nc, &ferrynats.Config{Stream: "ORDERS", Subjects: []string{"orders.>"}, Declare: true})
	if err != nil {
		return err
	}
	var abandoned, lost atomic.Int64
	relay, err := ferry.NewRelay(store, pub, &ferry.RelayConfig{
		Ordered: true, BatchSize: 100, Wakeup: wake, PollInterval: 50 * time.Millisecond,
		Lease: time.Second, PublishTimeout: 800 * time.Millisecond, SweepInterval: 100 * time.Millisecond,
		Retry: ferry.ExponentialBackoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		FaultPoint: func(_ context.Context, point string) error {
			switch {
			case point == ferry.FaultAfterPublish && abandoned.Load() == 0:
				abandoned.Add(1)
				return errors.New("crash after publish")
			case point == ferry.FaultLoseConfirm && rand.IntN(100) < o.lostPct:
				lost.Add(1)
				return errors.New("confirm lost")
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := relay.Drain(ctx)
	if err != nil {
		return err
	}
	st := relay.Stats()
	fmt.Fprintf(out, "relay (ordered): drained in %s; injected: 1 batch abandoned after publish, %d confirms lost\n",
		time.Since(start).Round(time.Millisecond), lost.Load())
	fmt.Fprintf(out, "  claimed %d, confirmed %d, unknown outcomes %d, retried %d, leases swept %d, dead %d\n",
		st.Claimed, st.Confirmed, st.Unknown, st.Retried, st.Swept, st.Dead)
	fmt.Fprintf(out, "  JetStream dropped %d republished events as duplicates (same Nats-Msg-Id)\n", st.Duplicates)

	// The checker: read the stream back and compare with the outbox.
	got, err := readAll(ctx, nc, "ORDERS", len(ids))
	if err != nil {
		return err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var lostEvents, twice, outOfOrder, unexpected int
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, m := range got {
		switch {
		case !want[m.id]:
			unexpected++
		case seen[m.id]:
			twice++
		}
		seen[m.id] = true
		if m.seq <= last[m.agg] {
			outOfOrder++
		}
		last[m.agg] = m.seq
	}
	for _, id := range ids {
		if !seen[id] {
			lostEvents++
		}
	}
	fmt.Fprintf(out, "stream ORDERS holds %d messages for %d committed events\n", len(got), len(ids))
	fmt.Fprintf(out, "  lost %d, stored twice %d, unexpected %d, out of order %d; outbox left: %d new, %d dead\n",
		lostEvents, twice, unexpected, outOfOrder, res.Stats.New, res.Stats.Dead)
	if lostEvents+twice+unexpected+outOfOrder+int(res.Stats.New+res.Stats.Dead) > 0 {
		fmt.Fprintln(out, "verdict: FAILED")
		return exitError{exitFailed, errors.New("demo check failed")}
	}
	if st.Duplicates == 0 {
		fmt.Fprintln(out, "verdict: FAILED (vacuous: no fault led to a republish)")
		return exitError{exitFailed, errors.New("demo injected no effective fault")}
	}
	fmt.Fprintln(out, "verdict: OK: every committed event is in the stream once, in per-order sequence, with its original id")
	return nil
}

type demoMsg struct {
	id, agg string
	seq     int64
}

func readAll(ctx context.Context, nc *nats.Conn, stream string, want int) ([]demoMsg, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	info, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	total := int(info.CachedInfo().State.Msgs)
	var out []demoMsg
	for len(out) < total {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		n := len(out)
		for m := range batch.Messages() {
			h := m.Headers()
			seq, _ := strconv.ParseInt(h.Get(ferrybroker.HeaderSequence), 10, 64)
			out = append(out, demoMsg{id: h.Get(jetstream.MsgIDHeader), agg: h.Get(ferrybroker.HeaderAggregateID), seq: seq})
		}
		if len(out) == n {
			return nil, fmt.Errorf("read %d of %d messages from %s", n, total, stream)
		}
	}
	_ = want
	return out, nil
}
