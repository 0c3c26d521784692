package ferry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
)

// A side effect outside the database — a text message — is enqueued as a
// task in the business transaction and executed afterwards with its own
// idempotency key, which the external service uses to do it once.
func ExampleNewTaskWorker() {
	ctx := context.Background()

	// An SMS gateway that honours Idempotency-Key.
	var mu sync.Mutex
	sent := map[string]bool{}
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent[r.Header.Get("Idempotency-Key")] = true
	}))
	defer gateway.Close()

	db := ferrymem.NewDB(nil)
	tasks, _ := ferrymem.New(db, &ferrymem.Config{Table: "ferry_task"})
	outbox, _ := ferry.NewOutbox(tasks, nil)
	tx, _ := db.Begin(ctx)
	// ... the business change ...
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{
		ID: "sms:order:42:paid", Type: "SendSMS", Payload: []byte(`{"to":"+100","text":"Order 42 is paid"}`),
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

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
	}, &ferry.TaskWorkerConfig{Relay: ferry.RelayConfig{Logger: quiet}})
	if err != nil {
		panic(err)
	}
	if _, err := worker.Drain(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(sent)
	// Output:
	// map[sms:order:42:paid:true]
}
