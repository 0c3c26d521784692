package sqlstore

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// rowColumns lists the columns ScanRow and ScanRows read, in order: the
// messageColumns, then the row's state. Stores select them, casting as
// their dialect needs.
const rowColumns = messageColumns + ", status, lease_token, available_at, locked_until, sent_at, last_error," +
	" discarded_at, discard_reason, error_class, revived_at"

// ScanRow reads one row of rowColumns from rows, which must be positioned
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

// ScanRows reads every row of rowColumns from rows and closes them.
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

// scanRow reads one row for an operator: a malformed row (see
// DecodeMessage) is read as far as it can be, with the reason in
// Malformed, so that one such row never fails a listing.
func scanRow(rows ferrystore.Rows) (ferrystore.Row, error) {
	var (
		r                                     ferrystore.Row
		vals                                  [numMessageColumns]any
		times                                 [5]any // available_at, locked_until, sent_at, discarded_at, revived_at
		status, token, lastErr, reason, class sql.NullString
	)
	dest := make([]any, 0, numMessageColumns+10)
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	dest = append(dest, &status, &token, &times[0], &times[1], &times[2], &lastErr, &times[3], &reason, &class, &times[4])
	if err := rows.Scan(dest...); err != nil {
		return r, fmt.Errorf("scan event: %w", err)
	}
	m, err := DecodeMessage(vals[:])
	r.Message = m
	if err != nil {
		r.Malformed = err.Error()
		if raw, _, terr := textValue(vals[6]); terr == nil {
			if _, herr := decodeHeaders([]byte(raw)); herr != nil {
				r.RawHeaders = raw
			}
		}
	}
	// A time that does not parse reads as zero here: the row is still
	// listed, and its claim finds it malformed if it ever matters.
	at := func(v any) time.Time {
		var t nullTime
		_ = t.Scan(v)
		return t.Time
	}
	r.AvailableAt, r.LockedUntil, r.SentAt, r.DiscardedAt = at(times[0]), at(times[1]), at(times[2]), at(times[3])
	r.Status, r.LeaseToken, r.LastError = ferrytype.Status(status.String), token.String, lastErr.String
	r.DiscardReason, r.ErrorClass, r.RevivedAt = reason.String, class.String, at(times[4])
	return r, nil
}
