// Pgrabbit is the PostgreSQL + RabbitMQ recipe of docs/recipes.md as one
// program: an order service marks an order paid and enqueues its event in
// one pgx transaction, a relay publishes the event to RabbitMQ, and a points
// service applies it once through its inbox (the marker and the effect in
// one transaction, the ack after the commit).
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	BROKER_URL=amqp://guest:guest@127.0.0.1:5672/ go run ./examples/recipes/pgrabbit
//
// Both services use one database here, each in its own tables; in your
// system each has its own. The program makes a fresh schema, exchange and
// queue, and drops them when it ends, so that it can run again.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
)

func main() {
	ctx := context.Background()
	databaseURL := getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	brokerURL := getenv("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/")
	if _, err := run(ctx, os.Stdout, databaseURL, brokerURL); err != nil {
		log.Fatal(err)
	}
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// orderPaid is the event's payload: the contract between the order service
// and its consumers.
type orderPaid struct {
	OrderID string `json:"orderId"`
	UserID  int    `json:"userId"`
	Points  int    `json:"points"`
}

// routingKey is where OrderPaid events go: the event's Destination, the
// routing key the points queue is bound with.
const routingKey = "orders.paid"

// summary is what a run did.
type summary struct {
	Points     int   // user 7's points
	Markers    int   // the points consumer's inbox markers
	Published  int64 // publishes RabbitMQ took (confirmed, or unknown and retried)
	Returned   int64 // publishes RabbitMQ returned as unroutable
	Deliveries int64 // deliveries the consumer acked
}

// run is the whole recipe on fresh names; it prints what happened to out.
func run(ctx context.Context, out io.Writer, databaseURL, brokerURL string) (summary, error) {
	var sum summary
	// Fresh names, so that the program can run again and beside its tests;
	// a service of yours has fixed ones ("orders", "points").
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	fresh := hex.EncodeToString(suffix)
	schema, exchange, queueName := "recipe_"+fresh, "orders_"+fresh, "points_"+fresh
	databaseURL, cleanup, err := prepare(ctx, databaseURL, brokerURL, schema, exchange, queueName)
	if err != nil {
		return sum, err
	}
	defer cleanup()

	// The order service, and its relay.
	pool, store, err := openOrders(ctx, databaseURL)
	if err != nil {
		return sum, err
	}
	defer pool.Close()
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		return sum, err
	}
	queue := ferryamqp.Queue{Name: queueName} // a quorum queue, parking queue points.parking
	relay, pub, err := startRelay(ctx, store, brokerURL, exchange, queue)
	if err != nil {
		return sum, err
	}
	defer pub.Close()
	defer relay.Stop(context.WithoutCancel(ctx))

	// The order is paid, and its event committed with it.
	if err := payOrder(ctx, pool, outbox, "42"); err != nil {
		return sum, err
	}

	// The points service starts last, on purpose: the queue holds the event
	// until it comes.
	consumer, inboxStore, err := startPoints(ctx, databaseURL, brokerURL, exchange, queue)
	if err != nil {
		return sum, err
	}
	defer inboxStore.Close()
	defer consumer.Stop(context.WithoutCancel(ctx))

	// A service never waits for this; the program does, until the event is
	// SENT and every copy RabbitMQ took was handled.
	for deadline := time.Now().Add(8 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rs, cs := relay.Stats(), consumer.Stats()
		sum.Published, sum.Returned, sum.Deliveries = rs.Confirmed+rs.Unknown, rs.Returned, cs.Acked
		if rs.Confirmed == 1 && cs.InFlight == 0 && cs.Acked+cs.Parked >= sum.Published {
			break
		}
		if time.Now().After(deadline) {
			return sum, fmt.Errorf("the event was not delivered within 8 s: relay %+v, consumer %+v", rs, cs)
		}
	}
	points := inboxStore.Pool()
	if err := points.QueryRow(ctx, `SELECT points FROM points WHERE user_id = 7`).Scan(&sum.Points); err != nil {
		return sum, err
	}
	if err := points.QueryRow(ctx, `SELECT count(*) FROM consumed_operation WHERE consumer_name = 'points'`).Scan(&sum.Markers); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "order 42 paid; user 7 has %d points (deliveries: %d, applied: %d)\n", sum.Points, sum.Deliveries, sum.Markers)
	return sum, nil
}

