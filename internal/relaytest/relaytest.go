// Package relaytest holds the behaviour tests of the relay and the task
// worker, written once against an Env: a store and a broker. The root
// package's tests run them on the in-memory store (ferrymem) and broker
// (ferrytest), without services; the integration module's tests run the
// same functions, with the same assertions, on MariaDB, PostgreSQL and
// SQLite and a real NATS JetStream, which is where the guarantees are
// shown. A test function here has the name of the Go test that calls it,
// less its "Test".
//
// What only a real server or process can show (LISTEN/NOTIFY, a pgx
// pool's size, a cut network, an unmigrated table, a killed process) stays
// in the integration module's own tests.
package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// Setup returns a fresh Env for one test: its own outbox table and its own
// piece of broker topology, torn down when t ends.
type Setup[TTx any] func(t *testing.T) *Env[TTx]

// Env is one migrated outbox table on a database, with the transactions
// of its users, and one broker destination, which the tests publish to.
// The fields after Read size some tests, and say what a store or broker
// offers beyond ferrystore.Driver and ferrybroker.Publisher: a test that
// needs one the Env lacks (nil, false) skips, naming the field.
type Env[TTx any] struct {
	// Kind names the store: "memory", "mysql", "postgres", "sqlite".
	Kind string
	// Ctx ends when the test does.
	Ctx context.Context
	// Store is the outbox table, migrated.
	Store ferrystore.Driver[TTx]
	// Outbox enqueues into Store.
	Outbox *ferry.Outbox[TTx]
	// Begin starts a transaction on the store's database, as the
	// application's own.
	Begin func(ctx context.Context) (tx TTx, commit, rollback func() error)
	// Destination is a route the broker takes: what Read reads.
	Destination string
	// Publisher returns a new publisher to the broker, on a connection of
	// its own, closed when t ends.
	Publisher func(t testing.TB) ferrybroker.Publisher
	// Read returns every message that reached Destination, in the
	// broker's order, waiting up to d for at least want of them.
	Read func(t testing.TB, want int, d time.Duration) []Received

	// DrainEvents is the number of events four relays drain in
	// RelayFourRelaysDrainEveryEventOnce; default 20,000.
	DrainEvents int
	// DrainHeartbeat is the heartbeat of the relays that drain
	// DrainEvents together (0: the default): a store whose writes queue
	// for seconds under -race on loaded cores needs a longer one, lest a
	// live relay's beat land after it counts as dead.
	DrainHeartbeat time.Duration
	// OrderedAggregates is the number of aggregates, of ten events each,
	// of RelayOrderedUnderFailures; default 1,000.
	OrderedAggregates int
	// ReadsBesideWriters says that a claim answers while an enqueuer's
	// transaction is open (not on SQLite, whose one writer holds the
	// database until its commit).
	ReadsBesideWriters bool
	// InsertRaw writes a row by hand, committed, as a hand-written INSERT
	// or an older writer leaves it: columns cols (besides event_id) hold
	// vals as they are; unchecked writes it with the database's CHECK
	// constraints off.
	InsertRaw func(t testing.TB, id string, cols, vals []string, unchecked bool)
	// SetLeaseToken sets the lease token of row id by hand, as a person's
	// UPDATE would.
	SetLeaseToken func(ctx context.Context, t testing.TB, id, token string)
	// Outage returns a publisher to the broker that reports its
	// connection, and functions that cut the broker off from it and
	// restore it.
	Outage func(t testing.TB) (pub ConnectedPublisher, cut, restore func())
	// Metrics returns a relay hook that keeps metrics, and a function
	// that reads its counters by name (ferryprom's), for the checks of the
	// metrics a relay keeps.
	Metrics func(t testing.TB) (hook ferry.Hook, counters func() map[string]float64)
}

// ConnectedPublisher is a publisher that reports its connection to the
// broker, as those of ferry's adapters do.
type ConnectedPublisher interface {
	ferrybroker.Publisher
	ferrybroker.Connectivity
}

// Received is a message read back from the broker.
type Received struct {
	ID          string
	Route       string
	AggregateID string
	Sequence    int64
}

// needs skips t when the Env lacks what the test needs, naming the field.
func needs(t *testing.T, kind string, has bool, field, what string) {
	t.Helper()
	if !has {
		t.Skipf("the %s store's Env has no %s: %s", kind, field, what)
	}
}

