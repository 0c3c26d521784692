package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
)

// placeholders returns n comma-separated placeholders: "?,?,?" when
// numbered is false, "$start,$start+1,..." otherwise.
func placeholders(n int, numbered bool, start int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		if numbered {
			fmt.Fprintf(&b, "$%d", start+i)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

// InList is "col IN (?, ...)" matching vals, with the arguments it binds.
func InList(col string, vals []string) (string, []any) {
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	return col + " IN (" + placeholders(len(vals), false, 0) + ")", args
}

// Micros returns d in whole microseconds, never negative.
func Micros(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return d.Microseconds()
}

// nullTime scans a time stored either as a time value or as text in one of
// the layouts the stores use.
type nullTime struct {
	Time  time.Time
	Valid bool
}

var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05",
}

// Scan implements sql.Scanner.
func (t *nullTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.Valid = false
		return nil
	case time.Time:
		t.Time, t.Valid = x, true
		return nil
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	}
	return fmt.Errorf("cannot scan %T into a time", v)
}

func (t *nullTime) parse(s string) error {
	for _, l := range timeLayouts {
		if tm, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			t.Time, t.Valid = tm, true
			return nil
		}
	}
	return fmt.Errorf("cannot parse time %q", s)
}

// Rebind rewrites the ? placeholders of q as $1, $2, ... when dialect is
// "postgres", and returns q unchanged otherwise. q must hold no literal
// question marks.
func Rebind(dialect, q string) string {
	if dialect != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
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
