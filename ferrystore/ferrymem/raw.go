package ferrymem

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// InsertRaw writes a row into the table of s, committed, as a
// hand-written INSERT (or an older writer) would: the columns cols hold
// vals, as text, the others their defaults, and nothing is checked, so
// that a test sees what the relay does with a row EnqueueTx would have
// refused (a claim moves it to DEAD with its reason). It knows the
// columns aggregate_type, aggregate_id, aggregate_seq, event_type,
// payload, headers, destination, exchange, status, attempts, last_error
// and created_at. It is the conformance suite's Harness.InsertRaw.
func InsertRaw(s *Store, id string, cols, vals []string) error {
	if len(cols) != len(vals) {
		return fmt.Errorf("insert raw row %s: %d columns, %d values", id, len(cols), len(vals))
	}
	return s.db.statement(context.Background(), func(now time.Time) error {
		return s.insertRaw(now, id, cols, vals)
	})
}

// insertRaw is InsertRaw with the database locked.
func (s *Store) insertRaw(now time.Time, id string, cols, vals []string) error {
	if s.t.rows[id] != nil {
		return fmt.Errorf("insert raw row %s: %w", id, errDuplicate)
	}
	r := &row{id: id, status: ferrytype.StatusNew, availableAt: now, createdAt: now}
	for i, col := range cols {
		v := vals[i]
		var err error
		switch col {
		case "aggregate_type":
			r.aggType = v
		case "aggregate_id":
			r.aggID = v
		case "aggregate_seq":
			r.seq, err = strconv.ParseInt(v, 10, 64)
		case "event_type":
			r.typ = v
		case "payload":
			r.payload = []byte(v)
		case "headers":
			r.headers = []byte(v)
		case "destination":
			r.dest = v
		case "exchange":
			r.exch = v
		case "status":
			r.status = ferrytype.Status(v)
		case "attempts":
			r.attempts, err = strconv.Atoi(v)
		case "last_error":
			r.lastError = v
		case "created_at":
			r.createdAt, err = parseTime(v)
		default:
			err = fmt.Errorf("no column %s", col)
		}
		if err != nil {
			return fmt.Errorf("insert raw row %s: %s: %w", id, col, err)
		}
	}
	s.t.insert(r)
	return nil
}

// parseTime reads a time in the layouts the SQL stores read.
func parseTime(s string) (time.Time, error) {
	for _, l := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot parse time %q", s)
}

// UpdateRaw sets columns of row id in the table of s, committed, as a
// hand-written UPDATE would (a person taking an event from a relay's
// lease): the columns cols hold vals, as text, and nothing is checked nor
// waited for. It knows the columns no index of the table keys on:
// lease_token, last_error, event_type, payload, headers, destination and
// exchange. A row that does not exist is an error wrapping
// ferrytype.ErrNotFound.
func UpdateRaw(s *Store, id string, cols, vals []string) error {
	if len(cols) != len(vals) {
		return fmt.Errorf("update raw row %s: %d columns, %d values", id, len(cols), len(vals))
	}
	return s.db.statement(context.Background(), func(time.Time) error { return s.updateRaw(id, cols, vals) })
}

// updateRaw is UpdateRaw with the database locked.
func (s *Store) updateRaw(id string, cols, vals []string) error {
	r := s.t.rows[id]
	if r == nil {
		return fmt.Errorf("update raw row %s: %w", id, ferrytype.ErrNotFound)
	}
	set := make([]func(), 0, len(cols))
	for i, col := range cols {
		v := vals[i]
		switch col {
		case "lease_token":
			set = append(set, func() { r.token = v })
		case "last_error":
			set = append(set, func() { r.lastError = v })
		case "event_type":
			set = append(set, func() { r.typ = v })
		case "payload":
			set = append(set, func() { r.payload = []byte(v) })
		case "headers":
			set = append(set, func() { r.headers = []byte(v) })
		case "destination":
			set = append(set, func() { r.dest = v })
		case "exchange":
			set = append(set, func() { r.exch = v })
		default:
			return fmt.Errorf("update raw row %s: column %s cannot be updated by hand", id, col)
		}
	}
	for _, f := range set {
		f()
	}
	return nil
}
