// Package sqlutil holds small helpers the SQL stores share: payload and
// header encoding, id generation, placeholder lists.
package sqlutil

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrytype"
)

// Placeholders returns n comma-separated placeholders: "?,?,?" when
// numbered is false, "$start,$start+1,..." otherwise.
func Placeholders(n int, numbered bool, start int) string {
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
	return col + " IN (" + Placeholders(len(vals), false, 0) + ")", args
}

// EncodeHeaders returns headers as a JSON object, or nil for none.
func EncodeHeaders(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return json.Marshal(h)
}

// DecodeHeaders parses a JSON object of strings; nil or empty input, or
// JSON null, gives a nil map. Anything else is an error: it never panics.
func DecodeHeaders(b []byte) (map[string]string, error) {
	h, err := decodeHeaders(b)
	if err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return h, nil
}

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	return h, nil
}

// NewToken returns a fresh random lease token.
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Micros returns d in whole microseconds, never negative.
func Micros(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return d.Microseconds()
}

// AggregateGroup is the rows of one aggregate within an enqueue, in order.
type AggregateGroup struct {
	Type, ID string
	Rows     []int // indexes into the enqueued slice
}

// GroupByAggregate groups the events that carry an AggregateID, keeping
// first-seen order of aggregates and enqueue order within each.
func GroupByAggregate(events []ferrytype.Event) []AggregateGroup {
	var groups []AggregateGroup
	idx := map[[2]string]int{}
	for i := range events {
		ev := &events[i]
		if ev.AggregateID == "" {
			continue
		}
		k := [2]string{ev.AggregateType, ev.AggregateID}
		g, ok := idx[k]
		if !ok {
			g = len(groups)
			idx[k] = g
			groups = append(groups, AggregateGroup{Type: ev.AggregateType, ID: ev.AggregateID})
		}
		groups[g].Rows = append(groups[g].Rows, i)
	}
	return groups
}

// Truncate shortens s to at most n bytes for storage in a bounded column,
// keeping valid UTF-8.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop the bytes of a character the cut split (at most 3).
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// NullTime scans a time stored either as a time value or as text in one of
// the layouts the stores use.
type NullTime struct {
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
func (t *NullTime) Scan(v any) error {
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

func (t *NullTime) parse(s string) error {
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
