package ferryamqp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// relayBundle is one outbox table on a real database and one fresh
// quorum queue on the real RabbitMQ at amqpURL, bound to amq.topic.
type relayBundle struct {
	ctx     context.Context
	st      testsvc.SQLStore
	ob      *ferry.Outbox[*sql.Tx]
	amqpURL string
	q       testsvc.RabbitQueue
}

// setupRelay sets a bundle up on the shared RabbitMQ server.
func setupRelay(t testing.TB, kind string) *relayBundle {
	t.Helper()
	return setupRelayOn(t, kind, testsvc.URL(testsvc.EnvAMQP), testsvc.RabbitMQ(t))
}

// setupRelayOn sets a bundle up on the RabbitMQ server at amqpURL, which
// conn is connected to.
func setupRelayOn(t testing.TB, kind, amqpURL string, conn *amqp.Connection) *relayBundle {
	t.Helper()
	b := &relayBundle{ctx: testsvc.Context(t, 10*time.Minute), st: testsvc.Store(t, kind), amqpURL: amqpURL}
	b.q = testsvc.RabbitMQQueue(t, conn, "quorum", nil)
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	return b
}

// enqueue writes n events, 100 per transaction, and returns their ids.
func (b *relayBundle) enqueue(t testing.TB, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 100 {
		tx, err := b.st.DB.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		batch := make([]ferry.Event, 0, 100)
		for i := start; i < min(start+100, n); i++ {
			batch = append(batch, ferry.Event{
				AggregateType: "order", AggregateID: fmt.Sprint(i % 997), Type: "OrderPaid",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Destination: b.q.RoutingKey,
			})
		}
		got, err := b.ob.EnqueueTx(b.ctx, tx, batch...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		ids = append(ids, got...)
	}
	return ids
}

func (b *relayBundle) publisher(t testing.TB, cfg *ferryamqp.Config) *recordingPublisher {
	t.Helper()
	p, err := ferryamqp.Dial(b.ctx, b.amqpURL, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return &recordingPublisher{inner: p, outcomes: map[string][]ferrytype.Outcome{}}
}

func (b *relayBundle) relay(t testing.TB, pub ferrybroker.Publisher, cfg *ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	r, err := ferry.NewRelay(b.st.Driver, pub, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func (b *relayBundle) waitSettled(t testing.TB, d time.Duration) ferrystore.Stats {
	t.Helper()
	var st ferrystore.Stats
	testsvc.WaitFor(t, d, func() bool {
		var err error
		st, err = b.st.Driver.Stats(b.ctx)
		require.NoError(t, err)
		return st.New == 0 && st.Sending == 0
	}, func() string { return fmt.Sprintf("events still pending: %+v", st) })
	return st
}

func (b *relayBundle) countSent(t testing.TB) int {
	t.Helper()
	var n int
	q := "SELECT COUNT(*) FROM `" + b.st.Driver.Table() + "` WHERE status = 'SENT'"
	require.NoError(t, b.st.DB.QueryRowContext(b.ctx, q).Scan(&n))
	return n
}

// recordingPublisher records every outcome of every event id.
type recordingPublisher struct {
	inner    *ferryamqp.Publisher
	mu       sync.Mutex
	outcomes map[string][]ferrytype.Outcome
}

func (p *recordingPublisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := p.inner.Publish(ctx, msgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range res {
		p.outcomes[msgs[i].ID] = append(p.outcomes[msgs[i].ID], r.Outcome)
	}
	return res
}

func (p *recordingPublisher) Close() error { return p.inner.Close() }

func (p *recordingPublisher) count(o ferrytype.Outcome) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, os := range p.outcomes {
		for _, x := range os {
			if x == o {
				n++
			}
		}
	}
	return n
}

// readAll reads the bundle's whole queue on a connection of its own.
func (b *relayBundle) readAll(t testing.TB, want int) map[string]int {
	t.Helper()
	queue := b.q.Name
	conn, err := amqp.Dial(b.amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	got := map[string]int{}
	for _, d := range testsvc.ReadRabbitMQQueue(t, conn, queue, want, 2*time.Minute) {
		got[d.MessageId]++
	}
	return got
}

// Two relays drain 20,000 events from MariaDB into one quorum queue:
// every event is confirmed once and marked SENT, and the queue holds each
// exactly once.
func TestRelayTwoRelaysTwentyThousandToQuorumQueue(t *testing.T) {
	testsvc.Slow(t, "a 20,000-event drain")
	t.Parallel()
	b := setupRelay(t, "mysql")
	const total = 20000
	ids := b.enqueue(t, total)
	pubs := make([]*recordingPublisher, 2)
	relays := make([]*ferry.Relay, 2)
	for i := range relays {
		pubs[i] = b.publisher(t, nil)
		relays[i] = b.relay(t, pubs[i], &ferry.RelayConfig{BatchSize: 100, PollInterval: 20 * time.Millisecond})
	}
	st := b.waitSettled(t, 5*time.Minute)
	require.Zero(t, st.Dead)
	var confirmed int64
	for i, r := range relays {
		require.NoError(t, r.Stop(b.ctx))
		s := r.Stats()
		confirmed += s.Confirmed
		require.Zero(t, s.Unknown+s.Returned+s.Rejected+s.Fenced, "no fault, no retry: relay %d: %+v", i, s)
	}
	require.Equal(t, int64(total), confirmed)
	require.Equal(t, total, b.countSent(t))
	got := b.readAll(t, total)
	require.Len(t, got, total)
	for _, id := range ids {
		require.Equal(t, 1, got[id], "event %s", id)
	}
}

// RabbitMQ stops (rabbitmqctl stop_app) while two relays publish, and
// starts again: the relays reconnect and finish; no event is lost, every
// event is confirmed exactly once, and an event is in the queue twice only
// if one of its publishes ended unknown. The RabbitMQ is the tests' own
// node (testsvc.DisruptRabbitMQ), never the shared server.
func TestRelaySurvivesRabbitMQRestart(t *testing.T) {
	// serial: it restarts the tests' own RabbitMQ node, which one test at
	// a time holds.
	testsvc.Slow(t, "a RabbitMQ restart")
	node := testsvc.DisruptRabbitMQ(t)
	b := setupRelayOn(t, "mysql", node.URL, node.Conn(t))
	const total = 20000
	ids := b.enqueue(t, total)
	retry := ferry.ExponentialBackoff{Initial: 50 * time.Millisecond, Max: time.Second, MaxAttempts: 1000}
	cfg := &ferryamqp.Config{ReconnectWait: 200 * time.Millisecond,
		Connection: ferryamqp.ConnectionConfig{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}}
	pubs := []*recordingPublisher{b.publisher(t, cfg), b.publisher(t, cfg)}
	relays := make([]*ferry.Relay, len(pubs))
	for i := range relays {
		relays[i] = b.relay(t, pubs[i], &ferry.RelayConfig{BatchSize: 50, PollInterval: 20 * time.Millisecond,
			PublishTimeout: 5 * time.Second, Retry: retry})
	}
	confirmed := func() int64 {
		var n int64
		for _, r := range relays {
			n += r.Stats().Confirmed
		}
		return n
	}
	waitFor(t, time.Minute, func() bool { return confirmed() >= 1000 })
	beforeStop := confirmed()
	node.Stop(t)
	atStop := confirmed()
	waitFor(t, time.Minute, func() bool {
		return pubs[0].count(ferrytype.OutcomeUnknown)+pubs[1].count(ferrytype.OutcomeUnknown) > 0
	})
	node.Start(t)
	st := b.waitSettled(t, 5*time.Minute)
	require.Zero(t, st.Dead)
	require.Equal(t, total, b.countSent(t))
	require.Less(t, atStop, int64(total), "the restart happened mid-run")

	got := b.readAll(t, total)
	twice := 0
	for _, id := range ids {
		require.GreaterOrEqual(t, got[id], 1, "event %s lost", id)
		var outcomes []ferrytype.Outcome
		for _, p := range pubs {
			outcomes = append(outcomes, p.outcomes[id]...)
		}
		nConfirmed, nUnknown := 0, 0
		for _, o := range outcomes {
			switch o {
			case ferrytype.OutcomeConfirmed:
				nConfirmed++
			case ferrytype.OutcomeUnknown:
				nUnknown++
			}
		}
		require.Equal(t, 1, nConfirmed, "event %s: outcomes %v", id, outcomes)
		if got[id] > 1 {
			twice++
			require.Positive(t, nUnknown, "event %s stored %d times without an unknown outcome: %v", id, got[id], outcomes)
		}
	}
	var s ferry.RelayStats
	for _, r := range relays {
		x := r.Stats()
		s.Unknown += x.Unknown
		s.Rejected += x.Rejected
		s.Returned += x.Returned
	}
	t.Logf("confirmed before the stop: %d, when stopped: %d; unknown outcomes %d, rejected %d, returned %d; events stored twice %d",
		beforeStop, atStop, s.Unknown, s.Rejected, s.Returned, twice)
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	testsvc.WaitFor(t, d, cond, nil)
}

// RabbitMQ becomes unreachable (a cut proxy) for a few seconds in the
// middle of a run, with a retry policy that kills an event at its second
// failed attempt: no event goes DEAD, every attempt beyond the first is
// one the broker may have received (an unknown outcome of the batches in
// flight at the cut), every event is delivered once RabbitMQ is back, and
// the relay logs the outage at its start and end, not per event.
func TestRelayRabbitMQOutageSpendsNoAttempt(t *testing.T) {
	// serial: it cuts RabbitMQ's network and counts attempts over the outage.
	b := setupRelay(t, "mysql")
	const total = 3000
	ids := b.enqueue(t, total)
	url, proxy := testsvc.Proxy(t, testsvc.URL(testsvc.EnvAMQP))
	pub, err := ferryamqp.Dial(b.ctx, url, &ferryamqp.Config{ReconnectWait: 100 * time.Millisecond,
		Connection: ferryamqp.ConnectionConfig{DialTimeout: 2 * time.Second,
			ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	logs := &testsvc.LogBuffer{}
	const batch = 20
	r := b.relay(t, pub, &ferry.RelayConfig{BatchSize: batch, PollInterval: 20 * time.Millisecond,
		Retry:  ferry.ExponentialBackoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 2},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	waitFor(t, time.Minute, func() bool { return r.Stats().Confirmed >= 200 })
	proxy.Cut()
	waitFor(t, 30*time.Second, func() bool { return !pub.Connected() })
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Outages == 1 })
	// The outage lasts three seconds from the relay's seeing it: the
	// fault's length, not a wait for a condition; ample time, on the code
	// before this test, for every pending event to spend both its
	// attempts. DEAD is final (only an operator's retry undoes it), so one
	// look after the outage sees every event that died during it.
	<-time.After(3 * time.Second)
	during, err := b.st.Driver.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, during.Dead, "an event went DEAD during the outage")
	atRestore := r.Stats()
	require.Zero(t, atRestore.Dead, "the relay moved an event to DEAD during the outage: %+v", atRestore)
	require.Less(t, atRestore.Confirmed, int64(total), "the outage came mid-run")
	proxy.Restore()

	st := b.waitSettled(t, 3*time.Minute)
	require.Zero(t, st.Dead)
	require.Equal(t, total, b.countSent(t))
	extra := 0
	for _, id := range ids {
		row, err := b.st.Driver.Get(b.ctx, id)
		require.NoError(t, err)
		extra += row.Attempt - 1
	}
	s := r.Stats()
	require.LessOrEqual(t, extra, 4*batch, "the outage spent attempts: %+v", s)
	require.LessOrEqual(t, int64(extra), s.Unknown,
		"attempts beyond the first are only the unknown outcomes of batches in flight at the cut: %+v", s)
	require.LessOrEqual(t, s.Unknown, int64(4*batch), "only the batches in flight at the cut may be unknown: %+v", s)
	got := b.readAll(t, total)
	for _, id := range ids {
		require.GreaterOrEqual(t, got[id], 1, "event %s lost", id)
	}

	require.Equal(t, int64(1), s.Outages, "%+v", s)
	require.Len(t, logs.Lines("broker unreachable"), 1, "the outage's start is logged once")
	require.Len(t, logs.Lines("broker reachable again", "outage=", "held_back="), 1, "its end is logged once")
	warn := logs.Lines("level=WARN")
	require.LessOrEqual(t, len(warn), 4*batch+3, "the outage floods the log: %d warnings", len(warn))
	t.Logf("stats %+v; extra attempts %d; warnings %d; outage log: %q", s, extra, len(warn),
		append(logs.Lines("broker unreachable"), logs.Lines("broker reachable again")...))
}
