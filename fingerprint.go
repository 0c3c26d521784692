package ferry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Fingerprint returns the canonical JSON of fields and its SHA-256 (hex).
// Canonical: object keys sorted, no insignificant space, each number
// spelled by its exact decimal value (10, 10.0 and 1e1 are one number; 0.1
// and 0.10000000000000001 are two, as they are to a handler that parses
// decimals exactly). Two operations with the same fingerprint have the same
// defining fields. An object with a key twice ({"a":1,"a":2}) is refused
// with ErrInvalidEvent: readers disagree on what it means.
func Fingerprint(fields any) (canonical []byte, sum string, err error) {
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, "", fmt.Errorf("%w: operation fields: %v", ErrInvalidEvent, err)
	}
	if key, dup := duplicateKey(raw); dup {
		return nil, "", fmt.Errorf("%w: operation fields: key %q is given twice in one object", ErrInvalidEvent, key)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "", fmt.Errorf("%w: operation fields: %v", ErrInvalidEvent, err)
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return nil, "", err
	}
	h := sha256.Sum256(b.Bytes())
	return b.Bytes(), hex.EncodeToString(h[:]), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := writeCanonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(canonicalNumber(x))
	default: // string, bool, nil
		eb, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(eb)
	}
	return nil
}

// duplicateKey reports the first key given twice in one object of data,
// valid JSON (as json.Marshal returns it). Keys are compared by their
// value: "\u0061" and "a" are one key.
func duplicateKey(data []byte) (string, bool) {
	s := dupScan{b: data}
	s.value()
	return s.dup, s.found
}

type dupScan struct {
	b     []byte
	pos   int
	dup   string
	found bool
}

func (s *dupScan) ws() {
	for s.pos < len(s.b) && (s.b[s.pos] == ' ' || s.b[s.pos] == '\t' || s.b[s.pos] == '\n' || s.b[s.pos] == '\r') {
		s.pos++
	}
}

// value skips one value, recording a duplicate key in its objects.
func (s *dupScan) value() {
	s.ws()
	if s.found || s.pos >= len(s.b) {
		return
	}
	switch s.b[s.pos] {
	case '{':
		s.pos++
		var keys []string
		var set map[string]struct{}
		for !s.found && s.pos < len(s.b) {
			s.ws()
			if s.b[s.pos] == '}' {
				s.pos++
				return
			}
			if s.b[s.pos] == ',' {
				s.pos++
				s.ws()
			}
			k := s.str()
			if set != nil {
				if _, ok := set[k]; ok {
					s.dup, s.found = k, true
					return
				}
				set[k] = struct{}{}
			} else {
				for _, x := range keys {
					if x == k {
						s.dup, s.found = k, true
						return
					}
				}
				keys = append(keys, k)
				if len(keys) > 16 {
					set = make(map[string]struct{}, 2*len(keys))
					for _, x := range keys {
						set[x] = struct{}{}
					}
				}
			}
			s.ws()
			s.pos++ // ':'
			s.value()
			s.ws()
		}
	case '[':
		s.pos++
		for !s.found && s.pos < len(s.b) {
			s.ws()
			switch s.b[s.pos] {
			case ']':
				s.pos++
				return
			case ',':
				s.pos++
			}
			s.ws()
			if s.pos < len(s.b) && s.b[s.pos] == ']' {
				continue
			}
			s.value()
		}
	case '"':
		s.str()
	default: // a number, true, false, null
		for s.pos < len(s.b) && !strings.ContainsRune(",}] \t\n\r", rune(s.b[s.pos])) {
			s.pos++
		}
	}
}

// str reads the string at pos and returns its value.
func (s *dupScan) str() string {
	start := s.pos
	s.pos++ // the opening quote
	escaped := false
	for s.pos < len(s.b) && s.b[s.pos] != '"' {
		if s.b[s.pos] == '\\' {
			escaped = true
			s.pos++
		}
		s.pos++
	}
	s.pos++ // the closing quote
	if !escaped {
		return string(s.b[start+1 : s.pos-1])
	}
	var v string
	_ = json.Unmarshal(s.b[start:min(s.pos, len(s.b))], &v)
	return v
}

// maxIntBits bounds the integers canonicalNumber spells in full: every
// integer a float64 can hold. Past it, 1e1000000000 would be spelled with a
// billion digits (a message's payload is not trusted).
const maxIntBits = 1024

// canonicalNumber spells a JSON number one way per decimal value: an
// integer below 2^1024 in decimal digits, a larger one in exponent form
// (1e+2000); any other number as the shortest float64 spelling when that
// spelling has the number's exact value (0.5, 1e-07), else in exponent form
// from its own digits (1.0000000000000001e+0), so that numbers a float64
// cannot tell apart are still told apart.
func canonicalNumber(n json.Number) string {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	d, ok := parseDecimal(s)
	if !ok {
		return s // an exponent beyond ±2^62
	}
	if d.digits == "" {
		return "0"
	}
	if d.exp >= 0 {
		if int64(len(d.digits))+d.exp <= maxIntBits/3+1 {
			i, _ := new(big.Int).SetString(d.digits+strings.Repeat("0", int(d.exp)), 10)
			if i.BitLen() <= maxIntBits {
				if d.neg {
					i.Neg(i)
				}
				return i.String()
			}
		}
		return d.scientific()
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		short := strconv.FormatFloat(f, 'g', -1, 64)
		if sd, ok := parseDecimal(short); ok && sd == d {
			return short
		}
	}
	return d.scientific()
}

// decimal is the value ±digits × 10^exp, digits with no leading or
// trailing zero ("" for zero, which has no sign).
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// parseDecimal reads the JSON number s exactly. ok is false when its
// exponent is beyond ±2^62.
func parseDecimal(s string) (d decimal, ok bool) {
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 64)
		if err != nil || e > 1<<62 || e < -1<<62 {
			return decimal{}, false
		}
		mant, d.exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	d.digits = strings.TrimLeft(whole+frac, "0")
	d.exp -= int64(len(frac))
	for strings.HasSuffix(d.digits, "0") {
		d.digits = d.digits[:len(d.digits)-1]
		d.exp++
	}
	if d.digits == "" {
		return decimal{}, true
	}
	return d, true
}

// scientific spells d as d.ddde±x.
func (d decimal) scientific() string {
	if d.digits == "" {
		return "0"
	}
	exp := d.exp + int64(len(d.digits)-1)
	out := d.digits[:1]
	if d.neg {
		out = "-" + out
	}
	if len(d.digits) > 1 {
		out += "." + d.digits[1:]
	}
	if exp >= 0 {
		return out + "e+" + strconv.FormatInt(exp, 10)
	}
	return out + "e" + strconv.FormatInt(exp, 10)
}
