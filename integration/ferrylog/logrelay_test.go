// Package ferrylog_test tests the log relay (ferry.RelayConfig.Log.Feed) end
// to end: a MariaDB with a ROW binlog and a PostgreSQL with
// wal_level=logical (scripts/services.sh), their feeds (ferrybinlog,
// ferrypgoutput), and real brokers.
package ferrylog_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrylog/ferrybinlog"
	"github.com/ferrydev/ferry/ferrylog/ferrypgoutput"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

var kinds = []string{"mysql", "postgres"}

// countingStore is the store with its claims counted by kind: by id (the
// log's events) or from the table's pending index; and its probes.
type countingStore struct {
	ferrystore.Store
	byID, byScan atomic.Int64 // events claimed each way
	claims       atomic.Int64 // calls of Claim that returned
	probes       atomic.Int64 // calls of Ready
	readies      atomic.Int64 // calls of Ready that returned, telling the relay to claim (ready, or an error)
	// Calls of Claim and of Ready under way: a test that commits events
	// once none is must not see one whose statement ran after that
	// commit as one made before it.
	claiming, probing atomic.Int64
}

func (s *countingStore) Ready(ctx context.Context) (bool, error) {
	s.probing.Add(1)
	s.probes.Add(1)
	ready, err := s.Store.Ready(ctx)
	if ready || err != nil {
		s.readies.Add(1)
	}
	s.probing.Add(-1)
	return ready, err
}

func (s *countingStore) Claim(ctx context.Context, p ferrystore.ClaimParams) ([]ferrytype.Message, error) {
	s.claiming.Add(1)
	msgs, err := s.Store.Claim(ctx, p)
	if len(p.IDs) > 0 {
		s.byID.Add(int64(len(msgs)))
	} else {
		s.byScan.Add(int64(len(msgs)))
	}
	// Counted once it returned, then no longer under way.
	s.claims.Add(1)
	s.claiming.Add(-1)
	return msgs, err
}

// quiet reports whether no claim and no probe is under way.
func (s *countingStore) quiet() bool { return s.claiming.Load() == 0 && s.probing.Load() == 0 }

type bundle struct {
	kind  string
	ctx   context.Context
	st    testsvc.SQLStore
	url   string
	store *countingStore
	ob    *ferry.Outbox[*sql.Tx]
	logs  *testsvc.LogBuffer
}

func setup(t *testing.T, kind string) *bundle {
	t.Helper()
	st, url := testsvc.LogStore(t, kind)
	b := &bundle{kind: kind, ctx: testsvc.Context(t, 5*time.Minute), st: st, url: url, logs: &testsvc.LogBuffer{}}
	b.store = &countingStore{Store: st.Driver}
	var err error
	b.ob, err = ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	return b
}

// feed returns a new feed on the bundle's table. On PostgreSQL its slot and
// publication are dropped when the test ends.
func (b *bundle) feed(t *testing.T) ferrystore.LogFeed {
	t.Helper()
	table := b.st.Driver.Table()
	if b.kind == "mysql" {
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: b.url, Table: table, Logger: b.logger()})
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	f, err := ferrypgoutput.New(&ferrypgoutput.Config{URL: b.url, Table: table, Logger: b.logger()})
	require.NoError(t, err)
	t.Cleanup(func() {
		f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The slot goes once no walsender holds it any more.
		for ctx.Err() == nil {
			_, err := b.st.DB.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"+
				" WHERE slot_name = $1 AND NOT active", f.Slot())
			var n int
			_ = b.st.DB.QueryRowContext(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", f.Slot()).Scan(&n)
			if err == nil && n == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = b.st.DB.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+f.Publication())
	})
	return f
}

