// Mariarabbit is the MariaDB (or MySQL) + RabbitMQ recipe of
// docs/recipes.md as one program: an order service marks an order paid and
// enqueues its event in one database/sql transaction, a relay publishes the
// event to RabbitMQ, and a points service applies it once through its inbox
// (the marker and the effect in one transaction, the ack after the commit).
//
//	DATABASE_URL=mysql://root@127.0.0.1:3306/test \
//	BROKER_URL=amqp://guest:guest@127.0.0.1:5672/ go run ./examples/recipes/mariarabbit
//
// Both services use one database server here, each in its own tables; in
// your system each has its own database. The program makes a fresh
// database, exchange and queue, and drops them when it ends, so that it can
// run again.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver for database/sql
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
)

func main() {
	ctx := context.Background()
	databaseURL := getenv("DATABASE_URL", "mysql://root@127.0.0.1:3306/test")
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
	database, exchange, queueName := "recipe_"+fresh, "orders_"+fresh, "points_"+fresh
	databaseURL, cleanup, err := prepare(ctx, databaseURL, brokerURL, database, exchange, queueName)
	if err != nil {
		return sum, err
	}
	defer cleanup()

	// The order service, and its relay.
	db, store, err := openOrders(ctx, databaseURL)
	if err != nil {
		return sum, err
	}
	defer db.Close()
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
	if err := payOrder(ctx, db, outbox, "42"); err != nil {
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
	points := inboxStore.DB()
	if err := points.QueryRowContext(ctx, `SELECT points FROM points WHERE user_id = 7`).Scan(&sum.Points); err != nil {
		return sum, err
	}
	if err := points.QueryRowContext(ctx, `SELECT COUNT(*) FROM consumed_operation WHERE consumer_name = 'points'`).Scan(&sum.Markers); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "order 42 paid; user 7 has %d points (deliveries: %d, applied: %d)\n", sum.Points, sum.Deliveries, sum.Markers)
	return sum, nil
}

// openOrders opens the order service's pool and creates its tables in its
// database: its orders, and ferry's outbox (what ferry migrate does).
func openOrders(ctx context.Context, databaseURL string) (*sql.DB, *ferrymysql.Store, error) {
	cfg, err := ferrymysql.ParseURL(databaseURL) // mysql://user:password@host:3306/db, as ferry migrate takes it
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	store, err := ferrymysql.New(db, nil) // EnqueueTx takes a *sql.Tx
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(20) PRIMARY KEY, user_id INT NOT NULL, points INT NOT NULL, status VARCHAR(10) NOT NULL)`)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `INSERT INTO orders (id, user_id, points, status) VALUES ('42', 7, 10, 'NEW')`)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

// startRelay starts a relay of the order service's outbox. Its publisher
// declares the exchange, the points queue (with its parking queue) and
// their binding, so that nothing it publishes comes back unroutable,
// whichever of relay and consumer starts first.
func startRelay(ctx context.Context, store *ferrymysql.Store, brokerURL, exchange string, queue ferryamqp.Queue) (*ferry.Relay, *ferryamqp.Publisher, error) {
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
// transaction: both commit, or neither does.
func payOrder(ctx context.Context, db *sql.DB, outbox *ferry.Outbox[*sql.Tx], orderID string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	var ev orderPaid
	err = tx.QueryRowContext(ctx, `SELECT id, user_id, points FROM orders WHERE id = ? AND status = 'NEW' FOR UPDATE`,
		orderID).Scan(&ev.OrderID, &ev.UserID, &ev.Points)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("order %s is not awaiting payment", orderID)
	} else if err != nil {
		return err
	}
	if err := ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE orders SET status = 'PAID' WHERE id = ?`, orderID)); err != nil {
		return err
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		AggregateType: "order", AggregateID: orderID, Type: "OrderPaid",
		Payload: payload, Destination: routingKey,
	}); err != nil {
		return err
	}
	return tx.Commit()
}

// startPoints starts the points service: its inbox tables and points table
// in its database, and a consumer of its queue that applies each OrderPaid
// event once.
func startPoints(ctx context.Context, databaseURL, brokerURL, exchange string, queue ferryamqp.Queue) (_ *ferryamqp.Consumer, _ *ferrymysql.Inbox, err error) {
	inboxStore, err := ferrymysql.OpenInbox(ctx, databaseURL, nil) // the markers and conflicts tables
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
	db := inboxStore.DB() // the pool OpenInbox opened, for the service's own tables
	if _, err := db.ExecContext(ctx, `CREATE TABLE points (user_id INT PRIMARY KEY, points INT NOT NULL)`); err != nil {
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO points (user_id, points) VALUES (7, 0)`); err != nil {
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
	award := func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var ev orderPaid
		if err := json.Unmarshal(d.Payload, &ev); err != nil {
			return err
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE points SET points = points + ? WHERE user_id = ?`, ev.Points, ev.UserID))
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

// prepare makes the program's database and returns the database URL that
// names it, and a function that drops it and deletes the exchange and the
// queues.
func prepare(ctx context.Context, databaseURL, brokerURL, database, exchange, queue string) (string, func(), error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", nil, errors.New("DATABASE_URL is not a mysql:// URL")
	}
	u.Path = "/" + database
	cfg, err := ferrymysql.ParseURL(databaseURL)
	if err != nil {
		return "", nil, err
	}
	server, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", nil, err
	}
	if _, err := server.ExecContext(ctx, "CREATE DATABASE "+database); err != nil {
		server.Close()
		return "", nil, err
	}
	return u.String(), func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = server.ExecContext(ctx, "DROP DATABASE "+database)
		server.Close()
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
