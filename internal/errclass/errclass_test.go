package errclass

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestErrorClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", NoText},
		{" \n\t\n", NoText},
		{`attempt 20: returned: nats: no stream matches subject "orders.paid"`,
			`attempt <n>: returned: nats: no stream matches subject "<s>"`},
		{"dial tcp 10.0.0.7:5672: i/o timeout after 30s", "dial tcp <n>:<n>: i/o timeout after <d>"},
		{"event 6ba7b810-9dad-11d1-80b4-00c04fd430c8: payload 1048577 bytes > max 1048576",
			"event <uuid>: payload <n> bytes > max <n>"},
		{"\n\n  first   line\twith  spaces \nsecond line 42", "first line with spaces"},
		{"timed out after 1.5s (2h45m30s, 300ms)", "timed out after <d> (<d>, <d>)"},
		{"checksum 9f86d081884c7d65 != 0x1f at 3.14", "checksum <hex> != <hex> at <n>"},
		{"deadbeef and cafe1234 and abcdef", "deadbeef and <hex> and abcdef"},
		{"id 01HZX3K5TQ8Y6W2V9R7N4M0PBC rejected", "id <id> rejected"},
		{"token evt2Fk9QxL3mZp7Rt8 unknown", "token <id> unknown"},
		{"utf8mb4 over tcp4, v2 of x509", "utf8mb4 over tcp4, v2 of x509"},
		{"can't publish 'orders.paid': it's full", "can't publish '<s>': it's full"},
		{"key `a b` and \"esc \\\" aped\" and 'x'", "key `<s>` and \"<s>\" and '<s>'"},
		{`unclosed "quote 42`, `unclosed "quote <n>`},
		{"order_42 failed 3rd time", "order_<n> failed <id> time"},
		{"line\r\nnext", "line"},
		{"bad \xff byte 7", "bad \uFFFD byte <n>"},
		{"(no error text)", NoText},
	} {
		require.Equal(t, c.want, Of(c.in), "Of(%q)", c.in)
		require.Equal(t, c.want, Of(c.want), "the class of a class is itself: %q", c.want)
	}
}

func TestErrorClassIsBounded(t *testing.T) {
	t.Parallel()
	long := "rejected: " + strings.Repeat("word ", 100) + "end"
	got := Of(long)
	require.LessOrEqual(t, len(got), MaxLen)
	require.True(t, strings.HasSuffix(got, " word…"), got)
	require.Equal(t, got, Of(got))

	oneToken := strings.Repeat("abcdefghij", 30)
	got = Of(oneToken)
	require.LessOrEqual(t, len(got), MaxLen)
	require.Equal(t, got, Of(got))

	// A single quote followed by a word does not close the one before it;
	// cut right after it, it would: the cut is taken before it instead.
	quoted := "x 'open " + strings.Repeat("y", MaxLen-13) + " '" + strings.Repeat("z", 20)
	got = Of(quoted)
	require.LessOrEqual(t, len(got), MaxLen)
	require.Equal(t, got, Of(got))
	require.True(t, strings.HasPrefix(got, "x 'open y"), got)

	same := Of("rejected: " + strings.Repeat("word ", 100) + "other end")
	require.Equal(t, Of(long), same, "only the first MaxLen bytes tell classes apart")
}

func TestClassWordsOccurInEveryTextOfTheClass(t *testing.T) {
	t.Parallel()
	in := `attempt 20: returned: nats: no stream matches subject "orders.paid"`
	require.Equal(t, []string{"returned:", "attempt", "matches", "subject", "stream", "nats:"}, Words(Of(in)))
	require.Nil(t, Words(NoText), "the texts of that class are empty")
}

// FuzzErrorClass checks that ErrorClass never panics, is bounded, is its
// own class, and that the words a store is asked to look for occur in the
// text.
func FuzzErrorClass(f *testing.F) {
	for _, s := range []string{
		"", "attempt 20: returned: nats: no stream matches subject \"orders.paid\"",
		"dial tcp 10.0.0.7:5672: i/o timeout after 30s", "x 42'abc' y", "'abc'42", "a'b' c'",
		"event 6ba7b810-9dad-11d1-80b4-00c04fd430c8: x", "\"a\\\"", "''abc'", "1.a.2.b", "0x", "0xg1",
		strings.Repeat("ab1 ", 80), strings.Repeat("é", 150), "abcdefg1x" + strings.Repeat(" y", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Of(s)
		if len(c) > MaxLen {
			t.Fatalf("Of(%q) = %q: %d bytes", s, c, len(c))
		}
		if !utf8.ValidString(c) || strings.ContainsAny(c, "\r\n") {
			t.Fatalf("Of(%q) = %q: not one line of UTF-8", s, c)
		}
		if again := Of(c); again != c {
			t.Fatalf("Of(%q) = %q, but Of(%q) = %q", s, c, c, again)
		}
		for _, w := range Words(c) {
			if !strings.Contains(s, w) {
				t.Fatalf("Words(%q) has %q, which %q does not contain", c, w, s)
			}
		}
	})
}
