package ferrywatermill_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

type award struct {
	OrderID int64 `json:"order_id"`
	UserID  int64 `json:"user_id"`
	Points  int64 `json:"points"`
}

// A Watermill router keeps its handler and gets ferry's inbox: each
// operation applied once with its marker in one transaction (duplicates
// absorbed), a conflicting redelivery recorded and parked, a message that
// does not decode parked, a transient failure run again in place, and no
// nack storm: every message ends acked, in the park queue, or applied.
func TestRouterHandlerWithTheInbox(t *testing.T) {
	t.Parallel()
	db := testsvc.MySQL(t)
	mt, ct, vt := testsvc.InboxTables()
	store, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: mt, ConflictTable: ct, VersionTable: vt})
	require.NoError(t, err)
	exec := func(q string) error { _, err := db.Exec(q); return err }
	testsvc.MigratedInbox(t, store, exec, mt, mt, ct, vt)
	points := mt + "_points"
	require.NoError(t, exec("CREATE TABLE "+points+" (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + points) })
	require.NoError(t, exec("INSERT INTO "+points+" VALUES (7, 0)"))
	inbox, err := ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "points-award"})
	require.NoError(t, err)

	var flaky atomic.Int64 // order 3 fails twice before it applies
	handler := ferry.InboxHandler(inbox, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		var a award
		if err := json.Unmarshal(d.Payload, &a); err != nil || a.OrderID == 0 {
			return ferry.Operation{}, fmt.Errorf("not an award: %s", d.Payload)
		}
		return ferry.Operation{Key: fmt.Sprintf("order:%d:award", a.OrderID), Fields: a}, nil
	}, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var a award
		_ = json.Unmarshal(d.Payload, &a)
		if a.OrderID == 3 && flaky.Add(1) <= 2 {
			return errors.New("points service busy")
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, "UPDATE "+points+" SET points = points + ? WHERE user_id = ?", a.Points, a.UserID))
	})

	conn := testsvc.RabbitMQ(t)
	topic, park := testsvc.Name("ferry.wm.award."), testsvc.Name("ferry.wm.park.")
	declareQueue(t, conn, topic)
	declareQueue(t, conn, park)
	rh, err := ferrywatermill.NewRouterHandler(handler, &ferrywatermill.RouterConfig{
		Topic: topic, Park: amqpPublisher(t, testsvc.URL(testsvc.EnvAMQP)), ParkTopic: park,
		Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 5, RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond},
	})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("points-award", topic, amqpSubscriber(t), rh.Func)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-router.Running()

	send := func(id string, payload string) {
		publishRaw(t, conn, topic, ferrybrokertest.RawMessage{ID: id, Payload: []byte(payload),
			Headers: map[string]string{ferrybroker.HeaderEventID: id, ferrybroker.HeaderEventType: "OrderPaid"}})
	}
	for i := int64(1); i <= 5; i++ {
		send(fmt.Sprint("evt-", i), fmt.Sprintf(`{"order_id":%d,"user_id":7,"points":%d}`, i, 10*i))
	}
	send("evt-2-again", `{"order_id":2,"user_id":7,"points":20}`)    // a duplicate: absorbed
	send("evt-4-forged", `{"order_id":4,"user_id":7,"points":4000}`) // a conflict: parked
	send("evt-garbage", `{"order_id":"x"}`)                          // does not decode: parked
	send("evt-not-json", `not json`)                                 // malformed: parked

	testsvc.WaitFor(t, time.Minute, func() bool { s := rh.Stats(); return s.Acked == 6 && s.Parked == 3 },
		func() string { return fmt.Sprintf("%+v", rh.Stats()) })
	var total int64
	require.NoError(t, db.QueryRow("SELECT points FROM "+points+" WHERE user_id = 7").Scan(&total))
	require.Equal(t, int64(10+20+30+40+50), total, "each award applied once")
	st := rh.Stats()
	require.Equal(t, ferrybroker.ConsumerStats{Delivered: 11, Handled: 10, Acked: 6, Retried: 2, Parked: 3}, st,
		"order 3 ran three times; the malformed message never reached the handler")

	parked := map[string]ferrybrokertest.Received{}
	for _, r := range receivedAMQP(testsvc.ReadRabbitMQQueue(t, conn, park, 3, time.Minute)) {
		parked[r.ID] = r
	}
	require.Len(t, parked, 3)
	require.Contains(t, parked["evt-4-forged"].Headers[ferrybroker.HeaderParkReason], "conflicting operation")
	require.Contains(t, parked["evt-garbage"].Headers[ferrybroker.HeaderParkReason], "not an award")
	require.Contains(t, parked["evt-not-json"].Headers[ferrybroker.HeaderParkReason], "malformed message")
	var conflicts int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+ct).Scan(&conflicts))
	require.Equal(t, 1, conflicts, "the conflict is recorded")
	testsvc.WaitFor(t, time.Minute, func() bool {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(topic, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages == 0 && q.Consumers == 1
	}, func() string { return "messages left on the queue" })
}
