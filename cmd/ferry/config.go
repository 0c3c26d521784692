package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrytype"
)

// Settings come from four places, the first that has one winning: the
// command line, the environment (FERRY_*), the config file (--config or
// FERRY_CONFIG, YAML), the flag's default. Every flag bound to an
// environment variable (bindEnv) is also a config file key: a global flag
// by its own name (--database-url: database_url), a command's flag under
// the command's name (ferry relay --batch-size: relay.batch_size), a flag
// several commands share under the key it was bound to (bindShared:
// inbox.marker_table for conflicts and purge). The file may also hold
// reconcile.checks and reconcile.effects, which have no flag.

// envConfig names the variable that points at the config file.
const envConfig = "FERRY_CONFIG"

// errPrinted ends a command after --print-config printed the settings.
var errPrinted = errors.New("settings printed")

// fileValue is one setting read from the config file.
type fileValue struct {
	value string
	line  int
}

// configFile is a parsed config file.
type configFile struct {
	path    string
	values  map[string]fileValue
	checks  []ferryadmin.Check
	effects []ferryadmin.Effect
}

// setting records where a flag's value came from.
type setting struct {
	key, value, source string
}

// configKey is the config file key of flag f of cmd.
func configKey(cmd *cobra.Command, f *pflag.Flag) string {
	if k := f.Annotations["key"]; len(k) > 0 {
		return k[0] // a setting several commands share (bindShared)
	}
	snake := strings.ReplaceAll(f.Name, "-", "_")
	if cmd.Root().PersistentFlags().Lookup(f.Name) != nil {
		return snake
	}
	path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
	return strings.ReplaceAll(path, " ", ".") + "." + snake
}

// knownKeys lists every key a config file may hold, for every command.
func knownKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{"reconcile.checks": true, "reconcile.effects": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if len(f.Annotations["env"]) > 0 && f.Name != "config" {
				keys[configKey(c, f)] = true
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return keys
}

// loadConfig reads and checks the config file at path.
func loadConfig(root *cobra.Command, path string) (*configFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("config file: %w", err)}
	}
	return parseConfig(root, path, raw)
}

// parseConfig parses and checks raw, the config file at path.
func parseConfig(root *cobra.Command, path string, raw []byte) (*configFile, error) {
	cf := &configFile{path: path, values: map[string]fileValue{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, usageError{fmt.Errorf("config %s: %w", path, err)}
	}
	if len(doc.Content) == 0 {
		return cf, nil // empty file
	}
	known := knownKeys(root)
	if err := cf.flatten(doc.Content[0], "", known); err != nil {
		return nil, usageError{fmt.Errorf("config %s: %w", path, err)}
	}
	return cf, nil
}

func (cf *configFile) flatten(n *yaml.Node, prefix string, known map[string]bool) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s must be a mapping of settings", n.Line, orTop(prefix))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if _, dup := cf.values[key]; dup {
			return fmt.Errorf("line %d: %s is set twice", k.Line, key)
		}
		switch {
		case key == "reconcile.checks":
			checks, err := parseChecks(v)
			if err != nil {
				return err
			}
			cf.checks = checks
		case key == "reconcile.effects":
			effects, err := parseEffects(v)
			if err != nil {
				return err
			}
			cf.effects = effects
		case v.Kind == yaml.MappingNode:
			if known[key] {
				return fmt.Errorf("line %d: %s takes a value, not a mapping", v.Line, key)
			}
			if !hasPrefix(known, key+".") {
				return fmt.Errorf("line %d: unknown section %s%s", k.Line, key, suggest(known, key))
			}
			if err := cf.flatten(v, key, known); err != nil {
				return err
			}
		case !known[key]:
			return fmt.Errorf("line %d: unknown setting %s%s", k.Line, key, suggest(known, key))
		case v.Kind == yaml.ScalarNode:
			if v.Tag == "!!null" {
				continue
			}
			cf.values[key] = fileValue{value: v.Value, line: v.Line}
		case v.Kind == yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: %s must be a list of values", it.Line, key)
				}
				items = append(items, it.Value)
			}
			cf.values[key] = fileValue{value: strings.Join(items, ","), line: v.Line}
		default:
			return fmt.Errorf("line %d: %s: unsupported value", v.Line, key)
		}
	}
	return nil
}

