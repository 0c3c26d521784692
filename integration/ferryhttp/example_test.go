package ferryhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

// A payments endpoint that charges once per Idempotency-Key: the payment,
// its outbox event and the stored response commit together.
func ExampleKeys_Middleware() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryhttp-example-")
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	inbox, _ := ferrysqlite.NewInbox(store.DB(), nil)
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(ctx); err != nil { // the key table is an inbox table
		log.Fatal(err)
	}
	store.DB().Exec(`CREATE TABLE payment (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL)`)
	outbox, _ := ferry.NewOutbox(store, nil)
	keys, err := ferryhttp.New(inbox, nil)
	if err != nil {
		log.Fatal(err)
	}

	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := ferryhttp.Tx[*sql.Tx](r.Context()) // the request's transaction
		res, err := tx.ExecContext(r.Context(), `INSERT INTO payment (order_id, amount) VALUES ('42', 10)`)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back, key freed
			return
		}
		id, _ := res.LastInsertId()
		body := fmt.Sprintf(`{"payment_id":%d}`, id)
		if _, err := outbox.EnqueueTx(r.Context(), tx, ferry.Event{
			AggregateType: "order", AggregateID: "42", Type: "payment.captured", Payload: []byte(body),
		}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, body)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /payments", keys.Middleware(pay))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 { // a client retrying after a timeout
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(`{"order_id":"42","amount":10}`))
		req.Header.Set("Idempotency-Key", `"6f1c0b9e-order-42"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	var payments, events int
	store.DB().QueryRow(`SELECT count(*) FROM payment`).Scan(&payments)
	store.DB().QueryRow(`SELECT count(*) FROM outbox_event`).Scan(&events)
	fmt.Println("payments:", payments, "events:", events)
	// Output:
	// 201 replayed: false
	// 201 replayed: true
	// payments: 1 events: 1
}

// A handler hands a deadlock back with Fail: the middleware rolls the
// attempt back and runs it again in a new transaction. (Here the first
// attempt's "deadlock" is made up; TestDeadlockedHandlerIsRerunThroughFail
// makes real ones on MariaDB and PostgreSQL.)
func ExampleFail() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryhttp-example-")
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	inbox, _ := ferrysqlite.NewInbox(store.DB(), nil)
	if err := inbox.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	store.DB().Exec(`CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`)
	store.DB().Exec(`INSERT INTO account VALUES ('a', 100)`)
	keys, err := ferryhttp.New(inbox, &ferryhttp.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	attempts := 0
	debit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := ferryhttp.Tx[*sql.Tx](r.Context())
		attempts++
		_, err := tx.ExecContext(r.Context(), `UPDATE account SET balance = balance - 10 WHERE id = 'a'`)
		if err == nil && attempts == 1 {
			err = ferrytype.Classed(errors.New("deadlock detected"), ferrytype.ErrRetryable)
		}
		if err != nil {
			ferryhttp.Fail(r.Context(), err) // a deadlock: run again
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(keys.Middleware(debit))
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/debits", strings.NewReader(`{"account":"a","amount":10}`))
	req.Header.Set("Idempotency-Key", "debit-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	var balance int
	store.DB().QueryRow(`SELECT balance FROM account WHERE id = 'a'`).Scan(&balance)
	fmt.Println(resp.StatusCode, "attempts:", attempts, "balance:", balance)
	// Output:
	// 204 attempts: 2 balance: 90
}