func (b *bundle) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// relay starts a log relay on the bundle's table, stopped when the test
// ends. The table's safety-net probe is set to a minute, so that what the
// relay claims in a test comes from the log or from its start.
func (b *bundle) relay(t *testing.T, pub ferrybroker.Publisher, cfg ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	if cfg.Log.Feed == nil {
		cfg.Log.Feed = b.feed(t)
	}
	if cfg.Log.PollInterval == 0 {
		cfg.Log.PollInterval = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = b.logger()
	}
	r, err := ferry.NewRelay(b.store, pub, &cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// enqueue commits n events in transactions of per events each, to dest;
// aggregate(i) names event i's aggregate.
func (b *bundle) enqueue(t *testing.T, n, per int, dest string, aggregate func(i int) string) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += per {
		tx, err := b.st.DB.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		var evs []ferry.Event
		for i := start; i < min(start+per, n); i++ {
			evs = append(evs, ferry.Event{AggregateType: "order", AggregateID: aggregate(i), Type: "OrderPaid",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Destination: dest})
		}
		got, err := b.ob.EnqueueTx(b.ctx, tx, evs...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		ids = append(ids, got...)
	}
	return ids
}

// rolledBack enqueues n events in a transaction that rolls back.
func (b *bundle) rolledBack(t *testing.T, n int, dest string) []string {
	t.Helper()
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	var evs []ferry.Event
	for i := range n {
		evs = append(evs, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint("rb", i), Type: "OrderPaid",
			Payload: json.RawMessage(`{}`), Destination: dest})
	}
	ids, err := b.ob.EnqueueTx(b.ctx, tx, evs...)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	return ids
}

// waitSent waits until every id is SENT.
func (b *bundle) waitSent(t *testing.T, ids []string, d time.Duration) {
	t.Helper()
	testsvc.WaitFor(t, d, func() bool {
		for _, id := range ids {
			row, err := b.st.Driver.Get(b.ctx, id)
			if err != nil || row.Status != ferrytype.StatusSent {
				return false
			}
		}
		return true
	}, func() string {
		st, _ := b.st.Driver.Stats(b.ctx)
		return fmt.Sprintf("not every event SENT: %+v; logs:\n%s", st, strings.Join(b.logs.Lines(), "\n"))
	})
}

// broker is a destination the relay publishes to and the test reads back.
type broker struct {
	name  string
	dest  string
	pub   ferrybroker.Publisher
	read  func(t *testing.T, want int) []string // event ids, in arrival order
	close func()
}

func natsBroker(t *testing.T) broker {
	nc := testsvc.NATS(t)
	stream, prefix := testsvc.JetStreamStream(t, nc)
	p, err := ferrynats.Dial(testsvc.Context(t, 30*time.Second), testsvc.URL(testsvc.EnvNATS),
		&ferrynats.DialConfig{Config: ferrynats.Config{Stream: stream}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return broker{name: "nats", dest: prefix + ".events", pub: p, read: func(t *testing.T, want int) []string {
		var ids []string
		for _, m := range testsvc.ReadStream(t, nc, stream, want, time.Minute) {
			ids = append(ids, m.ID)
		}
		return ids
	}}
}

func rabbitBroker(t *testing.T) broker {
	conn := testsvc.RabbitMQ(t)
	q := testsvc.RabbitMQQueue(t, conn, "quorum", nil)
	p, err := ferryamqp.Dial(testsvc.Context(t, 30*time.Second), testsvc.URL(testsvc.EnvAMQP), nil)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return broker{name: "rabbitmq", dest: q.RoutingKey, pub: p, read: func(t *testing.T, want int) []string {
		var ids []string
		for _, d := range testsvc.ReadRabbitMQQueue(t, conn, q.Name, want, time.Minute) {
			ids = append(ids, d.MessageId)
		}
		return ids
	}}
}

func kafkaBroker(t *testing.T) broker {
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 3)
	p, err := ferrykafka.Dial(testsvc.Context(t, 30*time.Second), "kafka://"+strings.Join(k.Seeds, ","),
		&ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return broker{name: "kafka", dest: topic, pub: p, read: func(t *testing.T, want int) []string {
		var ids []string
		for _, r := range testsvc.ReadKafka(t, k.Seeds, topic, want, time.Minute) {
			for _, h := range r.Headers {
				if h.Key == ferrybroker.HeaderEventID {
					ids = append(ids, string(h.Value))
				}
			}
		}
		return ids
	}}
}

// Both databases through the log relay to each broker: events committed
// by concurrent producers, one to five a transaction, while the relay
// runs, arrive once each, claimed by id as the log told of them (no claim
// from the table found any); a rolled-back transaction's never do.
func TestLogRelayDeliversEveryCommittedEventOnce(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		for _, mk := range []func(*testing.T) broker{natsBroker, rabbitBroker, kafkaBroker} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				b := setup(t, kind)
				br := mk(t)
				t.Logf("broker %s", br.name)
				r := b.relay(t, br.pub, ferry.RelayConfig{})
				testsvc.WaitFor(t, 30*time.Second, func() bool { return r.LogStats().Reading }, nil)

				const producers, each = 4, 60
				var (
					mu        sync.Mutex
					committed []string
					wg        sync.WaitGroup
				)
				for p := range producers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < each; {
							per := 1 + (i+p)%5
							ids := b.enqueue(t, min(per, each-i), per, br.dest, func(j int) string { return fmt.Sprint(p, "-", (i+j)%7) })
							mu.Lock()
							committed = append(committed, ids...)
							mu.Unlock()
							i += per
						}
					}()
				}
				rolled := b.rolledBack(t, 5, br.dest)
				wg.Wait()
				b.waitSent(t, committed, 2*time.Minute)

				got := br.read(t, len(committed))
				count := map[string]int{}
				for _, id := range got {
					count[id]++
				}
				for _, id := range committed {
					require.Equal(t, 1, count[id], "event %s", id)
				}
				for _, id := range rolled {
					require.Zero(t, count[id], "rolled-back event %s was published", id)
				}
				require.Len(t, got, len(committed))
				// The claim from the table that the relay makes as it
				// starts reading may come after the first transactions
				// committed, and take their events: that batch, and when
				// it came back full, the next (a full batch from the
				// table is followed by another).
				byID, byScan := b.store.byID.Load(), b.store.byScan.Load()
				require.Equal(t, int64(len(committed)), byID+byScan)
				require.LessOrEqual(t, byScan, int64(2*100), "events claimed from the table, not by id from the log: %+v %+v\n%s",
					r.Stats(), r.LogStats(), strings.Join(b.logs.Lines(), "\n"))
				ls := r.LogStats()
				require.GreaterOrEqual(t, ls.Events, int64(len(committed)), "%+v", ls)
				require.Equal(t, int64(1), ls.Takeovers)
				require.Zero(t, ls.Gaps)
			})
		}
	}
}

