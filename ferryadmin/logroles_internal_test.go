package ferryadmin

import (
	"slices"
	"testing"

	"github.com/ferrydev/ferry/ferrystore"
)

func TestLogRoles(t *testing.T) {
	relay := func(id, source string, alive bool) RelayInfo {
		return RelayInfo{RelayBeat: ferrystore.RelayBeat{ID: id, Source: source}, Alive: alive}
	}
	for _, c := range []struct {
		name     string
		owner    string
		relays   []RelayInfo
		roles    []string
		standbys []string
	}{
		{"reader and standby", "a",
			[]RelayInfo{relay("a", "log", true), relay("b", "log", true), relay("c", "table", true)},
			[]string{LogRoleReader, LogRoleStandby, ""}, []string{"b"}},
		{"no reader: every log relay alive stands by", "",
			[]RelayInfo{relay("a", "log", true), relay("b", "log", false)},
			[]string{LogRoleStandby, ""}, []string{"a"}},
		{"a reader whose row is older than the source column", "a",
			[]RelayInfo{relay("a", "", true), relay("b", "", true)},
			[]string{LogRoleReader, ""}, []string{}},
		{"a killed reader keeps its role while its lease lasts", "a",
			[]RelayInfo{relay("a", "log", false), relay("b", "log", true)},
			[]string{LogRoleReader, LogRoleStandby}, []string{"b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			standbys := logRoles(c.relays, c.owner)
			if !slices.Equal(standbys, c.standbys) {
				t.Errorf("standbys %q, want %q", standbys, c.standbys)
			}
			for i, r := range c.relays {
				if r.LogRole != c.roles[i] {
					t.Errorf("relay %s: role %q, want %q", r.ID, r.LogRole, c.roles[i])
				}
			}
		})
	}
}
