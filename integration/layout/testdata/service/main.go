// Orders is a service of its own that uses ferry as a user's module does:
// it writes an order and its event in one PostgreSQL transaction (ferrypg,
// through pgx), for a relay to publish to RabbitMQ (ferryamqp). The test
// in service_test.go builds it as a module outside ferry's workspace.
//
// DATABASE_URL names the database; OUTBOX_TABLE the outbox table.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	check(err)
	defer pool.Close()

	table := os.Getenv("OUTBOX_TABLE")
	store, err := ferrypg.New(pool, &ferrypg.Config{Table: table})
	check(err)
	check(store.Migrate(ctx))
	outbox, err := ferry.NewOutbox(store, nil)
	check(err)

	// The order and its event commit together, or neither does.
	var ids []string
	check(pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total_cents bigint NOT NULL)`)
		if err != nil {
			return err
		}
		var order int64
		if err := tx.QueryRow(ctx, `INSERT INTO orders (total_cents) VALUES ($1) RETURNING id`, 1999).Scan(&order); err != nil {
			return err
		}
		ids, err = outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: strconv.FormatInt(order, 10),
			Type: "OrderPlaced", Payload: json.RawMessage(`{"total_cents":1999}`), Destination: "orders.placed"})
		return err
	}))

	var n int
	check(pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n))
	// The publisher a relay would use: ferry.NewRelay(store, pub, nil) with
	// pub from ferryamqp.Dial(ctx, url, cfg).
	cfg := &ferryamqp.Config{Exchange: ferryamqp.DefaultExchange}
	fmt.Printf("enqueued %s; %s holds %d event(s), for %s\n", ids[0], table, n, cfg.Exchange)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