// A first start on a table with NEW events publishes them (a claim from
// the table) and then streams: events committed after are read from the
// log and arrive by id (but for those a claim from the table that the
// start kicked may take if it runs late, as it may: it is not the log's).
func TestLogRelayFirstStartPublishesTheBacklogThenStreams(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			br := natsBroker(t)
			before := b.enqueue(t, 40, 10, br.dest, func(i int) string { return fmt.Sprint(i % 3) })
			r := b.relay(t, br.pub, ferry.RelayConfig{})
			b.waitSent(t, before, time.Minute)
			testsvc.WaitFor(t, 30*time.Second, func() bool { return r.LogStats().Reading }, nil)
			after := b.enqueue(t, 40, 4, br.dest, func(i int) string { return fmt.Sprint(i % 3) })
			b.waitSent(t, after, time.Minute)
			require.Equal(t, int64(len(before)+len(after)), b.store.byScan.Load()+b.store.byID.Load(), "each event claimed once")
			require.GreaterOrEqual(t, b.store.byScan.Load(), int64(len(before)), "the backlog, from the table")
			require.GreaterOrEqual(t, r.LogStats().Events, int64(len(after)), "the rest, read from the log")
			require.Len(t, br.read(t, 80), 80)
		})
	}
}

// A backlog of many batches is claimed from the table batch after batch,
// until a batch comes back short. The backlog is eight batches and the
// safety-net probe an hour away: a relay that claimed one batch from the
// table and waited for the probe for the next would not drain it within
// the minute.
func TestLogRelayDrainsABacklogOfManyBatches(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			br := natsBroker(t)
			backlog := b.enqueue(t, 40, 10, br.dest, func(i int) string { return fmt.Sprint(i) })
			b.relay(t, br.pub, ferry.RelayConfig{BatchSize: 5, Log: ferry.LogConfig{PollInterval: time.Hour}})
			b.waitSent(t, backlog, time.Minute)
			require.Equal(t, int64(len(backlog)), b.store.byScan.Load(), "the backlog, from the table")
			require.Len(t, br.read(t, 40), 40)
		})
	}
}

