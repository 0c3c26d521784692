package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry"
)

// OrderService places orders: each order is created in one transaction
// (with its OrderCreated event) and paid in another (with OrderPaid). A few
// are rolled back on purpose after their event was enqueued: such an event
// must never reach anyone.
type OrderService struct {
	// Paid counts the payments this service committed (as far as it knows).
	Paid atomic.Int64

	DB     *DB
	Outbox *ferry.Outbox[*sql.Tx]
	// PoisonPct of the paid orders get an undecodable OrderPaid payload;
	// ConflictPct get a second, conflicting OrderPaid (another amount). Both
	// are recorded in shop_injected.
	PoisonPct, ConflictPct int
	// RollbackPct of the payments are rolled back after enqueueing.
	RollbackPct int
	// FaultPoint is called at "order.after-commit" after each committed
	// payment (a crash there must not lose the event).
	FaultPoint func(ctx context.Context, point string) error
}

// ConflictExtra is what a conflicting announcement adds to the amount.
const ConflictExtra = 1000

// FaultOrderAfterCommit is reached after an order's payment committed.
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
	poison := rand.IntN(100) < s.PoisonPct
	conflict := !poison && rand.IntN(100) < s.ConflictPct
	rollback := rand.IntN(100) < s.RollbackPct
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.DB.Q("UPDATE shop_order SET status = 'PAID' WHERE id = ?"), id); err != nil {
			return err
		}
		body, _ := json.Marshal(PaidPayload{OrderID: id, UserID: user, Amount: amount})
		if poison {
			body = []byte(fmt.Sprintf(`{"order_id":%d,"user_id":%d,"amount":"lots"}`, id, user))
		}
		events := []ferry.Event{{AggregateType: "order", AggregateID: agg, Type: OrderPaid, Payload: body, Destination: RoutePaid}}
		if conflict {
			// A bug upstream: the payment is announced again, with another
			// amount. Same business key, different fields.
			bad, _ := json.Marshal(PaidPayload{OrderID: id, UserID: user, Amount: amount + ConflictExtra})
			events = append(events, ferry.Event{AggregateType: "order", AggregateID: agg, Type: OrderPaid, Payload: bad, Destination: RoutePaid})
		}
		if _, err := s.Outbox.EnqueueTx(ctx, tx, events...); err != nil {
			return err
		}
		for kind, on := range map[string]bool{"poison": poison, "conflict": conflict} {
			if on {
				if _, err := tx.ExecContext(ctx, s.DB.Q("INSERT INTO shop_injected (order_id, kind) VALUES (?, ?)"), id, kind); err != nil {
					return err
				}
			}
		}
		if rollback {
			return errRolledBack
		}
		return nil
	})
	if err == errRolledBack {
		return false, nil
	}
	if err != nil {
		return false, s.unknownOrErr(err)
	}
	if s.FaultPoint != nil {
		if err := s.FaultPoint(ctx, FaultOrderAfterCommit); err != nil {
			return true, err
		}
	}
	return true, nil
}

var errRolledBack = fmt.Errorf("rolled back on purpose")

// unknownOrErr lets the order service go on after a transaction whose
// connection broke: its outcome is in the database.
func (s *OrderService) unknownOrErr(err error) error {
	if isConnectionError(err) {
		return nil
	}
	return err
}
