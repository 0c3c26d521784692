package ferryadmin_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
)

// The key template builds what the consumer's decoder builds.
func TestKeyTemplate(t *testing.T) {
	t.Parallel()
	row := ferrystore.Row{}
	row.ID, row.AggregateType, row.AggregateID, row.Sequence, row.Type = "e1", "order", "42", 3, "OrderPaid"
	row.Payload = json.RawMessage(`{"order_id":42,"amount":10.50,"ok":true,"user":{"id":"u-7"},"none":null,"list":[1]}`)
	row.Headers = map[string]string{"Tenant": "acme"}
	for tmpl, want := range map[string]string{
		"order:{aggregate_id}:paid":                       "order:42:paid",
		"{aggregate_type}:{aggregate_id}#{aggregate_seq}": "order:42#3",
		"{event_type}/{event_id}/{destination}":           "OrderPaid/e1/OrderPaid",
		"order:{payload.order_id}:{payload.amount}":       "order:42:10.50",
		"{payload.user.id}:{payload.ok}":                  "u-7:true",
		"{header.Tenant}:{{literal}}":                     "acme:{literal}",
	} {
		k, err := ferryadmin.ParseKeyTemplate(tmpl)
		require.NoError(t, err, tmpl)
		got, err := k.Build(row)
		require.NoError(t, err, tmpl)
		require.Equal(t, want, got, tmpl)
	}
	for tmpl, want := range map[string]string{
		"{payload.none}":   "payload.none is null",
		"{payload.list}":   "payload.list is not a string, number or boolean",
		"{payload.user.x}": "payload.user.x is absent",
		"{payload.ok.x}":   "payload.ok is not an object",
		"{header.Missing}": "no header Missing",
		strings.Repeat("x", 127) + "{aggregate_id}": "longer than an inbox key may be",
	} {
		k, err := ferryadmin.ParseKeyTemplate(tmpl)
		require.NoError(t, err, tmpl)
		_, err = k.Build(row)
		require.ErrorContains(t, err, want, tmpl)
	}
}

// A template that cannot build a key for every event is refused.
func TestKeyTemplateErrors(t *testing.T) {
	t.Parallel()
	for tmpl, want := range map[string]string{
		"order:{aggregate}:paid":   "unknown placeholder {aggregate}",
		"order:{aggregate_id:paid": "unclosed {",
		"order:paid}":              "unmatched }",
		"order:paid":               "has no placeholder",
		"order:{payload.}:paid":    "empty member name",
		"order:{header.}":          "unknown placeholder {header.}",
	} {
		_, err := ferryadmin.ParseKeyTemplate(tmpl)
		require.ErrorContains(t, err, want, tmpl)
	}
}

func TestOneLineNeverCutsACharacter(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b c", ferryadmin.OneLine("a\n  b\tc", 10))
	got := ferryadmin.OneLine("ééééé", 6) // 10 bytes: 5 would cut the third é
	require.True(t, utf8.ValidString(got), "%q", got)
	require.Equal(t, "éé…", got)
	require.Equal(t, "12345678…", ferryadmin.OneLine("1234567890", 9))
	require.Equal(t, "123456789", ferryadmin.OneLine("123456789", 9))
	require.Equal(t, "0s", ferryadmin.FormatAge(-time.Second))
	require.Equal(t, "1.5s", ferryadmin.FormatAge(1537*time.Millisecond))
}