// A relay that stops keeps its checkpoint; the next one resumes the log
// from it and reads what was committed meanwhile. A second relay on the
// table stands by while the first reads, and takes over when it stops.
func TestLogRelayStandbyTakesOverFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == "mysql" {
				testsvc.BinlogLock(t, false) // it resumes the binlog from a checkpoint
			}
			b := setup(t, kind)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the relays' log:\n%s", b.logs.String())
				}
			})
			br := natsBroker(t)
			feed := b.feed(t)
			// The first relay's lease (10 min) outlasts the test: it holds
			// it however late its renewals come on a loaded machine (a
			// 6 s lease renewed every 2 s can lapse there, and the
			// standby then takes over and claims from the table, as it
			// should), so that "the standby claims nothing" checks the
			// standby, not the scheduler. It releases the lease at its Stop; the standby,
			// which polls it every 2 s (a third of its own 6 s lease),
			// takes over then.
			first := b.relay(t, br.pub, ferry.RelayConfig{ID: "first", Log: ferry.LogConfig{Feed: feed, Lease: 10 * time.Minute}})
			testsvc.WaitFor(t, 30*time.Second, func() bool { return first.LogStats().Reading }, nil)
			// The standby has a store of its own, to count its probes;
			// its PollInterval would have it probe every 5 ms were it
			// polling the table.
			sbStore := &countingStore{Store: b.st.Driver}
			standby, err := ferry.NewRelay(sbStore, br.pub, &ferry.RelayConfig{
				ID:           "standby",
				PollInterval: 5 * time.Millisecond,
				Logger:       b.logger(),
				Log:          ferry.LogConfig{Feed: b.feed(t), Lease: 6 * time.Second, PollInterval: time.Minute},
			})
			require.NoError(t, err)
			require.NoError(t, standby.Start(b.ctx))
			t.Cleanup(func() { _ = standby.Stop(context.Background()) })
			// Standing by, after its first look at the table as it
			// started, and done with the claims and probes it began
			// before (it claims as a polling relay until it knows it
			// stands by, and probes often): on a loaded machine one of
			// them may run after the events below commit, and find them.
			testsvc.WaitFor(t, 30*time.Second, func() bool {
				return standby.LogStats().Standby && sbStore.claims.Load() > 0 && sbStore.quiet()
			}, func() string { return fmt.Sprintf("%+v", standby.LogStats()) })
			probes, readies, claims := sbStore.probes.Load(), sbStore.readies.Load(), sbStore.claims.Load()
			ids := b.enqueue(t, 20, 2, br.dest, func(i int) string { return fmt.Sprint(i) })
			b.waitSent(t, ids, time.Minute)
			sbStats := standby.LogStats()
			require.False(t, sbStats.Reading, "one reader at a time: %+v", sbStats)
			require.Zero(t, sbStats.Events, "%+v", sbStats)
			require.Zero(t, sbStore.byID.Load(), "a standby claims nothing by id: it reads no log")
			require.LessOrEqual(t, sbStore.probes.Load()-probes, int64(1),
				"a standby probes the table once per LogPollInterval, not every PollInterval")
			// A probe the standby's poller decided on before it stood by
			// may still begin after the wait above, find the events and
			// have it claim them, as a standby does what its probe
			// finds: that is the scheduler. Without such a probe it
			// claims nothing.
			if sbStore.readies.Load() == readies {
				require.Equal(t, claims, sbStore.claims.Load(),
					"the standby claimed nothing, not even on PostgreSQL's NOTIFY: the reader did; the standby: %+v, the reader: %+v",
					sbStats, first.LogStats())
				require.Zero(t, sbStore.byScan.Load())
			} else {
				t.Logf("a probe of the standby's found events and it claimed %d of them from the table", sbStore.byScan.Load())
			}

			require.NoError(t, first.Stop(b.ctx))
			st, ok, err := b.st.Driver.LeaseState(b.ctx, ferrystore.LeaseLog)
			require.NoError(t, err)
			require.True(t, ok)
			require.NotEmpty(t, st.Position)
			// Committed while no relay reads the log.
			gap := b.enqueue(t, 20, 5, br.dest, func(i int) string { return fmt.Sprint(i) })
			testsvc.WaitFor(t, 30*time.Second, func() bool { return standby.LogStats().Reading },
				func() string { return fmt.Sprintf("%+v", standby.LogStats()) })
			b.waitSent(t, gap, time.Minute)
			testsvc.WaitFor(t, 30*time.Second, func() bool { return standby.LogStats().Events >= int64(len(gap)) },
				func() string {
					return fmt.Sprintf("the standby did not read from the checkpoint: %+v", standby.LogStats())
				})
			later := b.enqueue(t, 10, 1, br.dest, func(i int) string { return fmt.Sprint(i) })
			b.waitSent(t, later, time.Minute)
			require.Len(t, br.read(t, 50), 50, "every event once")
		})
	}
}

