package sqlutil

import (
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
