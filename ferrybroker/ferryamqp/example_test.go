package ferryamqp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrytype"
)

// A consumer awarding points: the handler commits the business effect and
// its idempotency marker in one transaction and returns nil only after the
// commit; the consumer acks after that. A duplicate delivery finds the
// marker and is acked without a second effect; a malformed event is
// parked with its reason. Needs RabbitMQ and a database, so it is not run.
func ExampleNewConsumer() {
	var db *sql.DB // the consumer's own database
	handler := func(ctx context.Context, d *ferrybroker.Delivery) error {
		var ev struct {
			UserID int64 `json:"userId"`
			Points int64 `json:"points"`
		}
		if err := json.Unmarshal(d.Payload, &ev); err != nil || ev.UserID == 0 {
			return ferrytype.Poison(fmt.Errorf("bad OrderPaid payload: %v", err))
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err // transient: retried after a delay
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO consumed_operation (consumer_name, business_key, event_id) VALUES (?, ?, ?)`,
			"points-award", "order:"+d.AggregateID+":paid", d.MessageID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			// n == 0: the marker was there, the operation is done (a real
			// consumer also compares the stored operation with this one,
			// as ferry's inbox does): ack.
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE points_account SET points = points + ? WHERE user_id = ?`, ev.Points, ev.UserID); err != nil {
			return err
		}
		return tx.Commit() // nil only once committed: then the consumer acks
	}
	var metrics ferrybroker.Hook // e.g. a *ferryprom.ConsumerMetrics
	c, err := ferryamqp.DialConsumer("amqp://ferry:secret@127.0.0.1:5672/", "points", handler, &ferryamqp.ConsumerConfig{
		ConsumerOptions: ferrybroker.ConsumerOptions{
			Concurrency: 8,
			// Park after the 5th failed delivery; retry after 500ms, 1s, 2s, ...
			Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 5, RetryDelay: 500 * time.Millisecond},
			Validate:   ferrybroker.RequireHeaders(ferrybroker.HeaderEventID, ferrybroker.HeaderEventType),
			Name:       "points-award",
			Hooks:      []ferrybroker.Hook{metrics},
		},
		Declare:  true,
		Topology: ferryamqp.Topology{Bindings: []ferryamqp.Binding{{Queue: "points", Exchange: "amq.topic", RoutingKey: "orders.*.paid"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil { // Stop on SIGTERM: finishes handlers in progress
		log.Fatal(err)
	}
}

// What ferryamqp declares for a queue: a quorum queue whose parking queue
// receives, at least once, what RabbitMQ dead-letters, with a delivery
// limit as the backstop against messages that crash their consumer.
func ExampleQueue_Arguments() {
	args := ferryamqp.Queue{Name: "points"}.Arguments()
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("%s = %#v\n", k, args[k])
	}
	// Output:
	// x-dead-letter-exchange = ""
	// x-dead-letter-routing-key = "points.parking"
	// x-dead-letter-strategy = "at-least-once"
	// x-delivery-limit = 20
	// x-overflow = "reject-publish"
	// x-queue-type = "quorum"
}

// Publish reports one outcome per message; only confirmed ones may be
// marked sent. Needs RabbitMQ, so it is not run.
func ExamplePublisher_Publish() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := ferryamqp.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	res := pub.Publish(ctx, []ferrytype.Message{{ID: "order-42-paid", Type: "OrderPaid",
		Payload: []byte(`{"orderId":42}`), Destination: "orders.42.paid"}})
	switch r := res[0]; r.Outcome {
	case ferrytype.OutcomeConfirmed:
		fmt.Println("RabbitMQ stored it")
	case ferrytype.OutcomeReturned:
		fmt.Println("no queue is bound to orders.42.paid:", r.Err)
	case ferrytype.OutcomeUnknown:
		fmt.Println("maybe stored: publish again with the same id", r.Err)
	default:
		fmt.Println("refused:", r.Err)
	}
}

// After fixing what made the points consumer park its messages (a handler
// bug, a missing account), put them back into its queue: each copy is
// confirmed before its parked message is acked, so a crash can duplicate a
// message (the consumer's inbox absorbs it) but never lose one. Needs
// RabbitMQ, so it is not run.
func ExampleReplayParked() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := ferryamqp.Connect(ctx, "amqp://ferry:secret@127.0.0.1:5672/", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// First look: what would move, and why it was parked.
	dry, err := ferryamqp.ReplayParked(ctx, conn, ferryamqp.ReplayOptions{Queue: "points", DryRun: true, Preview: 5})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dry.Preview {
		fmt.Println(m.MessageID, m.RoutingKey, m.Reason)
	}
	res, err := ferryamqp.ReplayParked(ctx, conn, ferryamqp.ReplayOptions{
		Queue: "points", // from points.parking
		Max:   1000,
		Progress: func(r ferryamqp.ReplayResult) {
			log.Printf("replayed %d of %d", r.Replayed, r.Depth)
		},
	})
	fmt.Printf("replayed %d, skipped %d (parked from other queues), failed %d\n", res.Replayed, res.Skipped, res.Failed)
	if err != nil {
		log.Fatal(err) // the messages not moved are still parked
	}
}
