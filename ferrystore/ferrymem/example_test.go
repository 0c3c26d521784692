package ferrymem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
)

// printer is a publisher that prints each message and confirms it: the
// broker of the example.
type printer struct{}

func (printer) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	for i, m := range msgs {
		fmt.Printf("publish to %s: %s of %s %s, #%d: %s\n", m.Route(), m.Type, m.AggregateType, m.AggregateID, m.Sequence, m.Payload)
		res[i] = ferrytype.Confirmed()
	}
	return res
}

func (printer) Close() error { return nil }

// Events enqueued in a transaction are published once it commits; those of
// a transaction rolled back never are. A relay drains the outbox to a
// publisher, an aggregate's events in order.
func Example() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, err := ferrymem.New(db, nil)
	if err != nil {
		panic(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		panic(err)
	}
	order := func(typ, payload string) ferry.Event {
		return ferry.Event{AggregateType: "order", AggregateID: "42", Type: typ, Payload: json.RawMessage(payload)}
	}

	// The order's events, in the transaction of its business change.
	tx, err := db.Begin(ctx)
	if err != nil {
		panic(err)
	}
	paid := order("OrderPaid", `{"amount":30}`)
	paid.Destination = "orders.paid"
	if _, err := outbox.EnqueueTx(ctx, tx, order("OrderPlaced", `{"items":2}`), paid); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// A change rolled back takes its event with it.
	tx, err = db.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := outbox.EnqueueTx(ctx, tx, order("OrderCancelled", `{}`)); err != nil {
		panic(err)
	}
	if err := tx.Rollback(); err != nil {
		panic(err)
	}

	relay, err := ferry.NewRelay(store, printer{}, &ferry.RelayConfig{Ordered: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	res, err := relay.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("left: %d new, %d dead\n", res.Stats.New, res.Stats.Dead)
	// Output:
	// publish to OrderPlaced: OrderPlaced of order 42, #1: {"items":2}
	// publish to orders.paid: OrderPaid of order 42, #2: {"amount":30}
	// left: 0 new, 0 dead
}

// An inbox applies an operation once: its marker and its effect commit
// together, and a redelivery of the operation — even under another event
// id — is a duplicate that does nothing. The example's business state is a
// map, changed when the operation's transaction commits (Tx.OnCommit).
func ExampleInbox() {
	ctx := context.Background()
	store, err := ferrymem.NewInbox(ferrymem.NewDB(nil), nil)
	if err != nil {
		panic(err)
	}
	inbox, err := ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "points-award", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	points := map[int]int{7: 0}
	award := func(user, amount int) func(context.Context, *ferrymem.Tx) error {
		return func(_ context.Context, tx *ferrymem.Tx) error {
			return tx.OnCommit(func() { points[user] += amount })
		}
	}

	op := ferry.Operation{Key: "order:42:paid", EventID: "event-1", Fields: map[string]int{"user": 7, "amount": 10}}
	res, err := inbox.Process(ctx, op, award(7, 10))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Outcome, points[7])

	op.EventID = "event-2" // the same operation, delivered again
	res, err = inbox.Process(ctx, op, award(7, 10))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Outcome, "of", res.AppliedEventID, points[7])
	// Output:
	// applied 10
	// duplicate of event-1 10
}

// A test moves the database clock to reach what waits for time: here a
// delayed event, which becomes ready an hour later by the clock.
func ExampleDBConfig() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	db := ferrymem.NewDB(&ferrymem.DBConfig{Clock: func() time.Time { return now }})
	store, err := ferrymem.New(db, nil)
	if err != nil {
		panic(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		panic(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		panic(err)
	}
	ev := ferry.Event{Type: "ReminderDue", Payload: json.RawMessage(`{}`), Delay: time.Hour}
	if _, err := outbox.EnqueueTx(ctx, tx, ev); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	ready, _ := store.Ready(ctx)
	fmt.Println("ready now:", ready)
	now = now.Add(time.Hour)
	ready, _ = store.Ready(ctx)
	fmt.Println("ready an hour later:", ready)
	// Output:
	// ready now: false
	// ready an hour later: true
}
