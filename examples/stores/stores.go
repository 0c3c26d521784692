// Package stores shows how a service opens ferry's store on each database
// and enqueues an event in its own transaction. docs/library.md quotes it;
// the test suite builds it and runs it against the real databases.
package stores

import (
	"context"
	"database/sql"
	"encoding/json"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver for database/sql
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver for database/sql

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
)

// PayMySQL marks an order paid and enqueues its event, in one MySQL or
// MariaDB transaction. dsn is the driver's form:
// "app:secret@tcp(127.0.0.1:3306)/shop?interpolateParams=true".
func PayMySQL(ctx context.Context, dsn string, orderID string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := ferrymysql.New(db, nil) // ferry migrate has created its tables
	if err != nil {
		return err
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, `UPDATE purchase_order SET status = 'PAID' WHERE id = ?`, orderID); err != nil {
		return err
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		AggregateType: "order", AggregateID: orderID, Type: "OrderPaid",
		Payload:     json.RawMessage(`{"orderId":"` + orderID + `"}`),
		Destination: "orders.paid", // the NATS subject, AMQP routing key or Kafka topic; default: the type
	}); err != nil {
		return err
	}
	return tx.Commit()
}

// PayPostgres does the same on PostgreSQL with a pgx pool: EnqueueTx takes
// the pgx.Tx. url: "postgres://app:secret@127.0.0.1:5432/shop".
func PayPostgres(ctx context.Context, url string, orderID string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := ferrypg.New(pool, nil)
	if err != nil {
		return err
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { // commits when the function returns nil
		if _, err := tx.Exec(ctx, `UPDATE purchase_order SET status = 'PAID' WHERE id = $1`, orderID); err != nil {
			return err
		}
		_, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: orderID,
			Type: "OrderPaid", Payload: json.RawMessage(`{"orderId":"` + orderID + `"}`), Destination: "orders.paid"})
		return err
	})
}

// PayPostgresStdlib does the same through database/sql and pgx's stdlib
// driver: ferrypg.NewStdlib, and EnqueueTx takes the *sql.Tx.
func PayPostgresStdlib(ctx context.Context, url string, orderID string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := ferrypg.NewStdlib(db, nil)
	if err != nil {
		return err
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE purchase_order SET status = 'PAID' WHERE id = $1`, orderID); err != nil {
		return err
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: orderID,
		Type: "OrderPaid", Payload: json.RawMessage(`{"orderId":"` + orderID + `"}`), Destination: "orders.paid"}); err != nil {
		return err
	}
	return tx.Commit()
}
