package ferrywatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// bridge is the path a Watermill application takes through ferry: its
// Publish writes to the outbox in a transaction (OutboxPublisher); a ferry
// relay publishes through watermill-amqp (Publisher); a watermill-amqp
// subscriber reads.
type bridge struct {
	st     testsvc.SQLStore
	outbox *ferry.Outbox[*sql.Tx]
	relay  *ferry.Relay
	wrap   bool
}

func newBridge(t *testing.T, kind string, wrap bool) *bridge {
	t.Helper()
	st := testsvc.Store(t, kind)
	wake := ferry.NewWakeup()
	outbox, err := ferry.NewOutbox(st.Driver, &ferry.OutboxConfig{Wakeup: wake})
	require.NoError(t, err)
	pub := ferryPublisher(t, amqpPublisher(t, testsvc.URL(testsvc.EnvAMQP)), ferrywatermill.Stored)
	relay, err := ferry.NewRelay(st.Driver, pub, &ferry.RelayConfig{Wakeup: wake, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	})
	return &bridge{st: st, outbox: outbox, relay: relay, wrap: wrap}
}

// Publish writes msgs to the outbox in a transaction of their own.
func (b *bridge) Publish(topic string, msgs ...*message.Message) error {
	ctx := context.Background()
	if len(msgs) > 0 {
		ctx = msgs[0].Context()
	}
	tx, err := b.st.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	pub, err := ferrywatermill.NewOutboxPublisher(b.outbox, tx, &ferrywatermill.OutboxPublisherConfig{WrapPayloads: b.wrap})
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (b *bridge) Close() error { return nil }

// queueCleaner is a watermill-amqp subscriber whose queues (one per topic,
// declared by the subscriber) are deleted when the test ends: Watermill's
// universal tests name topics of their own.
type queueCleaner struct {
	*wamqp.Subscriber
	mu     sync.Mutex
	topics map[string]bool
}

func cleaned(t *testing.T, sub *wamqp.Subscriber) *queueCleaner {
	conn := testsvc.RabbitMQ(t)
	c := &queueCleaner{Subscriber: sub, topics: map[string]bool{}}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("delete the test's queues: %v", err)
			return
		}
		defer ch.Close()
		c.mu.Lock()
		defer c.mu.Unlock()
		for q := range c.topics {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Logf("delete queue %s: %v", q, err)
				return
			}
		}
	})
	return c
}

func (c *queueCleaner) note(topic string) {
	c.mu.Lock()
	c.topics[topic] = true
	c.mu.Unlock()
}

func (c *queueCleaner) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	c.note(topic)
	return c.Subscriber.Subscribe(ctx, topic)
}

func (c *queueCleaner) SubscribeInitialize(topic string) error {
	c.note(topic)
	return c.Subscriber.SubscribeInitialize(topic)
}

