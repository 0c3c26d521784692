package ferry_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ferrydev/ferry"
)

func TestFingerprintNumbersAndKeyOrder(t *testing.T) {
	_, a, err := ferry.Fingerprint(json.RawMessage(`{"b":[1,10.0,1e1],"a":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := ferry.Fingerprint(map[string]any{"a": "x", "b": []any{1, 10, 10}})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("the same fields fingerprint differently: %s, %s", a, b)
	}
	if _, c, _ := ferry.Fingerprint(map[string]any{"a": "x", "b": []any{1, 10, 11}}); c == a {
		t.Fatal("different fields fingerprint alike")
	}
}

// A number with a huge exponent in a payload someone else wrote is spelled
// in a few bytes, not in full.
func TestFingerprintHugeNumberIsBounded(t *testing.T) {
	for _, n := range []string{"1e1000000000", "-12.5e999999999", "1e309", "4E9012344", "1e9223372036854775807"} {
		c, _, err := ferry.Fingerprint(json.RawMessage(n))
		if err != nil {
			t.Fatal(err)
		}
		if len(c) > 400 || !json.Valid(c) {
			t.Fatalf("%s: canonical form of %d bytes: %.80q", n, len(c), c)
		}
		again, _, _ := ferry.Fingerprint(json.RawMessage(c))
		if !bytes.Equal(again, c) {
			t.Fatalf("%s: %q is not stable: %q", n, c, again)
		}
	}
	_, a, _ := ferry.Fingerprint(json.RawMessage("12.50e999999"))
	_, b, _ := ferry.Fingerprint(json.RawMessage("1250000e999994"))
	if a != b {
		t.Fatal("two spellings of one huge number fingerprint differently")
	}
}

// FuzzFingerprint feeds Fingerprint any JSON an operation's fields can be
// (a consumer fingerprints fields decoded from a message it did not
// write). It never panics; its canonical form is valid JSON, is its own
// canonical form, and means the same as the input.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,"x",null,true]}`, `1e400`, `-0`, `0.1`, `123456789012345678901234567890`,
		`{"a":{"b":{"c":[]}}}`, `"\u00e9\ud83d\ude00"`, `[1E-400]`, `{"":-1.5e-7}`, `"\ud800"`, `1e1000000`, `-9e99999`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		canonical, sum, err := ferry.Fingerprint(json.RawMessage(data))
		if err != nil {
			t.Fatalf("valid JSON %q: %v", data, err)
		}
		if !json.Valid(canonical) {
			t.Fatalf("canonical form %q of %q is not JSON", canonical, data)
		}
		again, sum2, err := ferry.Fingerprint(json.RawMessage(canonical))
		if err != nil || sum2 != sum || !bytes.Equal(again, canonical) {
			t.Fatalf("canonical form %q of %q is not stable: %q, %v", canonical, data, again, err)
		}
		// The same value: equal once both are decoded the ordinary way
		// (numbers as float64, where -0 == 0), except where a float64
		// cannot hold them.
		var in, out any
		if json.Unmarshal(data, &in) == nil && json.Unmarshal(canonical, &out) == nil && !sameJSON(in, out) {
			t.Fatalf("canonical form %q of %q means %v, not %v", canonical, data, out, in)
		}
	})
}

func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
