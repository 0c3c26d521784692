package ferrykafka

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestConnectValue(t *testing.T) {
	for in, want := range map[string]string{
		"wallet":             "wallet",
		`"wallet"`:           "wallet",
		`"a \"quoted\" one"`: `a "quoted" one`,
		`7`:                  "7",
		`{"schema":{"type":"string","optional":false},"payload":"wallet"}`: "wallet",
		`{"schema":{"type":"int64"},"payload":7}`:                          "7",
		`{"schema":{"type":"string","optional":true},"payload":null}`:      "",
		// Not an envelope: other keys, a schema that is no object, text after it.
		`{"schema":{"type":"string"},"payload":"x","extra":1}`: `{"schema":{"type":"string"},"payload":"x","extra":1}`,
		`{"schema":"string","payload":"x"}`:                    `{"schema":"string","payload":"x"}`,
		`{"schema":{},"payload":"x"} tail`:                     `{"schema":{},"payload":"x"} tail`,
		`{"payload":"x"}`:                                      `{"payload":"x"}`,
		`"unterminated`:                                        `"unterminated`,
		"":                                                     "",
	} {
		require.Equal(t, want, connectValue(in), in)
	}
}

// FuzzConnectValue: any value decodes without a panic; a string written
// by any converter comes back as that string.
func FuzzConnectValue(f *testing.F) {
	f.Add("wallet")
	f.Add(`{"schema":{"type":"string"},"payload":"w"}`)
	f.Fuzz(func(t *testing.T, s string) {
		_ = connectValue(s)
		if !utf8.ValidString(s) {
			return // a converter writes UTF-8 only
		}
		q, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, s, connectValue(string(q)), "JsonConverter")
		env := `{"schema":{"type":"string","optional":false},"payload":` + string(q) + `}`
		require.Equal(t, s, connectValue(env), "JsonConverter with schemas")
	})
}
