package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

var effectFields = []string{"name", "consumer", "inbox_database_url", "inbox_database_url_env", "marker_table",
	"event_type", "aggregate_type", "key", "older_than"}

// parseEffects reads reconcile.effects: the mappings of ferryadmin.Effect,
// checked here so that an error names the file's line and field.
func parseEffects(n *yaml.Node) ([]ferryadmin.Effect, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: reconcile.effects must be a list", n.Line)
	}
	var out []ferryadmin.Effect
	for i, item := range n.Content {
		at := fmt.Sprintf("reconcile.effects[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: %s must be a mapping", item.Line, at)
		}
		e := ferryadmin.Effect{OlderThan: ferryadmin.DefaultEffectOlderThan}
		var olderThan string
		fields := map[string]*string{"name": &e.Name, "consumer": &e.Consumer, "inbox_database_url": &e.InboxDatabaseURL,
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
		case (e.InboxDatabaseURL == "") == (e.InboxURLEnv == ""):
			return nil, fmt.Errorf("line %d: %s: set one of inbox_database_url (the consumer's database) or "+
				"inbox_database_url_env (the variable holding it)", item.Line, at)
		}
		if e.MarkerTable == "" {
			e.MarkerTable = "consumed_operation"
		}
		// The inbox's limit when its URL is here; else the smallest of
		// any store's (its URL is read from the environment later).
		inboxMax, _, known := tableLimits(e.InboxDatabaseURL)
		if !known {
			inboxMax = min(ferrypg.MaxTableLen, ferrysqlite.MaxTableLen, ferrymysql.MaxInboxTableLen)
		}
		if err := ferrytype.ValidateTableName(at+".marker_table", e.MarkerTable, inboxMax); err != nil {
			return nil, fmt.Errorf("line %d: %w", item.Line, err)
		}
		if olderThan != "" {
			d, err := time.ParseDuration(olderThan)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("line %d: %s.older_than %q: want a duration such as 5m", item.Line, at, olderThan)
			}
			e.OlderThan = d
		}
		if _, err := ferryadmin.ParseKeyTemplate(e.Key); err != nil {
			return nil, fmt.Errorf("line %d: %s.key: %w", item.Line, at, err)
		}
		if e.Name == "" {
			e.Name = e.Consumer + "." + e.EventType
		}
		out = append(out, e)
	}
	return out, nil
}

// resolveInboxURLs returns effects with the URL of each mapping that
// names a variable read from it.
func resolveInboxURLs(effects []ferryadmin.Effect) ([]ferryadmin.Effect, error) {
	out := make([]ferryadmin.Effect, len(effects))
	for i, e := range effects {
		if e.InboxURLEnv != "" {
			e.InboxDatabaseURL = os.Getenv(e.InboxURLEnv)
			if e.InboxDatabaseURL == "" {
				return nil, usageError{fmt.Errorf("reconcile effect %s: inbox_database_url_env names %s, which is not set", e.Name, e.InboxURLEnv)}
			}
		}
		out[i] = e
	}
	return out, nil
}
