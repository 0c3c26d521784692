package ferryadmin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

// openExample opens a migrated SQLite outbox in dir with three OrderPaid
// events of orders 1 to 3, and one OrderShipped event of order 1.
func openExample(ctx context.Context, dir string) *ferrysqlite.Store {
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		_, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), Type: "OrderPaid",
			Payload: json.RawMessage(fmt.Sprintf(`{"order_id":%d}`, i))})
		if err != nil {
			log.Fatal(err)
		}
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "1", Type: "OrderShipped",
		Payload: json.RawMessage(`{"order_id":1}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	return store
}

// giveUp claims the first n events and marks them DEAD, as a relay does
// when an event's retries are exhausted.
func giveUp(ctx context.Context, store ferrystore.Store, n int, why string) {
	msgs, err := store.Claim(ctx, ferrystore.ClaimParams{Limit: n, Token: "example", Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fails := make([]ferrystore.Failure, len(msgs))
	for i, m := range msgs {
		fails[i] = ferrystore.Failure{ID: m.ID, Token: "example", Dead: true, Error: why}
	}
	if _, err := store.MarkFailed(ctx, fails); err != nil {
		log.Fatal(err)
	}
}

// Status reads what an on-call engineer asks first, from the database
// alone: it works while every relay is down.
func ExampleStatus() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 1, "nats: no stream matches subject")

	rep, err := ferryadmin.Status(ctx, store, nil) // nil: the default options
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("NEW:", rep.Counts["NEW"], "DEAD:", rep.Counts["DEAD"])
	for _, d := range rep.Destinations {
		fmt.Printf("pending to %s: %d\n", d.Destination, d.New)
	}
	fmt.Println("failed:", rep.Failed[0].Type, rep.Failed[0].LastError)
	fmt.Println("needs a person:", rep.Unhealthy)
	fmt.Println(rep.Attention[0])
	// Output:
	// NEW: 3 DEAD: 1
	// pending to OrderPaid: 2
	// pending to OrderShipped: 1
	// failed: OrderPaid nats: no stream matches subject
	// needs a person: true
	// 1 DEAD event waits for a decision (ferry dead list; then retry or discard). With --ordered relays each holds back the later events of its aggregate.
}

// RetryDead puts DEAD events back to NEW, in bounded batches, reporting
// progress after each; the relay then publishes them again under the same
// event ids. The action is bound to its dry run's instant (DiedBy), so it
// acts on the events the dry run counted and on none that died since.
func ExampleRetryDead() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 3, "nats: no stream matches subject")

	// Look before acting: a dry run changes nothing.
	preview, err := ferryadmin.RetryDead(ctx, store, ferryadmin.BulkOptions{
		Filter: ferryadmin.DeadFilter{Type: "OrderPaid"}, DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("would retry:", preview.Changed, "of", preview.Matched)

	res, err := ferryadmin.RetryDead(ctx, store, ferryadmin.BulkOptions{
		Filter: ferryadmin.DeadFilter{Type: "OrderPaid", DiedBy: preview.At},
		Batch:  2,
		Progress: func(r ferryadmin.BulkResult) {
			fmt.Printf("batch %d: %d retried so far\n", r.Batches, r.Changed)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retried:", res.Changed, "of", res.Matched, "complete:", res.Complete)
	left, err := ferryadmin.ListDead(ctx, store, ferryadmin.DeadFilter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("still DEAD:", len(left.Events))
	// Output:
	// would retry: 3 of 3
	// batch 1: 2 retried so far
	// batch 2: 3 retried so far
	// retried: 3 of 3 complete: true
	// still DEAD: 0
}

// DiscardDead gives up on events for good; the rows stay, with who
// decided, why, and when.
func ExampleDiscardDead() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 1, "payload too large")

	res, err := ferryadmin.DiscardDead(ctx, store, ferryadmin.BulkOptions{
		Filter: ferryadmin.DeadFilter{AggregateType: "order", AggregateID: "1"}},
		"a test order, INC-42", "alice@ops")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("discarded:", res.Changed)
	found, err := ferryadmin.GetEvents(ctx, store, res.IDs)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(found.Events[0].Status, found.Events[0].Type)
	// Output:
	// discarded: 1
	// DISCARDED OrderPaid
}

// GetEvents shows events in full; for a DEAD event of an aggregate, it
// counts the later events an ordered relay holds back behind it.
func ExampleGetEvents() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 1, "payload too large")

	dead, err := ferryadmin.ListDead(ctx, store, ferryadmin.DeadFilter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	found, err := ferryadmin.GetEvents(ctx, store, []string{dead.Events[0].ID, "no-such-id"})
	if err != nil {
		log.Fatal(err)
	}
	e := found.Events[0]
	fmt.Println(e.Aggregate(), e.Type, string(e.Payload), "holds back", *e.HoldsBack)
	fmt.Println("missing:", found.Missing)
	// Output:
	// order:1#1 OrderPaid {"order_id":1} holds back 1
	// missing: [no-such-id]
}

// Reconcile finds business rows that committed without their event.
func ExampleReconcile() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	// Orders 1 to 3 have their OrderPaid event; order 4 was paid by a code
	// path that skipped the outbox.
	if _, err := store.DB().Exec(`CREATE TABLE payment (order_id INTEGER PRIMARY KEY, paid_at TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	for id := 1; id <= 4; id++ {
		if _, err := store.DB().Exec(`INSERT INTO payment VALUES (?, strftime('%Y-%m-%d %H:%M:%f', 'now', '-5 minutes'))`, id); err != nil {
			log.Fatal(err)
		}
	}

	rep, err := ferryadmin.Reconcile(ctx, store, ferryadmin.ReconcileOptions{
		Checks: []ferryadmin.Check{{Name: "orders-paid", Table: "payment", KeyColumn: "order_id", TimeColumn: "paid_at",
			AggregateType: "order", EventType: "OrderPaid"}},
		Window: time.Hour,
		Grace:  time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range rep.Checks {
		for _, m := range c.Missing {
			fmt.Printf("%s: order %s has no %s event\n", c.Name, m.Key, c.EventType)
		}
	}
	fmt.Println("findings:", rep.Findings)
	// Output:
	// orders-paid: order 4 has no OrderPaid event
	// findings: 1
}

// A key template builds, from an outbox row, the business key a consumer
// records its marker under.
func ExampleParseKeyTemplate() {
	key, err := ferryadmin.ParseKeyTemplate("order:{aggregate_id}:paid:{payload.currency}")
	if err != nil {
		log.Fatal(err)
	}
	var r ferrystore.Row
	r.AggregateType, r.AggregateID, r.Type = "order", "42", "OrderPaid"
	r.Payload = json.RawMessage(`{"currency":"EUR","amount":10.50}`)
	k, err := key.Build(r)
	fmt.Println(k, err)
	r.Payload = json.RawMessage(`{"amount":10.50}`)
	_, err = key.Build(r)
	fmt.Println(err)
	// Output:
	// order:42:paid:EUR <nil>
	// payload.currency is absent
}

// confirmAll is a publisher whose broker confirms every message.
type confirmAll struct{}

func (confirmAll) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	out := make([]ferrytype.PublishResult, len(msgs))
	for i := range out {
		out[i] = ferrytype.Confirmed()
	}
	return out
}

func (confirmAll) Close() error { return nil }

// Relays tells which relays run on a table and whether they are alive,
// from the heartbeat each writes in <table>_relay; a relay that stops
// cleanly deletes its row.
func ExampleRelays() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()

	relay, err := ferry.NewRelay(store, confirmAll{}, &ferry.RelayConfig{
		ID:        "relay-1",
		Heartbeat: ferry.HeartbeatConfig{Version: "v1.0.0", Broker: "nats://mq:4222", Interval: 50 * time.Millisecond},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// The first beat is written in the background as the relay starts:
	// poll for it, with a deadline.
	var relays []ferryadmin.RelayInfo
	tick, deadline := time.NewTicker(10*time.Millisecond), time.After(30*time.Second)
	defer tick.Stop()
	for len(relays) == 0 {
		if relays, err = ferryadmin.Relays(ctx, store, 0); err != nil {
			log.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			log.Fatal("no heartbeat within 30s")
		}
	}
	r := relays[0]
	fmt.Println(r.ID, r.Version, r.Broker, "alive:", r.Alive, "broker connected:", r.BrokerConnected)

	if err := relay.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	relays, err = ferryadmin.Relays(ctx, store, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Stop:", len(relays), "relays")
	// Output:
	// relay-1 v1.0.0 nats://mq:4222 alive: true broker connected: true
	// after Stop: 0 relays
}
