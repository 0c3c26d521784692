package sqlutil

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// RowColumns lists the columns ScanRow and ScanRows read, in order. Stores
// select them, casting as their dialect needs.
const RowColumns = "event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers," +
	" destination, exchange, attempts, created_at, status, lease_token, available_at, locked_until, sent_at, last_error," +
	" discarded_at, discard_reason"

// ScanRow reads one row of RowColumns from rows, which must be positioned
// before it; it returns ErrNotFound when there is none.
func ScanRow(rows ferrystore.Rows, id string) (ferrystore.Row, error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ferrystore.Row{}, err
		}
		return ferrystore.Row{}, fmt.Errorf("event %s: %w", id, ferrytype.ErrNotFound)
	}
	r, err := scanRow(rows)
	if err != nil {
		return r, err
	}
	return r, rows.Err()
}

// ScanRows reads every row of RowColumns from rows and closes them.
func ScanRows(rows ferrystore.Rows) ([]ferrystore.Row, error) {
	defer rows.Close()
	var out []ferrystore.Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanRow(rows ferrystore.Rows) (ferrystore.Row, error) {
	var (
		r                                                    ferrystore.Row
		payload                                              []byte
		headers, token, lastErr, reason                      sql.NullString
		created, available, lockedUntil, sentAt, discardedAt NullTime
		status                                               string
	)
	if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.Sequence, &r.Type, &payload, &headers,
		&r.Destination, &r.Exchange, &r.Attempt, &created, &status, &token, &available, &lockedUntil, &sentAt, &lastErr,
		&discardedAt, &reason); err != nil {
		return r, fmt.Errorf("scan event: %w", err)
	}
	r.Payload = payload
	h, err := DecodeHeaders([]byte(headers.String))
	if err != nil {
		return r, errors.Join(fmt.Errorf("event %s", r.ID), err)
	}
	r.Headers = h
	r.CreatedAt, r.AvailableAt, r.LockedUntil, r.SentAt = created.Time, available.Time, lockedUntil.Time, sentAt.Time
	r.Status, r.LeaseToken, r.LastError = ferrytype.Status(status), token.String, lastErr.String
	r.DiscardedAt, r.DiscardReason = discardedAt.Time, reason.String
	return r, nil
}
