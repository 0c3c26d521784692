package ferry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytest"
	"github.com/ferrydev/ferry/internal/relaytest"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The relay's behaviour tests (internal/relaytest) run here on the
// in-memory store and broker, in a second; the integration module runs
// the same tests, with the same assertions, on MariaDB, PostgreSQL and
// SQLite and a real NATS JetStream, where the guarantees are shown.

// memDestination is the route the in-memory broker takes, with every
// route under "orders." (as a JetStream stream on "orders.>"); it returns
// any other.
const memDestination = "orders.events"

// memSetup returns an Env on a fresh ferrymem database and a fresh
// ferrytest broker.
func memSetup(t *testing.T) *relaytest.Env[*ferrymem.Tx] {
	t.Helper()
	db := ferrymem.NewDB(nil)
	store, err := ferrymem.New(db, nil)
	require.NoError(t, err)
	outbox, err := ferry.NewOutbox(store, nil)
	require.NoError(t, err)
	broker := ferrytest.NewBroker(&ferrytest.BrokerConfig{Routes: func(route string) bool {
		return strings.HasPrefix(route, "orders.")
	}})
	return &relaytest.Env[*ferrymem.Tx]{
		Kind:   "memory",
		Ctx:    testenv.Context(t, 10*time.Minute),
		Store:  store,
		Outbox: outbox,
		Begin: func(ctx context.Context) (*ferrymem.Tx, func() error, func() error) {
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			return tx, tx.Commit, tx.Rollback
		},
		Destination: memDestination,
		Publisher:   func(testing.TB) ferrybroker.Publisher { return publisherOf{broker} },
		Read: func(t testing.TB, want int, d time.Duration) []relaytest.Received {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			msgs, err := broker.Wait(ctx, memDestination, want)
			require.NoError(t, err)
			out := make([]relaytest.Received, len(msgs))
			for i, m := range msgs {
				out[i] = relaytest.Received{ID: m.ID, Route: m.Route, AggregateID: m.AggregateID, Sequence: m.Sequence}
			}
			return out
		},
		// A quarter of the 20,000 events the real databases drain: the
		// in-memory store takes every claim under its one lock, which
		// -race slows as much as the events are many; the contention of
		// four relays is the same.
		DrainEvents:        5000,
		ReadsBesideWriters: true,
		InsertRaw: func(t testing.TB, id string, cols, vals []string, _ bool) {
			require.NoError(t, ferrymem.InsertRaw(store, id, cols, vals))
		},
		SetLeaseToken: func(_ context.Context, t testing.TB, id, token string) {
			require.NoError(t, ferrymem.UpdateRaw(store, id, []string{"lease_token"}, []string{token}))
		},
		// The broker reports its connection: an outage is Disconnect.
		Outage: func(testing.TB) (relaytest.ConnectedPublisher, func(), func()) {
			return publisherOf{broker}, func() { broker.Disconnect(nil) }, broker.Reconnect
		},
	}
}

// publisherOf is one relay's publisher to a shared broker: closing it
// leaves the broker open for the others.
type publisherOf struct{ *ferrytest.Broker }

func (publisherOf) Close() error { return nil }
