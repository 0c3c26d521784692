package main

import (
	"os"
	"strings"
	"testing"
)

// FuzzConfigFile: the config file parser never panics, and refuses what it
// cannot use with a usage error (exit 2) that names the file.
func FuzzConfigFile(f *testing.F) {
	example, err := os.ReadFile("../../ferry.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{"", "database_url: [a, b]\n", "relay:\n  batch_size: {x: 1}\n", "relay: 3\n",
		"reconcile:\n  checks:\n    - {table: 'a;b', key_column: k, time_column: t, event_type: E}\n",
		"reconcile:\n  effects: [1]\n", "a: &x [*x]\n", "table: x\ntable: y\n", "- 1\n", "relay:\n  lanes:\n"} {
		f.Add([]byte(s))
	}
	root := newRoot()
	f.Fuzz(func(t *testing.T, raw []byte) {
		cf, err := parseConfig(root, "f.yaml", raw)
		if err == nil {
			if cf == nil {
				t.Fatal("no config and no error")
			}
			return
		}
		if !isUsage(err) {
			t.Fatalf("not a usage error: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "config f.yaml") {
			t.Fatalf("the error does not name the file: %v", err)
		}
	})
}