func amqpSubscriber(t *testing.T) *wamqp.Subscriber {
	t.Helper()
	sub, err := wamqp.NewSubscriber(amqpConfig(testsvc.URL(testsvc.EnvAMQP)), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// A Watermill application publishes in its business transaction: what
// commits reaches the subscriber with its UUID, metadata and payload;
// what rolls back never leaves.
func TestOutboxPublisherThroughTheRelay(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBridge(t, kind, false)
			sub := amqpSubscriber(t)
			topic := testsvc.Name("ferry.wm.orders.")
			require.NoError(t, sub.SubscribeInitialize(topic))
			testsvc.DeleteRabbitMQQueue(t, topic)
			ctx := testsvc.Context(t, time.Minute)
			msgs, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)

			const n = 20
			want := map[string]int{}
			for i := range n {
				tx, err := b.st.DB.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, "SELECT 1") // the business change
				require.NoError(t, err)
				pub, err := ferrywatermill.NewOutboxPublisher(b.outbox, tx, nil)
				require.NoError(t, err)
				msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"order":%d}`, i))
				msg.Metadata.Set("name", "OrderPaid")
				msg.Metadata.Set(ferrybroker.HeaderAggregateType, "order")
				msg.Metadata.Set(ferrybroker.HeaderAggregateID, fmt.Sprint(i%4))
				msg.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
				require.NoError(t, pub.Publish(topic, msg))
				if i%5 == 4 {
					require.NoError(t, tx.Rollback()) // never published
					continue
				}
				require.NoError(t, tx.Commit())
				want[msg.UUID] = i
			}
			// A payload that is not JSON is refused, naming the way out.
			tx, err := b.st.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			pub, err := ferrywatermill.NewOutboxPublisher(b.outbox, tx, nil)
			require.NoError(t, err)
			err = pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("not json")))
			require.ErrorIs(t, err, ferry.ErrInvalidPayload)
			require.ErrorContains(t, err, "WrapPayloads")
			require.NoError(t, tx.Rollback())

			got := map[string]bool{}
			for len(got) < len(want) {
				select {
				case msg := <-msgs:
					i, ok := want[msg.UUID]
					require.True(t, ok, "message %s was not committed", msg.UUID)
					require.False(t, got[msg.UUID], "message %s twice", msg.UUID)
					got[msg.UUID] = true
					require.JSONEq(t, fmt.Sprintf(`{"order":%d}`, i), string(msg.Payload))
					require.Equal(t, "OrderPaid", msg.Metadata.Get(ferrybroker.HeaderEventType))
					require.Equal(t, msg.UUID, msg.Metadata.Get(ferrybroker.HeaderEventID))
					require.Equal(t, fmt.Sprint(i%4), msg.Metadata.Get(ferrybroker.HeaderAggregateID))
					require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", msg.Metadata.Get("traceparent"))
					msg.Ack()
				case <-ctx.Done():
					t.Fatalf("%d of %d messages arrived", len(got), len(want))
				}
			}
			// Confirmed once the relay marked them, which may come after the
			// subscriber got them.
			testsvc.WaitFor(t, time.Minute, func() bool { return b.relay.Stats().Confirmed == int64(len(want)) },
				func() string { return fmt.Sprintf("%+v", b.relay.Stats()) })
		})
	}
}

// Watermill's universal pub/sub tests on the path Publish → outbox →
// relay → RabbitMQ → subscriber, with the features that path has: it
// persists, it does not keep order across aggregates (there are none
// here), it delivers at least once. Payloads that are not JSON (the
// suite's) are wrapped (OutboxPublisherConfig.WrapPayloads).
//
// Left out, each for its reason:
//   - TestConcurrentSubscribeMultipleTopics publishes each message, with
//     its UUID, to ten topics: a ferry event id is the outbox row's key,
//     one event per id (give each copy a UUID of its own);
//   - TestConsumerGroups: watermill-amqp's queue config has none;
//   - TestReconnect needs a command restarting the broker under every
//     other test; the relay's own broker-restart tests cover it.
//
// TestNoAck, TestPublishSubscribeInOrder and
// TestNewSubscriberReceivesOldMessages skip themselves for these features.
func TestWatermillUniversalTests(t *testing.T) {
	t.Parallel()
	features := tests.Features{Persistent: true, ForceShort: true}
	constructor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newBridge(t, "mysql", true), cleaned(t, amqpSubscriber(t))
	}
	for name, fn := range map[string]func(*testing.T, tests.TestContext, tests.PubSubConstructor){
		"PublishSubscribe":                 tests.TestPublishSubscribe,
		"ConcurrentSubscribe":              tests.TestConcurrentSubscribe,
		"ResendOnError":                    tests.TestResendOnError,
		"NoAck":                            tests.TestNoAck,
		"ContinueAfterSubscribeClose":      tests.TestContinueAfterSubscribeClose,
		"ConcurrentClose":                  tests.TestConcurrentClose,
		"ContinueAfterErrors":              tests.TestContinueAfterErrors,
		"PublishSubscribeInOrder":          tests.TestPublishSubscribeInOrder,
		"PublisherClose":                   tests.TestPublisherClose,
		"Topic":                            tests.TestTopic,
		"MessageCtx":                       tests.TestMessageCtx,
		"SubscribeCtx":                     tests.TestSubscribeCtx,
		"NewSubscriberReceivesOldMessages": tests.TestNewSubscriberReceivesOldMessages,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, constructor)
		})
	}
}
