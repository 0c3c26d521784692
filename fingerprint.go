package ferry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Fingerprint returns the canonical JSON of fields and its SHA-256 (hex).
// Canonical: object keys sorted, no insignificant space, numbers in one
// spelling (10, 10.0 and 1e1 are the same number). Two operations with the
// same fingerprint have the same defining fields.
func Fingerprint(fields any) (canonical []byte, sum string, err error) {
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, "", fmt.Errorf("%w: operation fields: %v", ErrInvalidEvent, err)
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

// maxIntBits bounds the integers canonicalNumber spells in full: every
// integer a float64 can hold. Past it, 1e1000000000 would be spelled with a
// billion digits (a message's payload is not trusted).
const maxIntBits = 1024

// canonicalNumber spells a JSON number one way: an integer below 2^1024 in
// decimal digits, a larger one in exponent form (1e+2000), anything else as
// the shortest float that round-trips.
func canonicalNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, _, err := big.ParseFloat(string(n), 10, 200, big.ToNearestEven)
	if err != nil {
		return string(n)
	}
	if f.IsInf() || (f.IsInt() && f.MantExp(nil) > maxIntBits) {
		// Spelled from its decimal digits: converting a binary number
		// this large to decimal takes a long time.
		return scientific(string(n))
	}
	if f.IsInt() {
		i, _ := f.Int(nil)
		return i.String()
	}
	f64, _ := f.Float64()
	if f64 == math.Trunc(f64) {
		// Rounded to a whole float64 (1e19 from 1e19 + 1e-8): spelled as
		// the integer, as that integer's own spelling is.
		i, _ := new(big.Float).SetFloat64(f64).Int(nil)
		return i.String()
	}
	return strconv.FormatFloat(f64, 'g', -1, 64)
}

// scientific spells the JSON number s as d.ddde±x, with no leading or
// trailing zero digit: one spelling per decimal value. It returns s when
// its exponent is beyond ±2^62.
func scientific(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 64)
		if err != nil || e > 1<<62 || e < -1<<62 {
			return sign + s
		}
		mant, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= int64(len(frac))
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if digits == "" {
		return "0"
	}
	exp += int64(len(digits) - 1)
	out := sign + digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	if exp >= 0 {
		return out + "e+" + strconv.FormatInt(exp, 10)
	}
	return out + "e" + strconv.FormatInt(exp, 10)
}
