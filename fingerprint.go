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

// canonicalNumber spells a JSON number one way: an integer in decimal
// digits, anything else as the shortest float that round-trips.
func canonicalNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, _, err := big.ParseFloat(string(n), 10, 200, big.ToNearestEven)
	if err != nil {
		return string(n)
	}
	if f.IsInt() {
		i, _ := f.Int(nil)
		return i.String()
	}
	f64, _ := f.Float64()
	return strconv.FormatFloat(f64, 'g', -1, 64)
}
