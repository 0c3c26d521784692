// Watermill is a Watermill application after its move to ferry (see
// docs/watermill.md): it publishes in its business transaction through
// ferry's outbox (where it used watermill-sql's publisher and the
// forwarder), ferry's relay publishes through a Watermill publisher, and a
// Watermill router applies each operation once through ferry's inbox
// (where it used the deduplicator middleware). A redelivered copy of the
// message is absorbed. GoChannel stands in for the broker so that it runs
// with nothing to set up; with RabbitMQ, pass watermill-amqp's publisher
// and subscriber (ConfirmDelivery on: Guarantee Stored). Run it with
// go run ./examples/watermill.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrywatermill"
)

func main() {
	ctx := context.Background()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	dir, err := os.MkdirTemp("", "ferry-watermill-")
	check(err)
	defer os.RemoveAll(dir)
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
	broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})

	// 1. Publish in the business transaction, through Watermill's interface.
	outbox, err := ferry.NewOutbox(store, nil)
	check(err)
	tx, err := db.BeginTx(ctx, nil)
	check(err)
	defer tx.Rollback() // a no-op after Commit
	_, err = tx.ExecContext(ctx, `INSERT INTO points (user_id, points) VALUES (7, 0)`)
	check(err)
	pub, err := ferrywatermill.NewOutboxPublisher(outbox, tx, nil)
	check(err)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42,"user":7,"points":10}`))
	msg.Metadata.Set("name", "OrderPaid")
	check(pub.Publish("orders.paid", msg))
	check(tx.Commit())

	// 2. ferry's relay publishes it through a Watermill publisher.
	relayPub, err := ferrywatermill.NewPublisher(broker, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.HandedOff})
	check(err)
	relay, err := ferry.NewRelay(store, relayPub, nil)
	check(err)
	check(relay.Start(ctx))
	defer relay.Stop(ctx)

	// 3. A Watermill router applies it once per business key, with the
	// inbox's marker in the same transaction.
	inbox, err := ferry.NewInbox(inboxStore, &ferry.InboxConfig{Consumer: "points"})
	check(err)
	decode := func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		var p struct{ Order int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return ferry.Operation{}, err
		}
		return ferry.Operation{Key: fmt.Sprintf("order:%d:paid", p.Order), Fields: json.RawMessage(d.Payload)}, nil
	}
	award := func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var p struct{ User, Points int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return err
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE points SET points = points + ? WHERE user_id = ?`, p.Points, p.User))
	}
	handler, err := ferrywatermill.NewRouterHandler(ferry.InboxHandler(inbox, decode, award),
		&ferrywatermill.RouterConfig{Topic: "orders.paid", Park: broker, ParkTopic: "orders.parked"})
	check(err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	check(err)
	router.AddConsumerHandler("points", "orders.paid", broker, handler.Func)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { check(router.Run(rctx)) }()
	<-router.Running()

	// The broker delivers the message again: the inbox absorbs the copy.
	waitFor(func() bool { return handler.Stats().Acked == 1 })
	check(broker.Publish("orders.paid", msg.Copy()))
	waitFor(func() bool { return handler.Stats().Acked == 2 })
	var points int
	check(db.QueryRowContext(ctx, `SELECT points FROM points WHERE user_id = 7`).Scan(&points))
	fmt.Println("user 7 has", points, "points after 2 deliveries")
}

func waitFor(cond func() bool) {
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("not applied within 30 s")
		}
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
