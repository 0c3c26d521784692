package ferry_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
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

// Numbers are told apart by their exact decimal value, not by the float64
// nearest to them: a handler that parses amounts exactly sees 0.1 and
// 0.10000000000000001 as two amounts, so they are two operations.
func TestFingerprintTellsNumbersApartByTheirDecimalValue(t *testing.T) {
	sum := func(s string) string {
		t.Helper()
		_, sum, err := ferry.Fingerprint(json.RawMessage(s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return sum
	}
	for _, pair := range [][2]string{
		{`{"amount":0.1}`, `{"amount":0.10000000000000001}`},
		{`1`, `1.0000000000000001`},
		{`0`, `1e-400`},
		{`10000000000000000000`, `10000000000000000000.00000001`},
		{`123456789012345678901234567890123456789012345678901234567890123456789`, `123456789012345678901234567890123456789012345678901234567890123456788`},
	} {
		if sum(pair[0]) == sum(pair[1]) {
			t.Errorf("%s and %s fingerprint alike", pair[0], pair[1])
		}
	}
	for _, same := range [][]string{
		{`10`, `10.0`, `1e1`, `1.0E+1`, `100e-1`},
		{`0.5`, `5e-1`, `0.50`, `50E-2`},
		{`0`, `-0`, `0.0e7`, `-0.000`},
		{`1.0000000000000001`, `10000000000000001e-16`},
	} {
		for _, s := range same[1:] {
			if sum(s) != sum(same[0]) {
				t.Errorf("%s and %s are one number but fingerprint differently", same[0], s)
			}
		}
	}
}

// An object with a key twice means different things to different readers
// (encoding/json keeps the last, others the first or refuse): it is refused.
func TestFingerprintRefusesAKeyGivenTwice(t *testing.T) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":1,"a":1}`, `[{"x":{"b":true,"c":0,"b":false}}]`, `{"\u0061":1,"a":2}`,
		`{"a\"b":1,"a\"b":2}`, `{"a":"}{","a":[]}`, `[1,[2,{"k":{},"k":null}]]`, ` { "a" : 1 , "a" : 2 } `} {
		_, _, err := ferry.Fingerprint(json.RawMessage(s))
		if !errors.Is(err, ferry.ErrInvalidEvent) || !strings.Contains(err.Error(), "given twice") {
			t.Errorf("%s: got %v, want ErrInvalidEvent naming the key given twice", s, err)
		}
	}
	for _, s := range []string{`{"a":{"a":1},"b":{"a":2}}`, `{"a\"":1,"a":2}`, `{"a":"a","b":"\"a\":1"}`, `[{"a":1},{"a":1}]`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18}`} {
		if _, _, err := ferry.Fingerprint(json.RawMessage(s)); err != nil {
			t.Errorf("%s: refused: %v", s, err)
		}
	}
	many := `{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18,"k3":0}`
	if _, _, err := ferry.Fingerprint(json.RawMessage(many)); err == nil || !strings.Contains(err.Error(), `"k3" is given twice`) {
		t.Errorf("a key twice among many (past the small-object list): %v", err)
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
		dup := errors.Is(err, ferry.ErrInvalidEvent) && strings.Contains(err.Error(), "given twice")
		if want := hasDuplicateKey(t, data); dup != want {
			t.Fatalf("%q: a key given twice: Fingerprint says %v (%v), a token walk %v", data, dup, err, want)
		}
		if dup {
			return
		}
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

// hasDuplicateKey walks data's tokens and reports whether an object of it
// has a key twice: the reference for Fingerprint's own scan.
func hasDuplicateKey(t *testing.T, data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			dup := false
			for dec.More() {
				k, _ := dec.Token()
				if seen[k.(string)] {
					dup = true
				}
				seen[k.(string)] = true
				dup = walk() || dup
			}
			_, _ = dec.Token()
			return dup
		case json.Delim('['):
			dup := false
			for dec.More() {
				dup = walk() || dup
			}
			_, _ = dec.Token()
			return dup
		}
		return false
	}
	return walk()
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
