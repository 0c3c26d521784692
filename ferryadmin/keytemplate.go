package ferryadmin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/ferrystore"
)

// MaxKeyLen is the longest business key an inbox marker holds.
const MaxKeyLen = 128

// KeyTemplate builds a business key from an outbox row, as a consumer
// builds it from the delivery: "order:{aggregate_id}:paid". Placeholders
// name outbox columns ({event_id}, {aggregate_type}, {aggregate_id},
// {aggregate_seq}, {event_type}, {destination}), a member of the JSON
// payload ({payload.order_id}, {payload.order.id} for a nested one;
// numbers as written in the payload) or a header ({header.Tenant}); {{ and
// }} are literal braces. Make one with ParseKeyTemplate.
type KeyTemplate struct {
	text  string
	parts []keyPart
}

type keyPart struct {
	literal string
	field   string   // a column, "payload" or "header"
	path    []string // payload member path, or the header name
}

var keyColumns = map[string]bool{"event_id": true, "aggregate_type": true, "aggregate_id": true, "aggregate_seq": true,
	"event_type": true, "destination": true}

// ParseKeyTemplate parses s. A template without a placeholder is an
// error: every event would map to one key.
func ParseKeyTemplate(s string) (KeyTemplate, error) {
	var (
		t   = KeyTemplate{text: s}
		lit strings.Builder
	)
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, keyPart{literal: lit.String()})
			lit.Reset()
		}
	}
	placeholders := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '{' && i+1 < len(s) && s[i+1] == '{', c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte(c)
			i++
		case c == '}':
			return KeyTemplate{}, fmt.Errorf("%q: unmatched } at byte %d (write }} for a literal brace)", s, i)
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return KeyTemplate{}, fmt.Errorf("%q: unclosed { at byte %d", s, i)
			}
			p, err := parsePlaceholder(s[i+1 : i+end])
			if err != nil {
				return KeyTemplate{}, fmt.Errorf("%q: %w", s, err)
			}
			flush()
			t.parts = append(t.parts, p)
			placeholders++
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	if placeholders == 0 {
		return KeyTemplate{}, fmt.Errorf("%q has no placeholder: every event would map to one key (want e.g. order:{aggregate_id}:paid)", s)
	}
	return t, nil
}

func parsePlaceholder(name string) (keyPart, error) {
	if keyColumns[name] {
		return keyPart{field: name}, nil
	}
	if path, ok := strings.CutPrefix(name, "payload."); ok {
		segs := strings.Split(path, ".")
		for _, sg := range segs {
			if sg == "" {
				return keyPart{}, fmt.Errorf("{%s}: empty member name", name)
			}
		}
		return keyPart{field: "payload", path: segs}, nil
	}
	if h, ok := strings.CutPrefix(name, "header."); ok && h != "" {
		return keyPart{field: "header", path: []string{h}}, nil
	}
	cols := make([]string, 0, len(keyColumns))
	for c := range keyColumns {
		cols = append(cols, "{"+c+"}")
	}
	sort.Strings(cols)
	return keyPart{}, fmt.Errorf("unknown placeholder {%s} (want %s, {payload.member} or {header.Name})", name, strings.Join(cols, ", "))
}

// String returns the template's text.
func (t KeyTemplate) String() string { return t.text }

// Build returns r's business key, or why it has none: a payload member or
// header absent, a payload that is not JSON, a key longer than
// MaxKeyLen.
func (t KeyTemplate) Build(r ferrystore.Row) (string, error) {
	var (
		b       strings.Builder
		payload any
		decoded bool
	)
	for _, p := range t.parts {
		switch p.field {
		case "":
			b.WriteString(p.literal)
		case "event_id":
			b.WriteString(r.ID)
		case "aggregate_type":
			b.WriteString(r.AggregateType)
		case "aggregate_id":
			b.WriteString(r.AggregateID)
		case "aggregate_seq":
			b.WriteString(strconv.FormatInt(r.Sequence, 10))
		case "event_type":
			b.WriteString(r.Type)
		case "destination":
			b.WriteString(r.Route())
		case "header":
			v, ok := r.Headers[p.path[0]]
			if !ok {
				return "", fmt.Errorf("no header %s", p.path[0])
			}
			b.WriteString(v)
		case "payload":
			if !decoded {
				dec := json.NewDecoder(bytes.NewReader(r.Payload))
				dec.UseNumber()
				if err := dec.Decode(&payload); err != nil {
					return "", fmt.Errorf("payload is not JSON: %v", err)
				}
				decoded = true
			}
			v, err := member(payload, p.path)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		}
	}
	if b.Len() > MaxKeyLen {
		return "", fmt.Errorf("key is %d bytes, longer than an inbox key may be (%d)", b.Len(), MaxKeyLen)
	}
	return b.String(), nil
}

// member returns the scalar at path in v, as text: strings as they are,
// numbers as written in the payload, booleans as true or false.
func member(v any, path []string) (string, error) {
	at := "payload"
	for _, seg := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("%s is not an object", at)
		}
		at += "." + seg
		if v, ok = obj[seg]; !ok {
			return "", fmt.Errorf("%s is absent", at)
		}
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", fmt.Errorf("%s is null", at)
	}
	return "", fmt.Errorf("%s is not a string, number or boolean", at)
}
