package ferry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytest"
)

// quiet is the examples' logger: their output is what they print.
var quiet = slog.New(slog.DiscardHandler)

// The whole path, in memory (ferrymem for the two services' databases,
// ferrytest for the broker): an order's event commits with the order, a
// relay publishes it, and the points service applies it once through its
// inbox, although the broker delivers it twice. With real databases and a
// real broker the code is the same, on ferrymysql, ferrypg or ferrysqlite
// and ferryamqp, ferrynats or ferrykafka.
func Example() {
	ctx := context.Background()

	// The order service: the order and its event, in one transaction.
	shop := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(shop, nil)
	outbox, _ := ferry.NewOutbox(store, nil)
	orders := map[int]string{}
	tx, _ := shop.Begin(ctx)
	_ = tx.OnCommit(func() { orders[42] = "PAID" }) // the business change
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		ID: "order-42-paid", AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"order_id":42,"user_id":7,"amount":10}`), Destination: "orders.paid",
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// The relay: it marks the event SENT once the broker confirmed it.
	broker := ferrytest.NewBroker(nil)
	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{Logger: quiet})
	if _, err := relay.Drain(ctx); err != nil {
		panic(err)
	}

	// The points service: the award and its inbox marker, in one
	// transaction; the business key is the order's payment.
	points := ferrymem.NewDB(nil)
	markers, _ := ferrymem.NewInbox(points, nil)
	inbox, _ := ferry.NewInbox(markers, &ferry.InboxConfig{Consumer: "points-award", Logger: quiet})
	accounts := map[int64]int64{7: 0}
	for _, m := range broker.Messages("orders.paid") {
		var paid struct {
			OrderID int64 `json:"order_id"`
			UserID  int64 `json:"user_id"`
			Amount  int64 `json:"amount"`
		}
		if err := json.Unmarshal(m.Payload, &paid); err != nil {
			panic(err)
		}
		op := ferry.Operation{Key: fmt.Sprintf("order:%d:paid", paid.OrderID), EventID: m.ID,
			Fields: map[string]int64{"user_id": paid.UserID, "amount": paid.Amount}}
		for range 2 { // at least once: here, twice
			res, err := inbox.Process(ctx, op, func(_ context.Context, tx *ferrymem.Tx) error {
				return tx.OnCommit(func() { accounts[paid.UserID] += paid.Amount })
			})
			if err != nil {
				panic(err)
			}
			fmt.Println(m.ID, "from", m.Route+":", res.Outcome)
		}
	}
	fmt.Println("order 42 is", orders[42], "and user 7 has", accounts[7], "points")
	// Output:
	// order-42-paid from orders.paid: applied
	// order-42-paid from orders.paid: duplicate
	// order 42 is PAID and user 7 has 10 points
}

// EnqueueTx validates every event before it writes anything: a bad event
// is a clear error and the transaction can be rolled back whole.
func ExampleOutbox_EnqueueTx_invalidPayload() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	outbox, _ := ferry.NewOutbox(store, nil)
	tx, _ := db.Begin(ctx)
	defer tx.Rollback()
	_, err := outbox.EnqueueTx(ctx, tx, ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{"orderId":`)})
	fmt.Println(err)
	// Output:
	// enqueue event 0 (type "OrderPaid"): ferry: payload is not valid JSON
}

// Drain relays until nothing is pending, for scripts, jobs and tests: an
// event whose every publish is returned (no queue takes its route) ends
// DEAD after its last attempt, with its last error, for a person to retry
// or discard.
func ExampleRelay_Drain() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	outbox, _ := ferry.NewOutbox(store, nil)
	tx, _ := db.Begin(ctx)
	ids, _ := outbox.EnqueueTx(ctx, tx,
		ferry.Event{Type: "OrderPaid", Payload: json.RawMessage(`{}`), Destination: "orders.paid"},
		ferry.Event{Type: "OrderLost", Payload: json.RawMessage(`{}`), Destination: "nowhere"})
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	broker := ferrytest.NewBroker(&ferrytest.BrokerConfig{Routes: func(route string) bool { return route == "orders.paid" }})
	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{
		Retry:  ferry.ExponentialBackoff{Initial: time.Millisecond, MaxAttempts: 3},
		Logger: quiet,
	})
	res, err := relay.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("sent %d, dead %d, pending %d\n", res.Stats.Sent, res.Stats.Dead, res.Stats.New+res.Stats.Sending)
	lost, _ := store.Get(ctx, ids[1])
	fmt.Println(lost.Status, "after", lost.Attempt, "attempts:", lost.LastError)
	// Output:
	// sent 1, dead 1, pending 0
	// DEAD after 3 attempts: attempt 3: returned: ferrytest: no queue takes route "nowhere"
}

// A relay runs in the background from Start to Stop. A Wakeup shared with
// the outbox wakes it as soon as an event is enqueued in the same process,
// so that it need not poll often; Stop lets the batch in flight finish.
func ExampleRelay_Start() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	wake := ferry.NewWakeup()
	outbox, _ := ferry.NewOutbox(store, &ferry.OutboxConfig{Wakeup: wake})
	broker := ferrytest.NewBroker(nil)
	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{Wakeup: wake, PollInterval: time.Minute, Logger: quiet})
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}

	tx, _ := db.Begin(ctx)
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{ID: "evt-1", Type: "OrderPaid", Payload: json.RawMessage(`{}`)}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	msgs, err := broker.Wait(wait, "OrderPaid", 1)
	if err != nil {
		panic(err)
	}
	fmt.Println("published", msgs[0].ID)
	if err := relay.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println("confirmed:", relay.Stats().Confirmed)
	// Output:
	// published evt-1
	// confirmed: 1
}
