package ferryhttp_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryhttp"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	ok := map[string]string{
		`abc-123`:                            "abc-123",
		`"8e03978e-40d5-43e8-bc93"`:          "8e03978e-40d5-43e8-bc93",
		`  tok  `:                            "tok",
		`"with space"`:                       "with space",
		`"quote \" and \\ slash"`:            `quote " and \ slash`,
		`7f1c9a2e:order:42`:                  "7f1c9a2e:order:42",
		`"` + strings.Repeat("a", 255) + `"`: strings.Repeat("a", 255),
	}
	for in, want := range ok {
		got, err := ferryhttp.ParseKey(in, 255)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
	for _, in := range []string{"", "  ", `""`, `" "`, `"open`, `"a"b`, `"a";x=1`, `"\n"`, `"\x"`, "a b", "a,b", "a;b",
		"caf\u00e9", `"caf` + "\u00e9" + `"`, "a\x00", strings.Repeat("a", 256)} {
		_, err := ferryhttp.ParseKey(in, 255)
		require.ErrorIs(t, err, ferryhttp.ErrInvalidKey, "%q", in)
	}
}

// FuzzParseKey: no input panics; an accepted key is 1 to 255 bytes of
// visible ASCII or space, not blank, and quoting it as an sf-string parses
// back to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `""`, `"`, "\"a\" ", "a\tb", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ferryhttp.ParseKey(in, 255)
		if err != nil {
			require.ErrorIs(t, err, ferryhttp.ErrInvalidKey)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(key))
		require.LessOrEqual(t, len(key), 255)
		for i := 0; i < len(key); i++ {
			require.True(t, key[i] >= 0x20 && key[i] <= 0x7e, "byte %q in %q", key[i], key)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := ferryhttp.ParseKey(quoted, 255)
		require.NoError(t, err)
		require.Equal(t, key, again)
	})
}
