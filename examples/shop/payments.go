package shop

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferryhttp"
)

// FaultPaymentInHandler is reached inside the payments API's handler, its
// writes made and not committed: a crash there leaves the request's key
// claimed by a dead process until its lease runs out; the client's retry
// then takes it over.
const FaultPaymentInHandler = "payment.in-handler"

// PaymentRequest is the body of POST /orders/{id}/payment. Its flags are
// the faults the order service injects on purpose, decided per order so
// that a retry sends the very same request.
type PaymentRequest struct {
	UserID int64 `json:"user_id"`
	Amount int64 `json:"amount"`
	// Poison announces the payment with an undecodable event, Conflict
	// announces it twice with another amount, Decline refuses it (402,
	// after the writes: they must be rolled back with their events).
	Poison   bool `json:"poison,omitempty"`
	Conflict bool `json:"conflict,omitempty"`
	Decline  bool `json:"decline,omitempty"`
}

// PaymentReply is the payments API's 201 body. PaymentID is made up by the
// execution, so a replay is told from a second execution.
type PaymentReply struct {
	PaymentID string `json:"payment_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
}

// PaymentsOptions configure the payments API.
type PaymentsOptions struct {
	// Lease is the idempotency keys' lease (ferryhttp.Config.Lease).
	Lease time.Duration
	// SlowPct of the payments take 200 to 400 ms more inside their
	// transaction, so that clients time out and retry while they run.
	SlowPct int
	// FaultPoint is called at FaultPaymentInHandler and, set in each
	// request's context, at ferryhttp's ferryfault.HTTPAfterCommit.
	FaultPoint func(ctx context.Context, point string) error
}

// PaymentsHandler is the order service's payments API on the orders
// database: POST /orders/{id}/payment, behind ferryhttp's Idempotency-Key
// middleware. A payment records a shop_payment row (deliberately without a
// unique key per order, so that a second charge would show), marks the
// order PAID and enqueues OrderPaid, and the response is stored with them:
// one transaction.
func PaymentsHandler(db *DB, o PaymentsOptions) (http.Handler, error) {
	ib, err := db.Inbox()
	if err != nil {
		return nil, err
	}
	store, err := db.Outbox("")
	if err != nil {
		return nil, err
	}
	ob, err := ferry.NewOutbox(store, nil)
	if err != nil {
		return nil, err
	}
	keys, err := ferryhttp.New(ib, &ferryhttp.Config{Lease: o.Lease, Logger: EnvLogger()})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/payment", keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		var req PaymentRequest
		if err == nil {
			err = json.NewDecoder(r.Body).Decode(&req)
		}
		if err != nil || req.Amount <= 0 {
			http.Error(w, "an order id and a positive amount are required", http.StatusBadRequest)
			return
		}
		tx, _ := ferryhttp.Tx[*sql.Tx](ctx)
		if err := pay(ctx, db, ob, tx, id, req); err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, ferry.ErrNoEffect) {
				status = http.StatusNotFound
			}
			http.Error(w, err.Error(), status)
			return
		}
		payID := newPaymentID()
		if _, err := tx.ExecContext(ctx, db.Q("INSERT INTO shop_payment (id, order_id, amount) VALUES (?, ?, ?)"), payID, id, req.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if o.SlowPct > 0 && rand.IntN(100) < o.SlowPct {
			select {
			case <-ctx.Done():
			case <-time.After(200*time.Millisecond + rand.N(200*time.Millisecond)):
			}
		}
		if o.FaultPoint != nil {
			if err := o.FaultPoint(ctx, FaultPaymentInHandler); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if req.Decline {
			// After the writes: the middleware must roll them back.
			w.WriteHeader(http.StatusPaymentRequired)
			fmt.Fprint(w, `{"declined":true}`)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d/payment/%s", id, payID))
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(PaymentReply{PaymentID: payID, OrderID: id, Amount: req.Amount})
	})))
	if o.FaultPoint == nil {
		return mux, nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(ferryfault.With(r.Context(), o.FaultPoint)))
	}), nil
}

// pay marks the order paid and announces it, in tx.
func pay(ctx context.Context, db *DB, ob *ferry.Outbox[*sql.Tx], tx *sql.Tx, id int64, req PaymentRequest) error {
	if err := ferry.ExpectResult(tx.ExecContext(ctx, db.Q("UPDATE shop_order SET status = 'PAID' WHERE id = ?"), id)); err != nil {
		return err
	}
	agg := strconv.FormatInt(id, 10)
	body, _ := json.Marshal(PaidPayload{OrderID: id, UserID: req.UserID, Amount: req.Amount})
	if req.Poison {
		body = []byte(fmt.Sprintf(`{"order_id":%d,"user_id":%d,"amount":"lots"}`, id, req.UserID))
	}
	events := []ferry.Event{{AggregateType: "order", AggregateID: agg, Type: OrderPaid, Payload: body, Destination: RoutePaid}}
	if req.Conflict {
		// A bug upstream: the payment is announced again, with another
		// amount. Same business key, different fields.
		bad, _ := json.Marshal(PaidPayload{OrderID: id, UserID: req.UserID, Amount: req.Amount + ConflictExtra})
		events = append(events, ferry.Event{AggregateType: "order", AggregateID: agg, Type: OrderPaid, Payload: bad, Destination: RoutePaid})
	}
	if _, err := ob.EnqueueTx(ctx, tx, events...); err != nil {
		return err
	}
	for kind, on := range map[string]bool{"poison": req.Poison, "conflict": req.Conflict} {
		if on {
			if _, err := tx.ExecContext(ctx, db.Q("INSERT INTO shop_injected (order_id, kind) VALUES (?, ?)"), id, kind); err != nil {
				return err
			}
		}
	}
	return nil
}

func newPaymentID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return "pay_" + hex.EncodeToString(b[:])
}

// ServePayments serves the payments API on ln until ctx ends.
func ServePayments(ctx context.Context, ln net.Listener, db *DB, o PaymentsOptions) error {
	h, err := PaymentsHandler(db, o)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// PaymentClient pays orders through the payments API the way a careful
// client does: one Idempotency-Key per payment, reused on every retry, a
// timeout per attempt that grows, and retries after timeouts, broken
// connections, 409 and 5xx until the API answers.
type PaymentClient struct {
	URL string
	// Timeout is the first attempt's timeout; each retry doubles it, up
	// to 5 s. Default 2 s.
	Timeout time.Duration
	// Counters: attempts beyond the first, replayed answers, 409s, 5xx.
	Retries, Replays, InProgress, ServerErrors atomic.Int64
}

// ErrDeclined is a payment the API refused (402).
var ErrDeclined = errors.New("payment declined")

// Key is the idempotency key of order id's payment.
func (c *PaymentClient) Key(id int64) string { return fmt.Sprintf("order-%d-payment", id) }

// Pay pays order id and returns the API's answer, the number of attempts
// and whether the answer was a replay. ErrDeclined for a 402.
func (c *PaymentClient) Pay(ctx context.Context, id int64, req PaymentRequest) (PaymentReply, int, bool, error) {
	body, _ := json.Marshal(req)
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			c.Retries.Add(1)
		}
		status, header, resp, err := c.post(ctx, id, body, timeout)
		if ctx.Err() != nil {
			return PaymentReply{}, attempt, false, ctx.Err()
		}
		switch {
		case err != nil || status >= 500:
			// No answer, or the request failed and was rolled back (a
			// deadlock, a database outage): the same key again.
			timeout = min(2*timeout, 5*time.Second)
			if err == nil {
				c.ServerErrors.Add(1)
			}
		case status == http.StatusConflict:
			c.InProgress.Add(1)
		case status == http.StatusCreated:
			var r PaymentReply
			if err := json.Unmarshal(resp, &r); err != nil {
				return PaymentReply{}, attempt, false, fmt.Errorf("order %d: payment reply %q: %w", id, resp, err)
			}
			replayed := header.Get(ferryhttp.HeaderReplayed) == "true"
			if replayed {
				c.Replays.Add(1)
			}
			return r, attempt, replayed, nil
		case status == http.StatusPaymentRequired:
			return PaymentReply{}, attempt, false, ErrDeclined
		default:
			return PaymentReply{}, attempt, false, fmt.Errorf("order %d: payments API answered %d: %s", id, status, bytes.TrimSpace(resp))
		}
		select {
		case <-ctx.Done():
			return PaymentReply{}, attempt, false, ctx.Err()
		case <-time.After(50*time.Millisecond + rand.N(100*time.Millisecond)):
		}
	}
}

func (c *PaymentClient) post(ctx context.Context, id int64, body []byte, timeout time.Duration) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/orders/%d/payment", c.URL, id), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ferryhttp.HeaderKey, strconv.Quote(c.Key(id)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// injected decides, from the order id alone, whether order id gets the
// fault kind: a resumed order service sends the same request again.
func injected(id int64, kind string, pct int) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s:%d", kind, id)
	return int(h.Sum32()%100) < pct
}
