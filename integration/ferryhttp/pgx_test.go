package ferryhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// pgxBed is the payments service on pgx: the handler's transaction is a
// pgx.Tx, the outbox and the key table are ferrypg's pgx stores on one pool.
type pgxBed struct {
	pool     *pgxpool.Pool
	outbox   *ferry.Outbox[pgx.Tx]
	keys     *ferryhttp.Keys[pgx.Tx]
	table    string // the outbox table
	payments string
	accounts string
	// entries counts the handler's runs past their first update, victims
	// the runs whose second update failed (a deadlock's victims); the
	// first two transfers wait for each other at both (see
	// TestPgxHandlers).
	entries atomic.Int32
	victims atomic.Int32
	both    chan struct{}
	once    sync.Once
	logs    testsvc.LogBuffer // the middleware's log: each rerun and its error
}

func newPgxBed(t *testing.T) *pgxBed {
	t.Helper()
	pool := testsvc.Postgres(t)
	table := testsvc.Name("ft_")
	st, err := ferrypg.New(pool, &ferrypg.Config{Table: table})
	require.NoError(t, err)
	exec := func(q string) error { _, err := pool.Exec(context.Background(), q); return err }
	testsvc.Migrated(t, st, exec)
	m, c, v := testsvc.InboxTables()
	inbox, err := ferrypg.NewInbox(pool, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: m + "k"})
	require.NoError(t, err)
	testsvc.MigratedInbox(t, inbox, exec, m, m, c, v, m+"k")
	b := &pgxBed{pool: pool, table: table, payments: testsvc.Name("pay_"), accounts: testsvc.Name("acct_"), both: make(chan struct{})}
	require.NoError(t, exec("CREATE TABLE "+b.payments+" (id bigserial PRIMARY KEY, order_id text NOT NULL, amount bigint NOT NULL)"))
	require.NoError(t, exec("CREATE TABLE "+b.accounts+" (id text PRIMARY KEY, balance bigint NOT NULL)"))
	require.NoError(t, exec("INSERT INTO "+b.accounts+" VALUES ('a', 100), ('b', 100)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + b.payments); _ = exec("DROP TABLE " + b.accounts) })
	b.outbox, err = ferry.NewOutbox(st, nil)
	require.NoError(t, err)
	b.keys, err = ferryhttp.New(inbox, &ferryhttp.Config{Logger: slog.New(slog.NewTextHandler(&b.logs, nil))})
	require.NoError(t, err)
	return b
}

func (b *pgxBed) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /payments", b.keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p payment
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.OrderID == "" || p.Amount <= 0 {
			http.Error(w, "order_id and a positive amount are required", http.StatusBadRequest)
			return
		}
		tx, ok := ferryhttp.Tx[pgx.Tx](r.Context())
		if !ok {
			http.Error(w, "no pgx transaction", http.StatusInternalServerError)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO "+b.payments+" (order_id, amount) VALUES ($1, $2) RETURNING id",
			p.OrderID, p.Amount).Scan(&id); err != nil {
			ferryhttp.Fail(r.Context(), err)
			return
		}
		body := fmt.Sprintf(`{"payment_id":"%d","order_id":%q,"amount":%d}`, id, p.OrderID, p.Amount)
		if _, err := b.outbox.EnqueueTx(r.Context(), tx, ferry.Event{
			AggregateType: "order", AggregateID: p.OrderID, Type: "payment.captured", Payload: []byte(body),
		}); err != nil {
			ferryhttp.Fail(r.Context(), err)
			return
		}
		if s := r.Header.Get("X-Test-Status"); s != "" {
			var status int
			fmt.Sscan(s, &status)
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, body)
	})))
	mux.Handle("POST /transfers", b.keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr struct {
			From, To string
			Amount   int
		}
		_ = json.NewDecoder(r.Body).Decode(&tr)
		tx, _ := ferryhttp.Tx[pgx.Tx](r.Context())
		move := "UPDATE " + b.accounts + " SET balance = balance + $1 WHERE id = $2"
		if _, err := tx.Exec(r.Context(), move, -tr.Amount, tr.From); err != nil {
			ferryhttp.Fail(r.Context(), err)
			return
		}
		if b.entries.Add(1) <= 2 {
			if b.entries.Load() == 2 {
				b.once.Do(func() { close(b.both) })
			}
			select {
			case <-b.both:
			case <-time.After(20 * time.Second):
			}
		}
		if _, err := tx.Exec(r.Context(), move, tr.Amount, tr.To); err != nil {
			b.victims.Add(1)
			ferryhttp.Fail(r.Context(), err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	return mux
}

func (b *pgxBed) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

// The middleware over pgx.Tx handlers (ferrypg.NewInbox on a pgxpool, not
// database/sql): replays, rollback of a 5xx with its event, 422, and a
// real deadlock (40P01 through pgx's error type) rerun through Fail.
func TestPgxHandlers(t *testing.T) {
	t.Parallel()
	b := newPgxBed(t)
	srv := httptest.NewServer(b.handler())
	t.Cleanup(srv.Close)
	charged := func(order string) int {
		return b.count(t, "SELECT count(*) FROM "+b.payments+" WHERE order_id = $1", order)
	}
	events := func(order string) int {
		return b.count(t, "SELECT count(*) FROM "+b.table+" WHERE aggregate_id = $1", order)
	}

	first := post(t, srv.URL, "k-1", `{"order_id":"o-1","amount":10}`)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	again := post(t, srv.URL, "k-1", `{ "amount": 1e1, "order_id": "o-1" }`)
	require.Equal(t, "true", again.Header.Get(ferryhttp.HeaderReplayed))
	require.Equal(t, first.Body, again.Body)
	require.Equal(t, 1, charged("o-1"))
	require.Equal(t, 1, events("o-1"), "the event committed with the payment, in the pgx transaction")

	require.Equal(t, http.StatusUnprocessableEntity, post(t, srv.URL, "k-1", `{"order_id":"o-1","amount":11}`).Status)

	failed := post(t, srv.URL, "k-2", `{"order_id":"o-2","amount":10}`, "X-Test-Status", "503")
	require.Equal(t, http.StatusServiceUnavailable, failed.Status)
	require.Equal(t, 0, charged("o-2"), "a 5xx rolls the pgx transaction back")
	require.Equal(t, 0, events("o-2"))
	retried := post(t, srv.URL, "k-2", `{"order_id":"o-2","amount":10}`)
	require.Equal(t, http.StatusCreated, retried.Status, "the key was released")
	require.Equal(t, 1, charged("o-2"))
	require.Equal(t, 1, events("o-2"))

	// Two opposite transfers deadlock; PostgreSQL fails one (40P01),
	// its handler hands the pgx error back, and it is rerun.
	var wg sync.WaitGroup
	replies := make([]reply, 2)
	for i, body := range []string{`{"From":"a","To":"b","Amount":10}`, `{"From":"b","To":"a","Amount":3}`} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
			req.Header.Set(ferryhttp.HeaderKey, fmt.Sprintf("t-%d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				replies[i].Status = -1
				return
			}
			resp.Body.Close()
			replies[i].Status = resp.StatusCode
		}()
	}
	wg.Wait()
	require.Equal(t, []int{http.StatusCreated, http.StatusCreated}, []int{replies[0].Status, replies[1].Status})
	// One victim or more: a victim's rerun may take its source row before
	// the winner, woken from its wait for that row, takes it, and deadlock
	// with it again (seen under load). What holds under any scheduling:
	// every victim ran again, once per deadlock, and each transfer applied
	// once (the balances).
	victims := b.victims.Load()
	t.Logf("deadlock victims: %d", victims)
	require.GreaterOrEqual(t, victims, int32(1), "a transfer was the deadlock's victim; the middleware's log:\n%s", b.logs.String())
	require.Equal(t, 2+victims, b.entries.Load(), "each victim ran again, once per deadlock; the middleware's log:\n%s", b.logs.String())
	require.Equal(t, 93, b.count(t, "SELECT balance FROM "+b.accounts+" WHERE id = 'a'"))
	require.Equal(t, 107, b.count(t, "SELECT balance FROM "+b.accounts+" WHERE id = 'b'"))
}
