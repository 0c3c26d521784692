package ferrymem

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// InsertRaw writes a row into the table of s, committed, as a
// hand-written INSERT would: the columns cols hold vals, as text, the
// others their defaults, and nothing is checked. It is the conformance
// suite's Harness.InsertRaw.
func InsertRaw(s *Store, id string, cols, vals []string) error {
	if len(cols) != len(vals) {
		return fmt.Errorf("insert raw row %s: %d columns, %d values", id, len(cols), len(vals))
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if s.t.rows[id] != nil {
		return fmt.Errorf("insert raw row %s: %w", id, errDuplicate)
	}
	now := db.now()
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
