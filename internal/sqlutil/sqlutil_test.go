package sqlutil

import (
	"testing"
	"unicode/utf8"
)

func TestRebind(t *testing.T) {
	q := "UPDATE t SET a = ? WHERE b = ? AND c IN (?, ?)"
	if got := Rebind("mysql", q); got != q {
		t.Errorf("mysql: got %q, want it unchanged", got)
	}
	if got, want := Rebind("postgres", q), "UPDATE t SET a = $1 WHERE b = $2 AND c IN ($3, $4)"; got != want {
		t.Errorf("postgres: got %q, want %q", got, want)
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
