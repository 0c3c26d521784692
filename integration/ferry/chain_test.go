package ferry_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The whole chain: orders and their events commit together in PostgreSQL,
// a relay publishes them to JetStream, and a points consumer applies them
// through the inbox in MariaDB. The order service also re-wraps some
// events under new ids (duplicates for the inbox), sends one conflicting
// payment and one malformed event. Every paid order is awarded once; the
// conflict and the poison are parked and recorded, never counted as
// successes.
func TestChainOutboxRelayConsumerInbox(t *testing.T) {
	t.Parallel()
	producer := setupRelay(t, "postgres")
	ctx := producer.Ctx
	db := testsvc.MySQL(t)
	m, c, v := testsvc.InboxTables()
	ib, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	require.NoError(t, err)
	testsvc.MigratedInbox(t, ib, func(q string) error { _, err := db.Exec(q); return err }, m, m, c, v)
	points := testsvc.Name("points_")
	_, err = db.Exec("CREATE TABLE " + points + " (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + points) })
	const users, orders = 10, 500
	for u := 1; u <= users; u++ {
		_, err := db.Exec("INSERT INTO "+points+" VALUES (?, 0)", u)
		require.NoError(t, err)
	}

	// The order service: each paid order commits with its event.
	want := map[int64]int64{}
	enqueue := func(events ...ferry.Event) {
		tx, err := producer.st.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = producer.Outbox.EnqueueTx(ctx, tx, events...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
	}
	paid := func(order, user, amount int64) ferry.Event {
		body, _ := json.Marshal(orderPaid{OrderID: order, UserID: user, Amount: amount})
		return ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(order), Type: "OrderPaid",
			Payload: body, Destination: producer.Destination}
	}
	for i := int64(1); i <= orders; i++ {
		user := i%users + 1
		want[user] += i
		enqueue(paid(i, user, i))
		if i%25 == 0 { // re-wrapped: same operation, new event id
			enqueue(paid(i, user, i))
		}
	}
	enqueue(paid(7, 8, 9999)) // order 7 again, other user and amount: a conflict
	enqueue(ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{"order_id":"not-a-number"}`), Destination: producer.Destination})

	relay := producer.Relay(t, producer.CountingPublisher(t), &ferry.RelayConfig{PollInterval: 20 * time.Millisecond})
	counts := &outcomeCounter{}
	in, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points-award", Hooks: []ferry.Hook{counts}})
	require.NoError(t, err)
	js, err := jetstream.New(producer.nc)
	require.NoError(t, err)
	// The stream captures prefix.>, so parked copies stay in it.
	parkSubject := strings.TrimSuffix(producer.Destination, ".events") + ".parked"
	consumer, err := ferrynats.NewConsumer(js, ferry.InboxHandler(in, decodeOrderPaid, awardPoints(points)), &ferrynats.ConsumerConfig{
		Stream: producer.stream, Durable: "points", FilterSubjects: []string{producer.Destination}, Declare: true,
		ParkSubject: parkSubject, ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 8},
	})
	require.NoError(t, err)
	require.NoError(t, consumer.Start(ctx))
	defer consumer.Stop(ctx)

	total := orders + orders/25 + 2
	testsvc.WaitFor(t, 2*time.Minute, func() bool {
		st := consumer.Stats()
		return st.Acked+st.Parked >= int64(total)
	}, func() string { return fmt.Sprintf("consumer %+v, relay %+v", consumer.Stats(), relay.Stats()) })
	require.NoError(t, consumer.Stop(ctx))

	for u := int64(1); u <= users; u++ {
		var got int64
		require.NoError(t, db.QueryRow("SELECT points FROM "+points+" WHERE user_id = ?", u).Scan(&got))
		require.Equal(t, want[u], got, "user %d", u)
	}
	require.Equal(t, int64(orders), counts.applied.Load())
	require.Equal(t, int64(orders/25), counts.duplicate.Load())
	require.Equal(t, int64(1), counts.conflict.Load())
	require.Equal(t, int64(2), consumer.Stats().Parked, "the conflict and the poison, nothing else")
	conflicts, err := ib.Conflicts(ctx, ferrystore.ConflictFilter{Consumer: "points-award"})
	require.NoError(t, err)
	require.Len(t, conflicts, 1)
	require.Equal(t, "order:7:paid", conflicts[0].Key)
	require.JSONEq(t, `{"amount":9999,"user_id":8}`, string(conflicts[0].Incoming.Fields))

	parkedMsgs := readSubject(t, producer.nc, producer.stream, parkSubject, 2)
	reasons := map[string]bool{}
	for _, pm := range parkedMsgs {
		reasons[pm.Headers().Get(ferrybroker.HeaderParkReason)] = true
	}
	require.Len(t, reasons, 2)
	for r := range reasons {
		require.True(t, strings.Contains(r, "conflicting operation") || strings.Contains(r, "decode delivery"), r)
	}
}

func readSubject(t *testing.T, nc *nats.Conn, stream, subject string, want int) []jetstream.Msg {
	t.Helper()
	ctx := testsvc.Context(t, 30*time.Second)
	js, _ := jetstream.New(nc)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	require.NoError(t, err)
	var out []jetstream.Msg
	for len(out) < want {
		batch, err := cons.Fetch(want-len(out), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := len(out)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		require.Greater(t, len(out), n, "messages on %s did not arrive", subject)
	}
	return out
}
