// Quickstart is ferry's whole path in one process, with nothing to set up:
// an order's event commits with the order (SQLite), a relay publishes it to
// NATS JetStream (a server embedded here), and a consumer applies it once
// through the inbox. Run it with go run ./examples/quickstart.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferry-quickstart-")
	check(err)
	defer os.RemoveAll(dir)

	// A NATS server with JetStream, in this process; yours: ferrynats.Dial(ctx, url, cfg).
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	check(err)
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	check(err)
	defer nc.Close()

	// The service's database, with ferry's tables in it (what ferry migrate creates).
	store, err := ferrysqlite.Open(ctx, "sqlite://"+dir+"/shop.db", nil)
	check(err)
	defer store.Close()
	check(store.Migrate(ctx))
	db := store.DB()
	inboxStore, err := ferrysqlite.NewInbox(db, nil)
	check(err)
	check(inboxStore.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE points (user_id INTEGER PRIMARY KEY, points INTEGER NOT NULL)`)
	check(err)

	// 1. The business change and its event commit in one transaction, or neither does.
	outbox, err := ferry.NewOutbox(store, nil)
	check(err)
	tx, err := db.BeginTx(ctx, nil)
	check(err)
	defer tx.Rollback() // a no-op after Commit
	_, err = tx.ExecContext(ctx, `INSERT INTO points (user_id, points) VALUES (7, 0)`)
	check(err)
	_, err = outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"user":7,"points":10}`), Destination: "orders.paid"})
	check(err)
	check(tx.Commit())

	// 2. The relay publishes it, and marks it SENT once JetStream confirmed it.
	pub, err := ferrynats.New(ctx, nc, &ferrynats.Config{Stream: "ORDERS", Subjects: []string{"orders.>"}, Declare: true})
	check(err)
	relay, err := ferry.NewRelay(store, pub, nil)
	check(err)
	check(relay.Start(ctx))
	defer relay.Stop(ctx)

	// 3. The consumer applies it once per business key: the inbox's marker and
	// the effect commit in one transaction, and the message is acked after it.
	inbox, err := ferry.NewInbox(inboxStore, &ferry.InboxConfig{Consumer: "points"})
	check(err)
	decode := func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		return ferry.Operation{Key: "order:" + d.AggregateID + ":paid", Fields: json.RawMessage(d.Payload)}, nil
	}
	award := func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var p struct{ User, Points int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return err
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE points SET points = points + ? WHERE user_id = ?`, p.Points, p.User))
	}
	js, err := jetstream.New(nc)
	check(err)
	consumer, err := ferrynats.NewConsumer(js, ferry.InboxHandler(inbox, decode, award), &ferrynats.ConsumerConfig{
		Stream: "ORDERS", Durable: "points", FilterSubjects: []string{"orders.paid"}, Declare: true, ParkSubject: "orders.parked"})
	check(err)
	check(consumer.Start(ctx))
	defer consumer.Stop(ctx)

	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var points int
		check(db.QueryRowContext(ctx, `SELECT points FROM points WHERE user_id = 7`).Scan(&points))
		if points > 0 {
			fmt.Println("user 7 has", points, "points")
			return
		}
	}
	log.Fatal("the event was not applied within 30 s")
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
