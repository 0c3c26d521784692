// Package migrate renders the stores' embedded migration templates and
// splits them into statements. Each store runs them with its own locking.
package migrate

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Render executes every *.sql template in dir of src with data and returns
// the results as a flat file system.
func Render(src fs.FS, dir string, data any) (fs.FS, error) {
	entries, err := fs.ReadDir(src, dir)
	if err != nil {
		return nil, err
	}
	out := files{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		raw, err := fs.ReadFile(src, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(e.Name()).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("parse migration %s: %w", e.Name(), err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("render migration %s: %w", e.Name(), err)
		}
		out[e.Name()] = b.Bytes()
	}
	return out, nil
}

// List reads NNNN_name.up.sql / NNNN_name.down.sql pairs from fsys, sorted by
// version.
func List(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var up bool
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			up = true
		case strings.HasSuffix(name, ".down.sql"):
		default:
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".up.sql"), ".down.sql")
		num, label, ok := strings.Cut(base, "_")
		if !ok {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.up.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration file %q: bad version: %w", name, err)
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: label}
			byVersion[v] = m
		}
		if up {
			m.Up = string(data)
		} else {
			m.Down = string(data)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" {
			return nil, fmt.Errorf("migration %04d_%s has no up file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Statements splits a migration into statements: each ends with a semicolon
// at the end of a line, outside a $$-quoted body. Comment-only lines are
// dropped.
func Statements(sql string) []string {
	var (
		out    []string
		cur    strings.Builder
		dollar bool
	)
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if !dollar && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		if strings.Count(line, "$$")%2 == 1 {
			dollar = !dollar
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if !dollar && strings.HasSuffix(trimmed, ";") {
			s := strings.TrimSpace(cur.String())
			out = append(out, strings.TrimSuffix(s, ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
