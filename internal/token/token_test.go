package token

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

func TestNew(t *testing.T) {
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 100 {
		tok := New()
		if !hex.MatchString(tok) {
			t.Fatalf("New() = %q, want 32 lowercase hex characters", tok)
		}
		if seen[tok] {
			t.Fatalf("New() gave %q twice", tok)
		}
		seen[tok] = true
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"table", 16, "table"},
		{"abcdef", 6, "abcdef"},
		{"abcdef", 4, "abcd"},
		{"abcdef", 0, ""},
		{"ab€cd", 3, "ab"}, // € is 3 bytes: a cut inside it drops it
		{"ab€cd", 4, "ab"},
		{"ab€cd", 5, "ab€"},
		{"日本", 5, "日"},
	} {
		got := Truncate(c.s, c.n)
		if got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q is not valid UTF-8", c.s, c.n, got)
		}
	}
}
