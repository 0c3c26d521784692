package ferry_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

// The seed's scenario: award 10 points for order 42's payment, exactly
// once, whatever the broker redelivers.
func ExampleInbox_Process() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferry-example-")
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "points.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	ib, _ := ferrysqlite.NewInbox(db, nil)
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	db.Exec(`CREATE TABLE points_account (user_id INTEGER PRIMARY KEY, points INTEGER NOT NULL)`)
	db.Exec(`INSERT INTO points_account VALUES (7, 0)`)

	inbox, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points-award"})
	if err != nil {
		log.Fatal(err)
	}
	award := func(user, amount int) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			// The effect check: no account, no effect, no marker.
			return ferry.ExpectResult(tx.ExecContext(ctx,
				`UPDATE points_account SET points = points + ? WHERE user_id = ?`, amount, user))
		}
	}
	deliver := func(eventID string, user, amount int) {
		op := ferry.Operation{
			Key:     "order:42:paid", // the business operation, not the message id
			EventID: eventID,
			Fields:  map[string]int{"user_id": user, "amount": amount},
		}
		res, err := inbox.Process(ctx, op, award(user, amount))
		fmt.Printf("%s: %s (err: %v)\n", eventID, res.Outcome, err != nil)
	}
	deliver("event-001", 7, 10) // first delivery
	deliver("event-002", 7, 10) // re-wrapped redelivery
	deliver("event-003", 7, 20) // same key, other amount

	var points int
	db.QueryRow(`SELECT points FROM points_account WHERE user_id = 7`).Scan(&points)
	fmt.Println("points:", points)
	// Output:
	// event-001: applied (err: false)
	// event-002: duplicate (err: false)
	// event-003: conflict (err: true)
	// points: 10
}

// A side effect outside the database — a text message — is enqueued as a
// task in the business transaction and executed afterwards with its own
// idempotency key, which the external service uses to do it once.
func ExampleNewTaskWorker() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferry-example-")
	defer os.RemoveAll(dir)

	// An SMS gateway that honours Idempotency-Key.
	var mu sync.Mutex
	sent := map[string]bool{}
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent[r.Header.Get("Idempotency-Key")] = true
	}))
	defer gateway.Close()

	tasks, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), &ferrysqlite.Config{Table: "ferry_task"})
	if err != nil {
		log.Fatal(err)
	}
	defer tasks.Close()
	if err := tasks.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, _ := ferry.NewOutbox(tasks, nil)
	tx, _ := tasks.DB().BeginTx(ctx, nil)
	// ... the business change ...
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		ID: "sms:order:42:paid", Type: "SendSMS", Payload: []byte(`{"to":"+100","text":"Order 42 is paid"}`),
	}); err != nil {
		log.Fatal(err)
	}
	tx.Commit()

	worker, err := ferry.NewTaskWorker(tasks, map[string]ferry.TaskHandler{
		"SendSMS": func(ctx context.Context, task ferry.Task) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gateway.URL, nil)
			req.Header.Set("Idempotency-Key", task.Key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err // retried with the same key
			}
			resp.Body.Close()
			return nil
		},
	}, &ferry.TaskWorkerConfig{Relay: ferry.RelayConfig{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := worker.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(sent)
	// Output:
	// map[sms:order:42:paid:true]
}
