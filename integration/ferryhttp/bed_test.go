package ferryhttp_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/sqlstore"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// bed is a payments service on one database: a payment table, an outbox,
// and the idempotency keys, all on the same *sql.DB.
type bed struct {
	kind     string
	db       *sql.DB
	outbox   *ferry.Outbox[*sql.Tx]
	keys     ferrystore.IdempotencyDriver[*sql.Tx]
	payments string
	tables   tables

	mu sync.Mutex
	// entered, when set, is closed by the next payment handler once its
	// writes are made; the handler then waits for release.
	entered, release chan struct{}
}

// tables names what a child process opens.
type tables struct {
	Outbox, Markers, Conflicts, Versions, Keys, Payments string
}

// newBed builds a bed on kind's test database.
func newBed(t testing.TB, kind string) *bed {
	t.Helper()
	st := testsvc.Store(t, kind)
	m, c, v := testsvc.InboxTables()
	tb := tables{Outbox: st.Driver.Table(), Markers: m, Conflicts: c, Versions: v, Keys: m + "k", Payments: testsvc.Name("pay_")}
	keys, err := openKeys(kind, st.DB, tb)
	require.NoError(t, err)
	exec := func(q string) error { _, err := st.DB.Exec(q); return err }
	testsvc.MigratedInbox(t, keys, exec, m, m, c, v, tb.Keys)
	require.NoError(t, exec("CREATE TABLE "+tb.Payments+" (id VARCHAR(64) PRIMARY KEY, order_id VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + tb.Payments) })
	ob, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	return &bed{kind: kind, db: st.DB, outbox: ob, keys: keys, payments: tb.Payments, tables: tb}
}

func openKeys(kind string, db *sql.DB, tb tables) (ferrystore.IdempotencyDriver[*sql.Tx], error) {
	switch kind {
	case "mysql":
		return ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: tb.Markers, ConflictTable: tb.Conflicts, VersionTable: tb.Versions, KeyTable: tb.Keys})
	case "postgres":
		return ferrypg.NewStdlibInbox(db, &ferrypg.InboxConfig{MarkerTable: tb.Markers, ConflictTable: tb.Conflicts, VersionTable: tb.Versions, KeyTable: tb.Keys})
	default:
		return ferrysqlite.NewInbox(db, &ferrysqlite.InboxConfig{MarkerTable: tb.Markers, ConflictTable: tb.Conflicts, VersionTable: tb.Versions, KeyTable: tb.Keys})
	}
}

func (b *bed) q(s string) string { return sqlstore.Rebind(b.kind, s) }

type payment struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// paymentResult is the handler's 201 body.
type paymentResult struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"`
}

// handler is the payments API: POST /payments charges an order (a payment
// row and a payment.captured event) and answers 201 with a payment id made
// up on the spot, so a replay is told from a second execution. The
// X-Test-Status header makes it answer with another status after its
// writes (they must then be rolled back, or kept, as Config says).
func (b *bed) handler(k *ferryhttp.Keys[*sql.Tx]) http.Handler {
	mux := http.NewServeMux()
	// Wrapped per route, so that the middleware sees the route's pattern.
	mux.Handle("POST /payments", k.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p payment
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.OrderID == "" || p.Amount <= 0 {
			http.Error(w, "order_id and a positive amount are required", http.StatusBadRequest)
			return
		}
		tx, ok := ferryhttp.Tx[*sql.Tx](r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		id := "pay_" + randHex()
		if _, err := tx.ExecContext(r.Context(), b.q("INSERT INTO "+b.payments+" (id, order_id, amount) VALUES (?, ?, ?)"), id, p.OrderID, p.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res := paymentResult{PaymentID: id, OrderID: p.OrderID, Amount: p.Amount}
		payload, _ := json.Marshal(res)
		if _, err := b.outbox.EnqueueTx(r.Context(), tx, ferry.Event{
			AggregateType: "order", AggregateID: p.OrderID, Type: "payment.captured", Payload: payload,
		}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b.mu.Lock()
		entered, release := b.entered, b.release
		b.entered, b.release = nil, nil
		b.mu.Unlock()
		if entered != nil {
			close(entered)
			<-release
		}
		if r.Header.Get("X-Test-Crash") == "in-handler" {
			crash()
		}
		status := http.StatusCreated
		if s := r.Header.Get("X-Test-Status"); s != "" {
			fmt.Sscan(s, &status)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/"+id)
		http.SetCookie(w, &http.Cookie{Name: "session", Value: randHex()})
		w.WriteHeader(status)
		_, _ = w.Write(payload)
	})))
	return mux
}

// hold makes the next payment handler wait after its writes: entered is
// closed when it got there, and it goes on when release is called (at the
// latest when the test ends, so that a failing test does not leave its
// server waiting for the handler).
func (b *bed) hold(t *testing.T) (entered chan struct{}, release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entered, b.release = make(chan struct{}), make(chan struct{})
	rel := b.release
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	t.Cleanup(release)
	return b.entered, release
}

func (b *bed) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	require.NoError(t, b.db.QueryRow(b.q(q), args...).Scan(&n))
	return n
}

// charged counts the payment rows of an order.
func (b *bed) charged(t *testing.T, order string) int {
	return b.count(t, b.payments, "order_id = ?", order)
}

// events counts the outbox events of an order.
func (b *bed) events(t *testing.T, order string) int {
	return b.count(t, b.tables.Outbox, "aggregate_id = ?", order)
}

func (b *bed) newKeys(t testing.TB, mod ...func(*ferryhttp.Config)) *ferryhttp.Keys[*sql.Tx] {
	t.Helper()
	cfg := &ferryhttp.Config{}
	for _, m := range mod {
		m(cfg)
	}
	k, err := ferryhttp.New(b.keys, cfg)
	require.NoError(t, err)
	return k
}

// reply is one response, read whole.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) payment(t *testing.T) paymentResult {
	t.Helper()
	var p paymentResult
	require.NoError(t, json.Unmarshal(r.Body, &p), "body %q", r.Body)
	return p
}

func (r reply) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(r.Body, &p)
	return strings.TrimPrefix(p.Type, ferryhttp.ProblemType)
}

// post sends a payment request to url with key (none when empty).
func post(t *testing.T, url, key, body string, header ...string) reply {
	t.Helper()
	r, err := send(url, key, body, header...)
	require.NoError(t, err)
	return r
}

func send(url, key, body string, header ...string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(ferryhttp.HeaderKey, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func crash() {
	p, _ := os.FindProcess(os.Getpid())
	_ = p.Kill()
	select {}
}

// forEachStore runs f on MariaDB, PostgreSQL and SQLite.
func forEachStore(t *testing.T, f func(t *testing.T, b *bed)) {
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) { f(t, newBed(t, kind)) })
	}
}