func parseChecks(n *yaml.Node) ([]ferryadmin.Check, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: reconcile.checks must be a list", n.Line)
	}
	var out []ferryadmin.Check
	for i, item := range n.Content {
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: reconcile.checks[%d] must be a mapping", item.Line, i)
		}
		c := ferryadmin.Check{}
		fields := map[string]*string{"name": &c.Name, "table": &c.Table, "key_column": &c.KeyColumn,
			"time_column": &c.TimeColumn, "aggregate_type": &c.AggregateType, "event_type": &c.EventType}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			p, ok := fields[k.Value]
			if !ok {
				return nil, fmt.Errorf("line %d: reconcile.checks[%d]: unknown field %s (want name, table, key_column, "+
					"time_column, aggregate_type, event_type)", k.Line, i, k.Value)
			}
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: reconcile.checks[%d].%s must be a string", v.Line, i, k.Value)
			}
			*p = v.Value
		}
		for _, req := range []struct{ name, v string }{{"table", c.Table}, {"key_column", c.KeyColumn},
			{"time_column", c.TimeColumn}, {"event_type", c.EventType}} {
			if req.v == "" {
				return nil, fmt.Errorf("line %d: reconcile.checks[%d].%s is required", item.Line, i, req.name)
			}
		}
		for _, id := range []struct{ name, v string }{{"table", c.Table}, {"key_column", c.KeyColumn}, {"time_column", c.TimeColumn}} {
			if err := ferrytype.ValidateIdentifier(fmt.Sprintf("reconcile.checks[%d].%s", i, id.name), id.v, 63); err != nil {
				return nil, fmt.Errorf("line %d: %w", item.Line, err)
			}
		}
		if c.Name == "" {
			c.Name = c.Table + "." + c.EventType
		}
		out = append(out, c)
	}
	return out, nil
}

func orTop(prefix string) string {
	if prefix == "" {
		return "the file"
	}
	return prefix
}

func hasPrefix(known map[string]bool, p string) bool {
	for k := range known {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// suggest names the known keys of key's section, to help a typo.
func suggest(known map[string]bool, key string) string {
	section := ""
	if i := strings.LastIndex(key, "."); i >= 0 {
		section = key[:i+1]
	}
	var names []string
	for k := range known {
		rest, ok := strings.CutPrefix(k, section)
		if ok && !strings.Contains(rest, ".") {
			names = append(names, rest)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	where := "top-level"
	if section != "" {
		where = strings.TrimSuffix(section, ".")
	}
	return fmt.Sprintf(" (%s settings: %s)", where, strings.Join(names, ", "))
}

// resolve fills every configurable flag of cmd that the command line did
// not set: from its environment variable, else from the config file.
func resolve(cmd *cobra.Command, g *globals) error {
	path := g.configPath
	if f := cmd.Flags().Lookup("config"); f != nil && !f.Changed {
		if v, ok := os.LookupEnv(envConfig); ok {
			path = v
		}
	}
	var cf *configFile
	if path != "" {
		var err error
		if cf, err = loadConfig(cmd.Root(), path); err != nil {
			return err
		}
	}
	g.file = cf
	g.settings = nil
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		envs := f.Annotations["env"]
		if err != nil || len(envs) == 0 || f.Name == "config" {
			return
		}
		key := configKey(cmd, f)
		s := setting{key: key, source: "default"}
		switch {
		case f.Changed:
			s.source = "flag --" + f.Name
		case firstEnv(envs) != "":
			env := firstEnv(envs)
			v, _ := os.LookupEnv(env)
			if serr := f.Value.Set(v); serr != nil {
				err = usageError{fmt.Errorf("%s=%q: %v", env, ferrytype.RedactURL(v), serr)}
				return
			}
			s.source = "env " + env
		case cf != nil && cf.values[key] != (fileValue{}):
			fv := cf.values[key]
			if serr := f.Value.Set(fv.value); serr != nil {
				err = usageError{fmt.Errorf("config %s line %d: %s: %q: %v", cf.path, fv.line, key,
					ferrytype.RedactURL(fv.value), serr)}
				return
			}
			s.source = fmt.Sprintf("file %s:%d", cf.path, fv.line)
		}
		s.value = ferrytype.RedactURL(f.Value.String())
		g.settings = append(g.settings, s)
	})
	if err != nil {
		return err
	}
	if g.printConfig {
		printSettings(cmd.OutOrStdout(), g.settings)
		return errPrinted
	}
	return nil
}

func lookupEnv(name string) bool {
	_, ok := os.LookupEnv(name)
	return ok
}

// fileSetting returns a setting of another command from the environment
// or the config file (e.g. relay.retention for reconcile), or "".
func (g *globals) fileSetting(key, env string) string {
	if v, ok := os.LookupEnv(env); ok {
		return v
	}
	if g.file != nil {
		return g.file.values[key].value
	}
	return ""
}

func printSettings(w io.Writer, settings []setting) {
	sort.Slice(settings, func(i, j int) bool { return settings[i].key < settings[j].key })
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	for _, s := range settings {
		v := s.value
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.key, v, s.source)
	}
	tw.Flush()
	_, _ = w.Write(b.Bytes())
}

// firstEnv returns the first of envs (a setting's variable, then its older
// spellings) that is set, or "".
func firstEnv(envs []string) string {
	for _, e := range envs {
		if lookupEnv(e) {
			return e
		}
	}
	return ""
}