// The log no longer holds the checkpoint — MariaDB's binlog purged past
// it, PostgreSQL's slot dropped — while no relay ran: the relay says so
// in an ERROR line, counts it, and claims from the table what was
// committed meanwhile, so nothing is skipped; then it streams again.
func TestLogRelayGapFallsBackToTheTable(t *testing.T) {
	// serial: it purges the shared server's binlog.
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			if kind == "mysql" {
				testsvc.BinlogLock(t, true) // it purges the binlog
			}
			b := setup(t, kind)
			br := natsBroker(t)
			feed := b.feed(t)
			r := b.relay(t, br.pub, ferry.RelayConfig{Log: ferry.LogConfig{Feed: feed}})
			testsvc.WaitFor(t, 30*time.Second, func() bool { return r.LogStats().Reading }, nil)
			first := b.enqueue(t, 10, 2, br.dest, func(i int) string { return fmt.Sprint(i) })
			b.waitSent(t, first, time.Minute)
			require.NoError(t, r.Stop(b.ctx))

			missed := b.enqueue(t, 30, 3, br.dest, func(i int) string { return fmt.Sprint(i) })
			if kind == "mysql" {
				st, _, err := b.st.Driver.LeaseState(b.ctx, ferrystore.LeaseLog)
				require.NoError(t, err)
				file, _, _ := strings.Cut(string(st.Position), ":")
				// MariaDB keeps a file crash recovery still needs, with a
				// warning only: flush and purge until the checkpoint's
				// file is gone.
				testsvc.WaitFor(t, 30*time.Second, func() bool {
					_, err := b.st.DB.ExecContext(b.ctx, "FLUSH BINARY LOGS")
					require.NoError(t, err)
					logs := binlogs(t, b)
					_, err = b.st.DB.ExecContext(b.ctx, "PURGE BINARY LOGS TO '"+logs[len(logs)-1]+"'")
					require.NoError(t, err)
					return !slices.Contains(binlogs(t, b), file)
				}, nil)
			} else {
				slot := feed.(*ferrypgoutput.Feed).Slot()
				testsvc.WaitFor(t, 30*time.Second, func() bool {
					_, err := b.st.DB.ExecContext(b.ctx, "SELECT pg_drop_replication_slot($1)", slot)
					return err == nil
				}, nil)
			}

			again := b.relay(t, br.pub, ferry.RelayConfig{Log: ferry.LogConfig{Feed: b.feed(t)}})
			b.waitSent(t, missed, time.Minute)
			testsvc.WaitFor(t, 30*time.Second, func() bool { return again.LogStats().Gaps == 1 && again.LogStats().Reading },
				func() string { return fmt.Sprintf("%+v\n%s", again.LogStats(), strings.Join(b.logs.Lines(), "\n")) })
			require.NotEmpty(t, b.logs.Lines("level=ERROR", "no longer holds the checkpoint"))
			after := b.enqueue(t, 10, 1, br.dest, func(i int) string { return fmt.Sprint(i) })
			b.waitSent(t, after, time.Minute)
			require.Len(t, br.read(t, 50), 50)
		})
	}
}

