package sqlstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// Each kind of value a hand-written INSERT or an older writer can leave,
// and what DecodeMessage makes of it: deliverable, or malformed with the
// column named.
func TestDecodeMessageDecidesPerKind(t *testing.T) {
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	row := func(set func(v []any)) []any {
		v := []any{"e1", "order", "42", int64(3), "OrderPaid", []byte(`{"n":1}`), `{"k":"v"}`, "orders.paid", "", int64(1), created}
		set(v)
		return v
	}
	for _, c := range []struct {
		name   string
		vals   []any
		reason string // empty: deliverable
	}{
		{"WellFormed", row(func([]any) {}), ""},
		{"NullAggregate", row(func(v []any) { v[1], v[2], v[3] = nil, nil, nil }), ""},
		{"NullHeaders", row(func(v []any) { v[6] = nil }), ""},
		{"NullDestinationAndExchange", row(func(v []any) { v[7], v[8] = nil, nil }), ""},
		{"NullCreatedAt", row(func(v []any) { v[10] = nil }), ""},
		{"SequenceAsText", row(func(v []any) { v[3] = []byte("7") }), ""},
		{"TimeAsText", row(func(v []any) { v[10] = "2026-11-30 12:00:00.000" }), ""},
		{"InvalidUTF8InType", row(func(v []any) { v[4] = "Order\xffPaid" }), ""},
		{"NullID", row(func(v []any) { v[0] = nil }), "malformed row: event_id: NULL"},
		{"EmptyType", row(func(v []any) { v[4] = "" }), "malformed row: event_type: empty"},
		{"NullType", row(func(v []any) { v[4] = nil }), "malformed row: event_type: NULL"},
		{"NullPayload", row(func(v []any) { v[5] = nil }), "malformed row: payload: NULL"},
		{"PayloadNotJSON", row(func(v []any) { v[5] = "not json" }), "malformed row: payload: not valid JSON"},
		{"HeadersOfNumbers", row(func(v []any) { v[6] = `{"retry":1}` }),
			"malformed row: headers: json: cannot unmarshal number into Go value of type string"},
		{"HeaderNameEmpty", row(func(v []any) { v[6] = `{"":"x"}` }), "malformed row: headers: a header name is empty"},
		{"SequenceNotAnInteger", row(func(v []any) { v[3] = "abc" }), `malformed row: aggregate_seq: "abc" is not an integer`},
		{"SequenceFraction", row(func(v []any) { v[3] = 1.5 }), "malformed row: aggregate_seq: 1.5 is not an integer"},
		{"AttemptsNegative", row(func(v []any) { v[9] = int64(-1) }), "malformed row: attempts: -1 is out of range"},
		{"CreatedAtNotATime", row(func(v []any) { v[10] = "yesterday" }), `malformed row: created_at: cannot parse time "yesterday"`},
		{"TypeOfAnotherKind", row(func(v []any) { v[4] = true }), "malformed row: event_type: a bool, not text"},
		{"TooFewColumns", []any{"e1"}, "malformed row: 1 columns, want 11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeMessage(c.vals)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("not deliverable: %v", err)
				}
				if m.ID != "e1" || m.Type == "" || string(m.Payload) != `{"n":1}` {
					t.Fatalf("decoded %+v", m)
				}
				return
			}
			if !errors.Is(err, ferrytype.ErrMalformedRow) || err.Error() != c.reason {
				t.Fatalf("got %v, want %q", err, c.reason)
			}
		})
	}
}

// The cost of reading one claimed row of 1 KiB into a message, JSON
// checks included.
func BenchmarkDecodeMessage(b *testing.B) {
	payload := []byte(`{"n":"` + strings.Repeat("x", 1000) + `"}`)
	vals := []any{"01a22a44-4be2-7853-8ac9-2f9cd5e6afbd", "order", "42", int64(3), "OrderPaid", payload,
		`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`, "orders.paid", "", int64(1),
		time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMessage(vals); err != nil {
			b.Fatal(err)
		}
	}
}
