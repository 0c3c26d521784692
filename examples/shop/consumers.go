package shop

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// DecodePaid maps an OrderPaid delivery to its business operation. The key
// is the order's payment, not the message id: a re-wrapped or republished
// event is the same operation. An undecodable payload is an error (the
// inbox handler parks it as poison).
func DecodePaid(d *ferrybroker.Delivery) (ferry.Operation, error) {
	p, err := decodePaid(d.Payload)
	if err != nil {
		return ferry.Operation{}, err
	}
	return ferry.Operation{
		Key:    fmt.Sprintf("order:%d:paid", p.OrderID),
		Fields: map[string]int64{"user_id": p.UserID, "amount": p.Amount},
	}, nil
}

func decodePaid(b []byte) (PaidPayload, error) {
	var p PaidPayload
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("OrderPaid payload: %w", err)
	}
	if p.OrderID <= 0 || p.UserID <= 0 || p.Amount <= 0 {
		return p, errors.New("OrderPaid payload: order_id, user_id and amount must be positive")
	}
	return p, nil
}

// PointsHandler awards an order's points through inbox: the points and
// the award log row commit with the inbox marker.
func PointsHandler(db *DB, inbox *ferry.Inbox[*sql.Tx]) ferrybroker.Handler {
	return ferry.InboxHandler(inbox, DecodePaid, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		p, err := decodePaid(d.Payload)
		if err != nil {
			return ferrytype.Poison(err)
		}
		if err := ferry.ExpectResult(tx.ExecContext(ctx, db.Q("UPDATE points_account SET points = points + ? WHERE user_id = ?"),
			p.Amount, p.UserID)); err != nil {
			return fmt.Errorf("%w: user %d: %w", errNoAccount, p.UserID, err)
		}
		_, err = tx.ExecContext(ctx, db.Q("INSERT INTO shop_award_log (order_id, user_id, amount) VALUES (?, ?, ?)"),
			p.OrderID, p.UserID, p.Amount)
		return err
	})
}

// SMSTaskKey is the idempotency key of an order's payment text message.
func SMSTaskKey(orderID int64) string { return fmt.Sprintf("sms:order:%d:paid", orderID) }

// SMSHandler records, with the inbox marker, a task to text the customer:
// the text message itself is a side effect outside the database.
func SMSHandler(inbox *ferry.Inbox[*sql.Tx], tasks *ferry.Outbox[*sql.Tx]) ferrybroker.Handler {
	return ferry.InboxHandler(inbox, DecodePaid, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		p, err := decodePaid(d.Payload)
		if err != nil {
			return ferrytype.Poison(err)
		}
		body, _ := json.Marshal(map[string]any{"order_id": p.OrderID, "user_id": p.UserID,
			"text": fmt.Sprintf("Order %d is paid: %d points are yours.", p.OrderID, p.Amount)})
		_, err = tasks.EnqueueTx(ctx, tx, ferry.Event{ID: SMSTaskKey(p.OrderID), Type: "SendSMS", Payload: body})
		return err
	})
}

// SendSMS is the task handler: it posts the text to the gateway with the
// task's key as Idempotency-Key.
func SendSMS(client *http.Client, gatewayURL string) ferry.TaskHandler {
	return func(ctx context.Context, task ferry.Task) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL+"/sms", bytes.NewReader(task.Payload))
		if err != nil {
			return ferrytype.Poison(err)
		}
		req.Header.Set("Idempotency-Key", task.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("sms gateway: %s", resp.Status)
		}
		return ferrytype.Poison(fmt.Errorf("sms gateway refused: %s", resp.Status))
	}
}

// isConnectionError reports an error that leaves a transaction's outcome
// unknown: the connection broke.
func isConnectionError(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "invalid connection") || strings.Contains(s, "conn closed") ||
		strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") || strings.Contains(s, "bad connection")
}