// binlogs lists the server's binary log files, oldest first.
func binlogs(t *testing.T, b *bundle) []string {
	rows, err := b.st.DB.QueryContext(b.ctx, "SHOW BINARY LOGS")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var name string
		dest := []any{&name}
		for range len(cols) - 1 {
			dest = append(dest, new(sql.RawBytes))
		}
		require.NoError(t, rows.Scan(dest...))
		out = append(out, name)
	}
	require.NoError(t, rows.Err())
	return out
}

// failFirst fails the first publish of one event as unknown.
type failFirst struct {
	ferrybroker.Publisher
	id     string
	failed atomic.Bool
}

func (p *failFirst) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	for i := range msgs {
		if msgs[i].ID == p.id && p.failed.CompareAndSwap(false, true) {
			res := p.Publisher.Publish(ctx, append(msgs[:i:i], msgs[i+1:]...))
			return append(res[:i:i], append([]ferrytype.PublishResult{ferrytype.Unknown(fmt.Errorf("injected: confirm lost"))}, res[i:]...)...)
		}
	}
	return p.Publisher.Publish(ctx, msgs)
}

// Ordered: an aggregate's events, each committed in its own transaction
// and read from the log at once, are published one at a time in sequence
// order, even when the first one's publish fails and is retried: the
// later ones wait in the table for it (a claim by id holds them back as
// an ordered claim does).
func TestLogRelayOrderedHoldsBackBehindAFailure(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			br := natsBroker(t)
			// The first event of aggregate "a" is committed first and
			// fails once; the relay is started after, so that all of
			// its events come from the table or the log in one burst.
			first := b.enqueue(t, 1, 1, br.dest, func(int) string { return "a" })
			pub := &failFirst{Publisher: br.pub, id: first[0]}
			r := b.relay(t, pub, ferry.RelayConfig{Ordered: true,
				Retry: ferry.ExponentialBackoff{Initial: 200 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 5}})
			testsvc.WaitFor(t, 30*time.Second, func() bool { return pub.failed.Load() }, nil)
			rest := b.enqueue(t, 6, 1, br.dest, func(int) string { return "a" })
			others := b.enqueue(t, 6, 2, br.dest, func(i int) string { return fmt.Sprint("b", i) })
			all := append(append(append([]string{}, first...), rest...), others...)
			b.waitSent(t, all, time.Minute)

			got := br.read(t, len(all))
			want := append(append([]string{}, first...), rest...)
			var order []string
			for _, id := range got {
				for _, w := range want {
					if id == w {
						order = append(order, id)
					}
				}
			}
			require.Equal(t, want, order, "aggregate a in sequence order, each once")
			require.Equal(t, int64(1), r.Stats().Unknown)
			require.Equal(t, int64(1), r.Stats().Retried)
		})
	}
}
