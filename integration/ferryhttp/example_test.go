package ferryhttp_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
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
