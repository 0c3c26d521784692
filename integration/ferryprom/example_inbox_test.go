package ferryprom_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

// A consumer's metrics: the inbox reports each operation's outcome through
// its hook, and the wrapped broker handler reports each delivery's result.
// ferryamqp's and ferrynats' consumers report it through their hooks
// instead (ConsumerConfig.Hooks: []ferrybroker.Hook{metrics}), with what
// they did with each delivery; here the deliveries are handed to a
// wrapped handler directly.
func ExampleConsumerMetrics() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferryprom-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "points.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	inboxTables, err := ferrysqlite.NewInbox(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := inboxTables.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE points_account (user_id INTEGER PRIMARY KEY, points INTEGER NOT NULL);
		INSERT INTO points_account VALUES (7, 0)`); err != nil {
		log.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	metrics, err := ferryprom.NewConsumerMetrics(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	inbox, err := ferry.NewInbox(inboxTables, &ferry.InboxConfig{Consumer: "points-award", Hooks: []ferry.Hook{metrics}})
	if err != nil {
		log.Fatal(err)
	}
	type paid struct{ OrderID, UserID, Amount int }
	handler := metrics.Handler("points-award", ferry.InboxHandler(inbox,
		func(d *ferrybroker.Delivery) (ferry.Operation, error) {
			var p paid
			err := json.Unmarshal(d.Payload, &p)
			return ferry.Operation{Key: fmt.Sprintf("order:%d:paid", p.OrderID),
				Fields: map[string]int{"user_id": p.UserID, "amount": p.Amount}}, err
		},
		func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
			var p paid
			_ = json.Unmarshal(d.Payload, &p)
			return ferry.ExpectResult(tx.ExecContext(ctx,
				`UPDATE points_account SET points = points + ? WHERE user_id = ?`, p.Amount, p.UserID))
		}))

	for i, body := range []string{
		`{"OrderID":42,"UserID":7,"Amount":10}`, // applied
		`{"OrderID":42,"UserID":7,"Amount":10}`, // a redelivery: duplicate
		`{"OrderID":42,"UserID":7,"Amount":99}`, // same key, other amount: conflict, parked
		`{"OrderID":43,"UserID":8,"Amount":10}`, // no such account: rolled back, retried later
		`{"OrderID":`,                           // undecodable: parked
	} {
		_ = handler(ctx, &ferrybroker.Delivery{MessageID: fmt.Sprint("event-", i), Payload: []byte(body)})
	}
	printMetrics(reg, "points-award", "ferry_inbox_operations_total", "ferry_consumer_deliveries_total")
	// Output:
	// points-award: ferry_inbox_operations_total{outcome="applied"} 1
	// points-award: ferry_inbox_operations_total{outcome="conflict"} 1
	// points-award: ferry_inbox_operations_total{outcome="duplicate"} 1
	// points-award: ferry_inbox_operations_total{outcome="stale"} 0
	// points-award: ferry_consumer_deliveries_total{result="canceled"} 0
	// points-award: ferry_consumer_deliveries_total{result="ok"} 2
	// points-award: ferry_consumer_deliveries_total{result="poison"} 2
	// points-award: ferry_consumer_deliveries_total{result="transient"} 1
}
