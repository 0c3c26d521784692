package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// reconcileEffect is one entry of reconcile.effects: SENT events of one
// type whose effect one consumer must have applied, recorded by an inbox
// marker under a business key built from the event.
type reconcileEffect struct {
	Name          string        `json:"name"`
	Consumer      string        `json:"consumer"`
	InboxURLEnv   string        `json:"inbox_database_url_env,omitempty"`
	MarkerTable   string        `json:"marker_table"`
	EventType     string        `json:"event_type"`
	AggregateType string        `json:"aggregate_type,omitempty"`
	Key           string        `json:"key"`
	OlderThan     time.Duration `json:"-"` // older_than_seconds in the report

	inboxURL string // may hold a password: printed redacted only
	key      keyTemplate
	line     int
}

// defaultEffectOlderThan is how long after its SENT mark an event's effect
// is expected, when the mapping does not say.
const defaultEffectOlderThan = 5 * time.Minute

var effectFields = []string{"name", "consumer", "inbox_database_url", "inbox_database_url_env", "marker_table",
	"event_type", "aggregate_type", "key", "older_than"}

func parseEffects(n *yaml.Node) ([]reconcileEffect, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: reconcile.effects must be a list", n.Line)
	}
	var out []reconcileEffect
	for i, item := range n.Content {
		at := fmt.Sprintf("reconcile.effects[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: %s must be a mapping", item.Line, at)
		}
		e := reconcileEffect{line: item.Line, OlderThan: defaultEffectOlderThan}
		var olderThan string
		fields := map[string]*string{"name": &e.Name, "consumer": &e.Consumer, "inbox_database_url": &e.inboxURL,
			"inbox_database_url_env": &e.InboxURLEnv, "marker_table": &e.MarkerTable, "event_type": &e.EventType,
			"aggregate_type": &e.AggregateType, "key": &e.Key, "older_than": &olderThan}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			p, ok := fields[k.Value]
			if !ok {
				return nil, fmt.Errorf("line %d: %s: unknown field %s (want %s)", k.Line, at, k.Value, strings.Join(effectFields, ", "))
			}
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: %s.%s must be a string", v.Line, at, k.Value)
			}
			*p = v.Value
		}
		for _, req := range []struct{ name, v string }{{"consumer", e.Consumer}, {"event_type", e.EventType}, {"key", e.Key}} {
			if req.v == "" {
				return nil, fmt.Errorf("line %d: %s.%s is required", item.Line, at, req.name)
			}
		}
		switch {
		case len(e.Consumer) > 64:
			return nil, fmt.Errorf("line %d: %s.consumer is longer than 64 bytes", item.Line, at)
		case (e.inboxURL == "") == (e.InboxURLEnv == ""):
			return nil, fmt.Errorf("line %d: %s: set one of inbox_database_url (the consumer's database) or "+
				"inbox_database_url_env (the variable holding it)", item.Line, at)
		}
		if e.MarkerTable == "" {
			e.MarkerTable = "consumed_operation"
		}
		if err := ferrytype.ValidateIdentifier(at+".marker_table", e.MarkerTable, 49); err != nil {
			return nil, fmt.Errorf("line %d: %w", item.Line, err)
		}
		if olderThan != "" {
			d, err := time.ParseDuration(olderThan)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("line %d: %s.older_than %q: want a duration such as 5m", item.Line, at, olderThan)
			}
			e.OlderThan = d
		}
		var err error
		if e.key, err = parseKeyTemplate(e.Key); err != nil {
			return nil, fmt.Errorf("line %d: %s.key: %w", item.Line, at, err)
		}
		if e.Name == "" {
			e.Name = e.Consumer + "." + e.EventType
		}
		out = append(out, e)
	}
	return out, nil
}

// inboxDatabaseURL returns the consumer database's URL, from the file or
// from the variable it names.
func (e *reconcileEffect) inboxDatabaseURL() (string, error) {
	if e.InboxURLEnv == "" {
		return e.inboxURL, nil
	}
	v := os.Getenv(e.InboxURLEnv)
	if v == "" {
		return "", usageError{fmt.Errorf("reconcile effect %s: inbox_database_url_env names %s, which is not set", e.Name, e.InboxURLEnv)}
	}
	return v, nil
}

// keyTemplate builds a business key from an outbox row, as the consumer
// builds it from the delivery: "order:{aggregate_id}:paid". Placeholders
// name outbox columns ({event_id}, {aggregate_type}, {aggregate_id},
// {aggregate_seq}, {event_type}, {destination}), a member of the JSON
// payload ({payload.order_id}, {payload.order.id} for a nested one) or a
// header ({header.Tenant}); {{ and }} are literal braces.
type keyTemplate []keyPart

type keyPart struct {
	literal string
	field   string   // a column, "payload" or "header"
	path    []string // payload member path, or the header name
}

var keyColumns = map[string]bool{"event_id": true, "aggregate_type": true, "aggregate_id": true, "aggregate_seq": true,
	"event_type": true, "destination": true}

