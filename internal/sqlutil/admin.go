package sqlutil

import (
	"context"
	"fmt"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// ScanAttempts reads (status, attempts, count) rows and closes them.
func ScanAttempts(rows ferrystore.Rows) ([]ferrystore.AttemptCount, error) {
	defer rows.Close()
	var out []ferrystore.AttemptCount
	for rows.Next() {
		var (
			a  ferrystore.AttemptCount
			st string
		)
		if err := rows.Scan(&st, &a.Attempts, &a.Events); err != nil {
			return nil, fmt.Errorf("attempts: %w", err)
		}
		a.Status = ferrytype.Status(st)
		out = append(out, a)
	}
	return out, rows.Err()
}

// ScanMissing reads (key, time) rows and closes them.
func ScanMissing(rows ferrystore.Rows) ([]ferrystore.MissingEvent, error) {
	defer rows.Close()
	var out []ferrystore.MissingEvent
	for rows.Next() {
		var (
			m  ferrystore.MissingEvent
			tm NullTime
		)
		if err := rows.Scan(&m.Key, &tm); err != nil {
			return nil, fmt.Errorf("missing events: %w", err)
		}
		m.Time = tm.Time
		out = append(out, m)
	}
	return out, rows.Err()
}

// QueryCount runs q, a statement that returns one count, on ex.
func QueryCount(ctx context.Context, ex ferrystore.Executor, what, q string, args ...any) (int64, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		err = rows.Scan(&n)
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}
