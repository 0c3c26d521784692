package ferrywatermill_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
)

// outboxBundle is an outbox on ferrymem, ferry's in-memory database: the
// stores' behaviour, the event id as the outbox's key included (the
// store conformance suite holds every store to it), without a server.
type outboxBundle struct {
	ctx    context.Context
	db     *ferrymem.DB
	store  *ferrymem.Store
	outbox *ferry.Outbox[*ferrymem.Tx]
}

func setupOutbox(t *testing.T) *outboxBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	db := ferrymem.NewDB(nil)
	store, err := ferrymem.New(db, nil)
	require.NoError(t, err)
	outbox, err := ferry.NewOutbox(store, nil)
	require.NoError(t, err)
	return &outboxBundle{ctx: ctx, db: db, store: store, outbox: outbox}
}

// publish publishes through an OutboxPublisher in a transaction of its
// own, each call of calls in turn, and commits when all returned nil;
// otherwise it rolls back and returns the first error.
func (b *outboxBundle) publish(t *testing.T, calls ...func(p message.Publisher) error) error {
	t.Helper()
	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	p, err := ferrywatermill.NewOutboxPublisher(b.outbox, tx, nil)
	require.NoError(t, err)
	for _, call := range calls {
		if err := call(p); err != nil {
			require.NoError(t, tx.Rollback())
			return err
		}
	}
	require.NoError(t, tx.Commit())
	return nil
}

func to(topic string, msgs ...*message.Message) func(p message.Publisher) error {
	return func(p message.Publisher) error { return p.Publish(topic, msgs...) }
}

// relayed is a message the relay published, with its topic.
type relayed struct {
	topic, uuid, payload string
}

// recorder is a Watermill publisher recording what it is given.
type recorder struct {
	mu  sync.Mutex
	got []relayed
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.got = append(r.got, relayed{topic, m.UUID, string(m.Payload)})
	}
	return nil
}

func (r *recorder) Close() error { return nil }

// relay drains the outbox through a Publisher and returns what it
// published.
func (b *outboxBundle) relay(t *testing.T) []relayed {
	t.Helper()
	rec := &recorder{}
	pub, err := ferrywatermill.NewPublisher(rec, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored, Logger: quiet()})
	require.NoError(t, err)
	r, err := ferry.NewRelay(b.store, pub, &ferry.RelayConfig{Logger: quiet()})
	require.NoError(t, err)
	res, err := r.Drain(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res.Stats.Dead)
	require.NoError(t, pub.Close())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.got
}

// A message's UUID is its event id, the outbox's key: the same UUID for a
// second topic is refused with ferrytype.ErrDuplicate, whether the first
// event committed or is earlier in the same transaction or call, and the
// event that was there is left as it was: relayed once, to its own topic,
// with its own payload.
func TestOutboxPublisherRefusesAUUIDTwice(t *testing.T) {
	const id = "0190c7e0-0000-7000-8000-000000000001"
	orders := relayed{"orders", id, `{"order":42}`}
	msg := func() *message.Message { return message.NewMessage(id, []byte(`{"order":42}`)) }
	other := func() *message.Message { return message.NewMessage(id, []byte(`{"invoice":7}`)) }

	t.Run("AfterTheFirstCommitted", func(t *testing.T) {
		b := setupOutbox(t)
		require.NoError(t, b.publish(t, to("orders", msg())))
		for _, m := range []*message.Message{msg(), msg().Copy(), other()} {
			err := b.publish(t, to("invoices", m))
			require.ErrorIs(t, err, ferrytype.ErrDuplicate)
			require.ErrorContains(t, err, "a message's UUID is its event id, the outbox's key")
			require.ErrorContains(t, err, "publish a copy to another topic under a UUID of its own")
		}
		require.ErrorIs(t, b.publish(t, to("orders", msg())), ferrytype.ErrDuplicate, "to the same topic too")
		require.Equal(t, []relayed{orders}, b.relay(t))
	})

	t.Run("InTheSameTransaction", func(t *testing.T) {
		b := setupOutbox(t)
		err := b.publish(t, to("orders", msg()), to("invoices", msg().Copy()))
		require.ErrorIs(t, err, ferrytype.ErrDuplicate)
		require.NoError(t, b.publish(t, to("orders", msg())), "the transaction rolled back wrote nothing")
		require.Equal(t, []relayed{orders}, b.relay(t))
	})

	t.Run("InTheSameCall", func(t *testing.T) {
		b := setupOutbox(t)
		require.ErrorIs(t, b.publish(t, to("orders", msg(), msg().Copy())), ferrytype.ErrDuplicate)
		require.NoError(t, b.publish(t, to("orders", msg())))
		require.Equal(t, []relayed{orders}, b.relay(t))
	})

	// The way round: a copy with a UUID of its own (here an empty one,
	// which takes the outbox's id, written back to the message).
	t.Run("ACopyWithAUUIDOfItsOwn", func(t *testing.T) {
		b := setupOutbox(t)
		cp := msg().Copy()
		cp.UUID = ""
		require.NoError(t, b.publish(t, to("orders", msg()), to("invoices", cp)))
		require.NotEmpty(t, cp.UUID)
		require.NotEqual(t, id, cp.UUID)
		require.ElementsMatch(t, []relayed{orders, {"invoices", cp.UUID, `{"order":42}`}}, b.relay(t))
	})
}