func parseKeyTemplate(s string) (keyTemplate, error) {
	var (
		t   keyTemplate
		lit strings.Builder
	)
	flush := func() {
		if lit.Len() > 0 {
			t = append(t, keyPart{literal: lit.String()})
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
			return nil, fmt.Errorf("%q: unmatched } at byte %d (write }} for a literal brace)", s, i)
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: unclosed { at byte %d", s, i)
			}
			name := s[i+1 : i+end]
			p, err := parsePlaceholder(name)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
			flush()
			t = append(t, p)
			placeholders++
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	if placeholders == 0 {
		return nil, fmt.Errorf("%q has no placeholder: every event would map to one key (want e.g. order:{aggregate_id}:paid)", s)
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

// build returns r's business key, or why it has none.
func (t keyTemplate) build(r ferrystore.Row) (string, error) {
	var (
		b       strings.Builder
		payload any
		decoded bool
	)
	for _, p := range t {
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
	if b.Len() > 128 {
		return "", fmt.Errorf("key is %d bytes, longer than an inbox key may be (128)", b.Len())
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

// runEffects checks each effect mapping, opening each consumer database
// once.
func runEffects(ctx context.Context, a ferrystore.Admin, effects []reconcileEffect, sc effectScan) ([]effectJSON, error) {
	stores := map[string]ferrystore.InboxStore{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	out := make([]effectJSON, 0, len(effects))
	for _, e := range effects {
		url, err := e.inboxDatabaseURL()
		if err != nil {
			return nil, err
		}
		id := url + "\x00" + e.MarkerTable
		s, ok := stores[id]
		if !ok {
			if s, err = open.InboxStore(ctx, url, &open.InboxConfig{MarkerTable: e.MarkerTable}); err != nil {
				return nil, fmt.Errorf("reconcile effect %s: %w", e.Name, err)
			}
			stores[id] = s
		}
		res, err := checkEffect(ctx, a, s, e, sc, url)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// effectFinding is a SENT event whose effect the consumer never recorded.
type effectFinding struct {
	EventID     string    `json:"event_id"`
	Key         string    `json:"key,omitempty"`
	AggregateID string    `json:"aggregate_id"`
	CreatedAt   time.Time `json:"created_at"`
	SentAt      time.Time `json:"sent_at"`
	// Problem: "no marker", or why no key could be built.
	Problem string `json:"problem"`
}

type effectJSON struct {
	reconcileEffect
	InboxDatabase    string          `json:"inbox_database"`
	OlderThanSeconds float64         `json:"older_than_seconds"`
	Scanned          int             `json:"scanned"`
	Complete         bool            `json:"complete"`
	Missing          []effectFinding `json:"missing"`
	More             bool            `json:"more"`
}

// effectScan bounds one mapping's run.
type effectScan struct {
	window    time.Duration
	batch     int // events per page, markers per lookup
	scanLimit int // most events read (0: no bound)
	limit     int // most findings listed
}

// checkEffect pages through the SENT events of e's type in the outbox and
// looks their keys up in the consumer's inbox, one bounded query on each
// side per page: the two may be different databases, even different
// dialects, so nothing is joined.
func checkEffect(ctx context.Context, a ferrystore.Admin, inbox ferrystore.InboxStore, e reconcileEffect, sc effectScan,
	inboxURL string) (effectJSON, error) {
	res := effectJSON{reconcileEffect: e, InboxDatabase: ferrytype.RedactURL(inboxURL) + " (" + inbox.Dialect() + ")",
		OlderThanSeconds: e.OlderThan.Seconds(), Missing: []effectFinding{}}
	q := ferrystore.SentEventsQuery{EventType: e.EventType, AggregateType: e.AggregateType, Window: sc.window,
		OlderThan: e.OlderThan, Limit: sc.batch}
	for {
		if sc.scanLimit > 0 {
			q.Limit = min(sc.batch, sc.scanLimit-res.Scanned)
		}
		rows, err := a.SentEvents(ctx, q)
		if err != nil {
			return res, fmt.Errorf("reconcile effect %s: read SENT events after %d: %w", e.Name, res.Scanned, err)
		}
		res.Scanned += len(rows)
		keys := make([]string, 0, len(rows))
		built := make([]string, len(rows))
		unkeyed := make([]error, len(rows))
		for i, r := range rows {
			if built[i], unkeyed[i] = e.key.build(r); unkeyed[i] == nil {
				keys = append(keys, built[i])
			}
		}
		found, err := inbox.ExistingMarkers(ctx, e.Consumer, keys)
		if err != nil {
			return res, fmt.Errorf("reconcile effect %s: look up markers of %s: %w", e.Name, e.Consumer, err)
		}
		for i, r := range rows { // in the outbox's order
			switch {
			case unkeyed[i] != nil:
				res.add(r, "", "no key: "+unkeyed[i].Error(), sc.limit)
			case !found[built[i]]:
				res.add(r, built[i], "no marker", sc.limit)
			}
		}
		switch {
		case len(rows) < q.Limit:
			res.Complete = true
			return res, nil
		case res.More:
			return res, nil // more than --limit findings: the list is full
		case sc.scanLimit > 0 && res.Scanned >= sc.scanLimit:
			return res, nil
		case ctx.Err() != nil:
			return res, ctx.Err()
		}
		q.After = ferrystore.SentCursorOf(rows[len(rows)-1])
	}
}

func (res *effectJSON) add(r ferrystore.Row, key, problem string, limit int) {
	if len(res.Missing) >= limit {
		res.More = true
		return
	}
	res.Missing = append(res.Missing, effectFinding{EventID: r.ID, Key: key, AggregateID: r.AggregateID,
		CreatedAt: r.CreatedAt, SentAt: r.SentAt, Problem: problem})
}
