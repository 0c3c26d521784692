package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
)

// OrderService places orders: each order is created in one transaction
// (with its OrderCreated event) and paid through the payments API
// (PaymentsHandler: the payment, OrderPaid and the stored response in one
// transaction, behind an Idempotency-Key). A few payments are declined on
// purpose after their event was enqueued: such an event must never reach
// anyone.
type OrderService struct {
	// Paid counts the payments this service committed (as far as it knows).
	Paid atomic.Int64

	DB       *DB
	Outbox   *ferry.Outbox[*sql.Tx]
	Payments *PaymentClient
	// PoisonPct of the paid orders get an undecodable OrderPaid payload;
	// ConflictPct get a second, conflicting OrderPaid (another amount). Both
	// are recorded in shop_injected.
	PoisonPct, ConflictPct int
	// RollbackPct of the payments are declined by the payments API after
	// enqueueing: rolled back.
	RollbackPct int
	// FaultPoint is called at "order.after-commit" after each payment the
	// API answered as committed, before the answer is recorded (a crash
	// there must not lose the event; the restarted service pays the order
	// again and must get the same answer).
	FaultPoint func(ctx context.Context, point string) error
}

// ConflictExtra is what a conflicting announcement adds to the amount.
const ConflictExtra = 1000

// FaultOrderAfterCommit is reached after an order's payment committed and
// was answered.
const FaultOrderAfterCommit = "order.after-commit"

// Place places orders first..last (ids), at most rate per second (0: no
// limit). It returns how many payments committed. A commit whose outcome
// is unknown (the connection died during COMMIT) is not retried: the
// database has the truth, and the checker reads it.
func (s *OrderService) Place(ctx context.Context, first, last int64, rate int) (int, error) {
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		tick = t.C
	}
	paid := 0
	for id := first; id <= last; id++ {
		if tick != nil {
			select {
			case <-ctx.Done():
				return paid, ctx.Err()
			case <-tick:
			}
		}
		if ctx.Err() != nil {
			return paid, ctx.Err()
		}
		ok, err := s.placeOne(ctx, id)
		if err != nil {
			return paid, fmt.Errorf("order %d: %w", id, err)
		}
		if ok {
			paid++
			s.Paid.Add(1)
		}
	}
	return paid, nil
}

func (s *OrderService) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *OrderService) placeOne(ctx context.Context, id int64) (bool, error) {
	user, amount := id%Users+1, id%97+1
	agg := strconv.FormatInt(id, 10)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.DB.Q("INSERT INTO shop_order (id, user_id, amount, status) VALUES (?, ?, ?, 'NEW')"), id, user, amount); err != nil {
			return err
		}
		_, err := s.Outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: agg, Type: OrderCreated,
			Payload: json.RawMessage(fmt.Sprintf(`{"order_id":%d,"user_id":%d}`, id, user)), Destination: RouteCreated})
		return err
	})
	if err != nil {
		return false, s.unknownOrErr(err)
	}
	paid, err := s.Pay(ctx, id)
	if err != nil || !paid {
		return false, err
	}
	return true, nil
}

// Pay pays order id through the payments API, records the answer in
// shop_payment_reply (the checker compares it with what committed), and
// reports whether the order is paid. The faults to inject are decided from
// the id, so paying an order again sends the same request.
func (s *OrderService) Pay(ctx context.Context, id int64) (bool, error) {
	req := PaymentRequest{UserID: id%Users + 1, Amount: id%97 + 1, Poison: injected(id, "poison", s.PoisonPct)}
	req.Conflict = !req.Poison && injected(id, "conflict", s.ConflictPct)
	req.Decline = injected(id, "decline", s.RollbackPct)
	reply, attempts, replayed, err := s.Payments.Pay(ctx, id, req)
	status := http.StatusCreated
	switch {
	case errors.Is(err, ErrDeclined):
		status = http.StatusPaymentRequired
	case err != nil:
		return false, err
	default:
		if s.FaultPoint != nil {
			if err := s.FaultPoint(ctx, FaultOrderAfterCommit); err != nil {
				return true, err
			}
		}
	}
	// One row per order. A plain INSERT takes no gap lock on MariaDB (a
	// DELETE of a missing row would, and two services recording at once
	// would deadlock); the row exists only when a restarted service paid
	// its last order again.
	args := []any{status, reply.PaymentID, attempts, replayed, id}
	_, err = s.DB.ExecContext(ctx, s.DB.Q("INSERT INTO shop_payment_reply (status, payment_id, attempts, replayed, order_id)"+
		" VALUES (?, ?, ?, ?, ?)"), args...)
	if err != nil && errors.Is(s.classify(err), ferrytype.ErrDuplicate) {
		_, err = s.DB.ExecContext(ctx, s.DB.Q("UPDATE shop_payment_reply SET status = ?, payment_id = ?, attempts = ?, replayed = ?"+
			" WHERE order_id = ?"), args...)
	}
	if err != nil {
		return status == http.StatusCreated, s.unknownOrErr(err)
	}
	return status == http.StatusCreated, nil
}

// classify puts a driver error in ferry's classes.
func (s *OrderService) classify(err error) error {
	ib, ierr := s.DB.Inbox()
	if ierr != nil {
		return err
	}
	return ib.Classify(err)
}

// unknownOrErr lets the order service go on after a transaction whose
// connection broke: its outcome is in the database.
func (s *OrderService) unknownOrErr(err error) error {
	if isConnectionError(err) {
		return nil
	}
	return err
}