// Enqueue writes n events, 100 per transaction, to Destination;
// aggregate(i) names event i's aggregate. It returns the ids in enqueue
// order.
func (e *Env[TTx]) Enqueue(t testing.TB, n int, aggregate func(i int) string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 100 {
		batch := make([]ferry.Event, 0, 100)
		for i := start; i < min(start+100, n); i++ {
			batch = append(batch, ferry.Event{
				AggregateType: "order", AggregateID: aggregate(i), Type: "OrderPaid",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Destination: e.Destination,
			})
		}
		ids = append(ids, e.EnqueueEvents(t, batch...)...)
	}
	return ids
}

// EnqueueEvents writes events in one committed transaction.
func (e *Env[TTx]) EnqueueEvents(t testing.TB, events ...ferry.Event) []string {
	t.Helper()
	tx, commit, rollback := e.Begin(e.Ctx)
	ids, err := e.Outbox.EnqueueTx(e.Ctx, tx, events...)
	if err != nil {
		_ = rollback()
		require.NoError(t, err)
	}
	require.NoError(t, commit())
	return ids
}

// CountingPublisher returns a new publisher to the broker, wrapped to
// count publishes per event id.
func (e *Env[TTx]) CountingPublisher(t testing.TB) *CountingPublisher {
	t.Helper()
	return &CountingPublisher{inner: e.Publisher(t), counts: map[string]int{}}
}

// Relay starts a relay on the store, stopped when t ends.
func (e *Env[TTx]) Relay(t testing.TB, pub ferrybroker.Publisher, cfg *ferry.RelayConfig) *ferry.Relay {
	t.Helper()
	return e.RelayFault(t, pub, cfg, nil)
}

// RelayFault starts a relay whose fault points call fault (ferryfault).
func (e *Env[TTx]) RelayFault(t testing.TB, pub ferrybroker.Publisher, cfg *ferry.RelayConfig, fault ferryfault.Func) *ferry.Relay {
	t.Helper()
	r, err := ferry.NewRelay(e.Store, pub, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(ferryfault.With(e.Ctx, fault)))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// WaitSettled waits until no event is NEW or SENDING.
func (e *Env[TTx]) WaitSettled(t testing.TB, d time.Duration) ferrystore.Stats {
	t.Helper()
	var st ferrystore.Stats
	testenv.WaitFor(t, d, func() bool {
		var err error
		st, err = e.Store.Stats(e.Ctx)
		require.NoError(t, err)
		return st.New == 0 && st.Sending == 0
	}, func() string { return fmt.Sprintf("still pending: %+v", st) })
	return st
}

// ReadAll reads what reached Destination, waiting up to a minute for want
// messages.
func (e *Env[TTx]) ReadAll(t testing.TB, want int) []Received {
	t.Helper()
	return e.Read(t, want, time.Minute)
}

// row reads one outbox row.
func (e *Env[TTx]) row(t testing.TB, id string) ferrystore.Row {
	t.Helper()
	row, err := e.Store.Get(e.Ctx, id)
	require.NoError(t, err)
	return row
}

// CountingPublisher counts how often each event id was handed to the
// broker; Inject, when set, may replace a message's outcome (a fault at a
// named point: the broker itself is the Env's).
type CountingPublisher struct {
	inner  ferrybroker.Publisher
	mu     sync.Mutex
	counts map[string]int
	// Inject returns a message's outcome when override is true; with
	// skipBroker, the message is not handed to the broker at all.
	Inject func(m *ferrytype.Message) (res ferrytype.PublishResult, skipBroker, override bool)
}

// Publish hands msgs to the broker, but those Inject keeps back, counting
// each.
func (p *CountingPublisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	var send []ferrytype.Message
	var at []int
	overrides := map[int]ferrytype.PublishResult{}
	for i := range msgs {
		if p.Inject != nil {
			if r, skip, override := p.Inject(&msgs[i]); override {
				overrides[i] = r
				if skip {
					res[i] = r
					continue
				}
			}
		}
		send = append(send, msgs[i])
		at = append(at, i)
	}
	p.mu.Lock()
	for _, m := range send {
		p.counts[m.ID]++
	}
	p.mu.Unlock()
	for j, r := range p.inner.Publish(ctx, send) {
		res[at[j]] = r
		if o, ok := overrides[at[j]]; ok {
			res[at[j]] = o
		}
	}
	return res
}

// Close closes the broker's publisher.
func (p *CountingPublisher) Close() error { return p.inner.Close() }

// Count returns how often the event id was handed to the broker.
func (p *CountingPublisher) Count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[id]
}

func fastRetry() ferry.RetryPolicy {
	return ferry.ExponentialBackoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 50}
}

// receive returns the next value from ch, failing the test after d.
func receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		panic("unreachable")
	}
}
