package ferryhttp

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidKey is returned for an Idempotency-Key value that is not a key.
var ErrInvalidKey = errors.New("ferryhttp: invalid Idempotency-Key")

// ParseKey reads an Idempotency-Key field value: a Structured Field string
// (RFC 9651 sf-string: "8e03978e-40d5", with \" and \\ escapes), as the
// IETF draft specifies, or a bare token of visible ASCII, as Stripe and
// most clients send it. The key is 1 to maxLen bytes of visible ASCII or
// space (an sf-string's alphabet) and may not be blank. Parameters after
// the string (;a=1) are refused rather than ignored: two clients must not
// believe they sent different keys when the server sees one.
func ParseKey(v string, maxLen int) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			if c == '\\' {
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", fmt.Errorf("%w: a backslash may only escape \" or \\", ErrInvalidKey)
				}
				b.WriteByte(v[i])
				continue
			}
			if c == '"' {
				break
			}
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%w: only visible ASCII and space may appear in a key", ErrInvalidKey)
			}
			b.WriteByte(c)
		}
		if i >= len(v) {
			return "", fmt.Errorf("%w: unterminated string", ErrInvalidKey)
		}
		if i != len(v)-1 {
			return "", fmt.Errorf("%w: unexpected text after the key's closing quote", ErrInvalidKey)
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ',' || c == ';' {
				return "", fmt.Errorf("%w: a bare key is visible ASCII without quotes, backslashes, commas or semicolons; quote it as an sf-string", ErrInvalidKey)
			}
		}
		key = v
	}
	if strings.TrimSpace(key) == "" {
		return "", fmt.Errorf("%w: blank", ErrInvalidKey)
	}
	if len(key) > maxLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, maxLen)
	}
	return key, nil
}
