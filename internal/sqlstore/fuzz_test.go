package sqlstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrytype"
)

// DecodeHeaders never panics: it returns a map, or an error.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `{"a":"b"}`, `{"retry":1}`, `[1,2]`, `"x"`, `{"a":{"b":"c"}}`,
		`{"a":null}`, `{oops`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"a":"b","a":"c"}`, `{"":"x"}`, ` {"a":"b"} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeaders(b)
		if err != nil {
			if h != nil {
				t.Fatalf("%q: a map and an error", b)
			}
			return
		}
		// What decodes encodes again, and decodes to the same map.
		enc, err := EncodeHeaders(h)
		if err != nil {
			t.Fatalf("%q: decoded %v, which does not encode: %v", b, h, err)
		}
		back, err := DecodeHeaders(enc)
		if err != nil || !maps.Equal(h, back) {
			t.Fatalf("%q: %v encodes as %q, which decodes as %v, %v", b, h, enc, back, err)
		}
	})
}

// EncodeHeaders then DecodeHeaders gives the headers back: exactly for
// valid UTF-8; JSON replaces each invalid byte with U+FFFD otherwise.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k", "")
	f.Add("", "x", "a", "b")
	f.Add("a\xff", "\xfe", "<&>", "\u2028")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := map[string]string{k1: v1, k2: v2}
		enc, err := EncodeHeaders(h)
		if err != nil {
			t.Fatalf("%v: %v", h, err)
		}
		back, err := DecodeHeaders(enc)
		if err != nil {
			t.Fatalf("%v encodes as %q, which does not decode: %v", h, enc, err)
		}
		valid := true
		for k, v := range h {
			valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
		}
		if valid && !maps.Equal(h, back) {
			t.Fatalf("%v came back as %v", h, back)
		}
		if !valid && len(back) == 0 {
			t.Fatalf("%v came back empty", h)
		}
	})
}

// DecodeMessage, what turns a claimed row into a message, never panics:
// it returns a message the relay can publish, or an error wrapping
// ferrytype.ErrMalformedRow. The fuzzer picks each value's driver type as
// well as its content.
func FuzzDecodeMessage(f *testing.F) {
	f.Add("01a2", "order", "42", int64(3), "OrderPaid", []byte(`{"n":1}`), []byte(`{"k":"v"}`), "orders.paid", "",
		int64(1), "2026-11-30 15:04:05.123456", uint32(0))
	f.Add("x", "", "", int64(0), "", []byte(`not json`), []byte(`{"retry":1}`), "", "", int64(0), "", uint32(0xffffffff))
	f.Add("y", "o", "1", int64(-1), "T", []byte(`{}`), []byte(`null`), "d", "e", int64(1<<40), "yesterday", uint32(0x5a5a5a5a))
	f.Fuzz(func(t *testing.T, id, aggType, aggID string, seq int64, typ string, payload, headers []byte, dest, exch string,
		attempts int64, created string, kinds uint32) {
		// Two bits per column choose how the driver hands the value over:
		// as text, as bytes, as NULL, or as another type.
		pick := func(col int, text string, other any) any {
			switch (kinds >> (2 * (col % 16))) & 3 {
			case 0:
				return text
			case 1:
				return []byte(text)
			case 2:
				return nil
			}
			return other
		}
		vals := []any{
			pick(0, id, int64(7)), pick(1, aggType, 1.5), pick(2, aggID, int32(4)), pick(3, fmt.Sprint(seq)+aggType, seq),
			pick(4, typ, true), pick(5, string(payload), time.Unix(seq, 0)), pick(6, string(headers), int64(1)),
			pick(7, dest, []string{dest}), pick(8, exch, uint64(seq)), pick(9, fmt.Sprint(attempts)+exch, attempts),
			pick(10, created, time.Unix(attempts, 0)),
		}
		m, err := DecodeMessage(vals)
		if err != nil {
			if !errors.Is(err, ferrytype.ErrMalformedRow) {
				t.Fatalf("%v: %v does not wrap ErrMalformedRow", vals, err)
			}
			return
		}
		switch {
		case m.ID == "", m.Type == "":
			t.Fatalf("%v: decoded without an id or a type: %+v", vals, m)
		case !json.Valid(m.Payload):
			t.Fatalf("%v: decoded a payload that is not JSON: %q", vals, m.Payload)
		case m.Attempt < 0:
			t.Fatalf("%v: negative attempts %d", vals, m.Attempt)
		}
		if _, ok := m.Headers[""]; ok {
			t.Fatalf("%v: decoded an empty header name", vals)
		}
	})
}
