package ferry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

// startNATS runs a NATS server with JetStream inside the process.
func startNATS(dir string) *server.Server {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server did not start")
	}
	return s
}

// The whole path on the embedded default: an order and its event commit in
// one SQLite transaction, a relay publishes the event to JetStream, and the
// message arrives with the event's id as its Nats-Msg-Id, by which
// JetStream drops a republished event. The root package's examples show
// the same API on the in-memory store and broker.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferry-example-")
	defer os.RemoveAll(dir)
	srv := startNATS(filepath.Join(dir, "nats"))
	defer srv.Shutdown()

	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	db := store.DB()
	if _, err := db.Exec(`CREATE TABLE purchase_order (id INTEGER PRIMARY KEY, status TEXT)`); err != nil {
		log.Fatal(err)
	}

	// The business change and its event commit together, or not at all.
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO purchase_order (id, status) VALUES (42, 'PAID')`); err != nil {
		log.Fatal(err)
	}
	ids, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		ID: "order-42-paid", AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"orderId":42,"amount":10}`), Destination: "orders.paid",
	})
	if err != nil {
		tx.Rollback()
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// The relay publishes it and marks it SENT once JetStream confirmed.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	pub, err := ferrynats.New(ctx, nc, &ferrynats.Config{Stream: "ORDERS", Subjects: []string{"orders.>"}, Declare: true})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := ferry.NewRelay(store, pub, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := relay.Drain(ctx); err != nil {
		log.Fatal(err)
	}

	js, _ := jetstream.New(nc)
	stream, _ := js.Stream(ctx, "ORDERS")
	msg, err := stream.GetLastMsgForSubject(ctx, "orders.paid")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", ids[0])
	fmt.Println("published", msg.Header.Get("Nats-Msg-Id"), msg.Header.Get("Ferry-Event-Type"), string(msg.Data))
	// Output:
	// enqueued order-42-paid
	// published order-42-paid OrderPaid {"orderId":42,"amount":10}
}