// openOrders opens the order service's pool and creates its tables in its
// database: its orders, and ferry's outbox (what ferry migrate does).
func openOrders(ctx context.Context, databaseURL string) (*pgxpool.Pool, *ferrypg.Store, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, nil, err
	}
	store, err := ferrypg.New(pool, nil) // EnqueueTx takes a pgx.Tx
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, user_id int NOT NULL, points int NOT NULL, status text NOT NULL)`)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `INSERT INTO orders (id, user_id, points, status) VALUES ('42', 7, 10, 'NEW')`)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store, nil
}

// startRelay starts a relay of the order service's outbox. Its publisher
// declares the exchange, the points queue (with its parking queue) and
// their binding, so that nothing it publishes comes back unroutable,
// whichever of relay and consumer starts first.
func startRelay(ctx context.Context, store *ferrypg.Store, brokerURL, exchange string, queue ferryamqp.Queue) (*ferry.Relay, *ferryamqp.Publisher, error) {
	pub, err := ferryamqp.Dial(ctx, brokerURL, &ferryamqp.Config{
		Exchange: exchange, // events go there, with their Destination as routing key
		Declare:  true,
		Topology: ferryamqp.Topology{
			Queues:   []ferryamqp.Queue{queue},
			Bindings: []ferryamqp.Binding{{Queue: queue.Name, RoutingKey: routingKey}},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	relay, err := ferry.NewRelay(store, pub, nil)
	if err == nil {
		err = relay.Start(ctx)
	}
	if err != nil {
		pub.Close()
		return nil, nil, err
	}
	return relay, pub, nil
}

// payOrder marks the order paid and enqueues its OrderPaid event in one
// pgx transaction: both commit, or neither does.
func payOrder(ctx context.Context, pool *pgxpool.Pool, outbox *ferry.Outbox[pgx.Tx], orderID string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { // commits when the function returns nil
		var ev orderPaid
		err := tx.QueryRow(ctx, `UPDATE orders SET status = 'PAID' WHERE id = $1 AND status = 'NEW'
			RETURNING id, user_id, points`, orderID).Scan(&ev.OrderID, &ev.UserID, &ev.Points)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("order %s is not awaiting payment", orderID)
		} else if err != nil {
			return err
		}
		payload, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = outbox.EnqueueTx(ctx, tx, ferry.Event{
			AggregateType: "order", AggregateID: orderID, Type: "OrderPaid",
			Payload: payload, Destination: routingKey,
		})
		return err
	})
}

// startPoints starts the points service: its inbox tables and points table
// in its database, and a consumer of its queue that applies each OrderPaid
// event once.
func startPoints(ctx context.Context, databaseURL, brokerURL, exchange string, queue ferryamqp.Queue) (_ *ferryamqp.Consumer, _ *ferrypg.Inbox, err error) {
	inboxStore, err := ferrypg.OpenInbox(ctx, databaseURL, nil) // the markers and conflicts tables
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			inboxStore.Close()
		}
	}()
	if err := inboxStore.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	pool := inboxStore.Pool() // the pool OpenInbox opened, for the service's own tables
	if _, err := pool.Exec(ctx, `CREATE TABLE points (user_id int PRIMARY KEY, points int NOT NULL)`); err != nil {
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO points (user_id, points) VALUES (7, 0)`); err != nil {
		return nil, nil, err
	}

	inbox, err := ferry.NewInbox(inboxStore, &ferry.InboxConfig{Consumer: "points"})
	if err != nil {
		return nil, nil, err
	}
	// decode names the business operation: its key, and the fields that
	// define it (the same key with other fields is a conflict).
	decode := func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		var ev orderPaid
		if err := json.Unmarshal(d.Payload, &ev); err != nil {
			return ferry.Operation{}, err // poison: parked
		}
		return ferry.Operation{Key: "order:" + ev.OrderID + ":paid", Fields: ev}, nil
	}
	// award is the effect, in the inbox's transaction, beside the marker.
	award := func(ctx context.Context, tx pgx.Tx, d *ferrybroker.Delivery) error {
		var ev orderPaid
		if err := json.Unmarshal(d.Payload, &ev); err != nil {
			return err
		}
		return ferry.ExpectTag(tx.Exec(ctx, `UPDATE points SET points = points + $1 WHERE user_id = $2`, ev.Points, ev.UserID))
	}
	consumer, err := ferryamqp.DialConsumer(brokerURL, queue.Name, ferry.InboxHandler(inbox, decode, award),
		&ferryamqp.ConsumerConfig{
			Queue:   queue, // the same settings as the relay's declaration
			Declare: true,
			Topology: ferryamqp.Topology{
				Exchanges: []ferryamqp.Exchange{{Name: exchange}},
				Bindings:  []ferryamqp.Binding{{Queue: queue.Name, Exchange: exchange, RoutingKey: routingKey}},
			},
		})
	if err != nil {
		return nil, nil, err
	}
	if err := consumer.Start(ctx); err != nil { // declares the queue and binding, then consumes
		return nil, nil, err
	}
	return consumer, inboxStore, nil
}

// prepare makes the program's schema and returns the database URL that
// uses it, and a function that drops it and deletes the exchange and the
// queues.
func prepare(ctx context.Context, databaseURL, brokerURL, schema, exchange, queue string) (string, func(), error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", nil, errors.New("DATABASE_URL is not a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", nil, err
	}
	return u.String(), func() {
		ctx := context.WithoutCancel(ctx)
		if conn, err := pgx.Connect(ctx, databaseURL); err == nil {
			_, _ = conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			conn.Close(ctx)
		}
		if conn, err := amqp.Dial(brokerURL); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
				_, _ = ch.QueueDelete(queue+ferryamqp.ParkingSuffix, false, false, false)
				_ = ch.ExchangeDelete(exchange, false, false)
			}
			conn.Close()
		}
	}, nil
}
