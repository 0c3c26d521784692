package relaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
)

// TasksExecuteEachKeyOnceAcrossCrashes: side effects outside the database
// are tasks enqueued in the business transaction and executed at least
// once with their own idempotency key: across worker crashes (a batch
// executed and not recorded) and failed calls, the gateway executes each
// key exactly once.
func TasksExecuteEachKeyOnceAcrossCrashes[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t) // the task table is an outbox table
	ctx := e.Ctx
	tasks := e.Outbox
	gw := newSMSGateway(t)
	const orders = 200
	for i := 1; i <= orders; i++ {
		key := fmt.Sprintf("sms:order:%d:paid", i)
		if i%10 == 0 {
			gw.failOnce[key] = true
		}
		tx, commit, rollback := e.Begin(ctx)
		// ... the business change of order i would be written here ...
		_, err := tasks.EnqueueTx(ctx, tx, ferry.Event{ID: key, Type: "SendSMS",
			Payload: json.RawMessage(fmt.Sprintf(`{"order_id":%d,"text":"Order %d is paid"}`, i, i))})
		if err != nil {
			_ = rollback()
		}
		require.NoError(t, err)
		require.NoError(t, commit())
	}
	var crashes atomic.Int64
	w, err := ferry.NewTaskWorker(e.Store, map[string]ferry.TaskHandler{"SendSMS": sendSMS(gw.srv.URL)}, &ferry.TaskWorkerConfig{
		Relay: ferry.RelayConfig{
			BatchSize: 20, Lease: 500 * time.Millisecond, PublishTimeout: 400 * time.Millisecond,
			SweepInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: fastRetry(),
		},
	})
	require.NoError(t, err)
	// The worker "crashes" after executing its first three
	// batches, before recording them.
	_, err = w.Drain(ferryfault.With(ctx, func(_ context.Context, point string) error {
		if point == ferryfault.RelayAfterPublish && crashes.Add(1) <= 3 {
			return errors.New("worker crashed")
		}
		return nil
	}))
	require.NoError(t, err)

	gw.mu.Lock()
	defer gw.mu.Unlock()
	require.Len(t, gw.executed, orders, "every task ran")
	calls := 0
	for key, n := range gw.executed {
		require.Equal(t, 1, n, "key %s executed %d times", key, n)
		calls += gw.calls[key]
	}
	require.Greater(t, calls, orders+orders/10, "crashes and failures made the worker call again (not a vacuous run)")
	st2 := w.Stats()
	require.Equal(t, int64(orders), st2.Confirmed)
	require.Zero(t, st2.Dead)
}

// TaskWithoutHandlerIsDead: a task of a type no handler takes is DEAD at
// once, with the reason.
func TaskWithoutHandlerIsDead[TTx any](t *testing.T, setup Setup[TTx]) {
	e := setup(t)
	ctx := e.Ctx
	e.EnqueueEvents(t, ferry.Event{ID: "fax:1", Type: "SendFax", Payload: json.RawMessage(`{}`)})
	w, err := ferry.NewTaskWorker(e.Store, map[string]ferry.TaskHandler{"SendSMS": func(context.Context, ferry.Task) error { return nil }},
		&ferry.TaskWorkerConfig{Relay: ferry.RelayConfig{PollInterval: 10 * time.Millisecond}})
	require.NoError(t, err)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	row, err := e.Store.Get(ctx, "fax:1")
	require.NoError(t, err)
	require.Equal(t, ferrytype.StatusDead, row.Status)
	require.Contains(t, row.LastError, `no handler for task type "SendFax"`)
}

// smsGateway is an external service that honours idempotency keys, as
// payment and messaging APIs do: a key it has executed is answered again
// without a second execution. It counts both.
type smsGateway struct {
	mu       sync.Mutex
	calls    map[string]int
	executed map[string]int
	failOnce map[string]bool // keys whose first call fails with 503
	srv      *httptest.Server
}

func newSMSGateway(t testing.TB) *smsGateway {
	g := &smsGateway{calls: map[string]int{}, executed: map[string]int{}, failOnce: map[string]bool{}}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.calls[key]++
		if g.failOnce[key] {
			delete(g.failOnce, key)
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if g.executed[key] == 0 {
			g.executed[key]++ // the text message goes out here, once
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// sendSMS is the task handler: it calls the gateway with the task's key.
func sendSMS(url string) ferry.TaskHandler {
	return func(ctx context.Context, task ferry.Task) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			return ferrytype.Poison(err)
		}
		req.Header.Set("Idempotency-Key", task.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode >= 500:
			return fmt.Errorf("sms gateway: %s", resp.Status)
		}
		return ferrytype.Poison(fmt.Errorf("sms gateway refused: %s", resp.Status))
	}
}
