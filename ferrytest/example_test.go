package ferrytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytest"
	"github.com/ferrydev/ferry/ferrytype"
)

// enqueue writes events in one committed transaction of db.
func enqueue(ctx context.Context, db *ferrymem.DB, outbox *ferry.Outbox[*ferrymem.Tx], events ...ferry.Event) {
	tx, err := db.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := outbox.EnqueueTx(ctx, tx, events...); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}

// A unit test of code that enqueues events: the outbox is in memory
// (ferrymem), a relay drains it to the in-memory broker, and the test reads
// what reached each route.
func Example() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	outbox, _ := ferry.NewOutbox(store, nil)

	// The code under test, in its transaction.
	enqueue(ctx, db, outbox,
		ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPlaced", Payload: json.RawMessage(`{"items":2}`), Destination: "orders"},
		ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid", Payload: json.RawMessage(`{"amount":30}`), Destination: "orders"})

	broker := ferrytest.NewBroker(nil)
	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{Logger: slog.New(slog.DiscardHandler)})
	if _, err := relay.Drain(ctx); err != nil {
		panic(err)
	}
	for _, m := range broker.Messages("orders") {
		fmt.Printf("%s #%d %s\n", m.Type, m.Sequence, m.Payload)
	}
	// Output:
	// OrderPlaced #1 {"items":2}
	// OrderPaid #2 {"amount":30}
}

// A lost confirm: the broker stored the message but the relay could not
// know, so it publishes the event again, with the same id; the broker
// recognises the id, stores nothing more and says so, as JetStream does.
func ExampleBroker_SetFault() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	outbox, _ := ferry.NewOutbox(store, nil)
	enqueue(ctx, db, outbox, ferry.Event{ID: "evt-1", Type: "OrderPaid", Payload: json.RawMessage(`{}`)})

	broker := ferrytest.NewBroker(nil)
	lost := false
	broker.SetFault(func(m ferrytype.Message) ferrytest.Fault {
		if !lost { // the first confirm only
			lost = true
			return ferrytest.FaultLoseConfirm
		}
		return ferrytest.FaultNone
	})
	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{
		Retry:  ferry.ExponentialBackoff{Initial: time.Millisecond},
		Logger: slog.New(slog.DiscardHandler),
	})
	if _, err := relay.Drain(ctx); err != nil {
		panic(err)
	}
	st := relay.Stats()
	fmt.Printf("unknown %d, confirmed %d, of which duplicates %d\n", st.Unknown, st.Confirmed, st.Duplicates)
	fmt.Println("stored:", len(broker.Messages("OrderPaid")))
	row, _ := store.Get(ctx, "evt-1")
	fmt.Println(row.Status, "after", row.Attempt, "attempts")
	// Output:
	// unknown 1, confirmed 1, of which duplicates 1
	// stored: 1
	// SENT after 2 attempts
}

// An outage: while the broker is unreachable the relay claims nothing and
// spends no event's attempts; once it is back, the events go out.
func ExampleBroker_Disconnect() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, _ := ferrymem.New(db, nil)
	outbox, _ := ferry.NewOutbox(store, nil)
	broker := ferrytest.NewBroker(nil)
	broker.Disconnect(nil)

	relay, _ := ferry.NewRelay(store, broker, &ferry.RelayConfig{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	defer relay.Stop(ctx)
	enqueue(ctx, db, outbox, ferry.Event{ID: "evt-1", Type: "OrderPaid", Payload: json.RawMessage(`{}`)})
	fmt.Println("connected:", broker.Connected())

	broker.Reconnect()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	msgs, err := broker.Wait(wait, "OrderPaid", 1)
	if err != nil {
		panic(err)
	}
	fmt.Println("delivered:", msgs[0].ID)
	row, _ := store.Get(ctx, "evt-1")
	fmt.Println("attempts spent:", row.Attempt)
	// Output:
	// connected: false
	// delivered: evt-1
	// attempts spent: 1
}
