package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// finish readies the command tree under root for the command line, once
// every command is added: cobra's own help, version and completion
// commands and flags are created now rather than when a command runs, so
// that what follows covers them too.
//
//   - A bool flag is shown in help as --flag, as Go's flag package shows
//     it, not --flag[=true|false]; a bool flag whose default is true says
//     so, with how to turn it off. --flag=false still works.
//   - A command that only groups others (ferry dead, ferry parked) prints
//     its help when called alone, and names an unknown subcommand, with
//     the nearest one, as a usage error (exit 2).
//   - Wrong arguments to any command are a usage error (exit 2).
//   - An unknown flag is a usage error that suggests the nearest flag, or
//     the commands that have a flag of that name.
func finish(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	root.SetFlagErrorFunc(flagError)
	// A group command runs (to judge its arguments) but takes no flags of
	// its own: its usage shows its subcommands, not a bare "ferry dead".
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}",
		"{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		switch {
		case c.HasSubCommands():
			c.Args = groupArgs
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		case c.Args != nil:
			check := c.Args
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(plainBool)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// boolFlag is the value of a bool flag as help shows it: pflag prints
// --flag[=true|false] for a value that says it is a bool flag
// (IsBoolFlag), and plain --flag for one of type "bool" that does not but
// takes no argument (NoOptDefVal).
type boolFlag struct{ v pflag.Value }

func (b *boolFlag) String() string     { return b.v.String() }
func (b *boolFlag) Set(s string) error { return b.v.Set(s) }
func (b *boolFlag) Type() string       { return "bool" }

func plainBool(f *pflag.Flag) {
	if _, done := f.Value.(*boolFlag); done || f.Value.Type() != "bool" {
		return
	}
	f.Value = &boolFlag{f.Value}
	f.NoOptDefVal = "true"
	if f.DefValue == "true" && !strings.Contains(f.Usage, "=false") {
		f.Usage += fmt.Sprintf("; --%s=false turns it off", f.Name)
	}
}

// groupArgs judges the arguments of a command that groups others: none
// shows its help; anything else is an unknown subcommand.
func groupArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return pflag.ErrHelp // cobra prints the help and exits 0
	}
	return usageError{unknownCommand(c, args[0])}
}

// unknownCommand names name as no subcommand of c, with the nearest ones.
func unknownCommand(c *cobra.Command, name string) error {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if near := nearest(name, names); len(near) > 0 {
		return fmt.Errorf("unknown command %q for %q; did you mean %s?", name, c.CommandPath(), strings.Join(near, " or "))
	}
	return fmt.Errorf("unknown command %q for %q (its commands: %s)", name, c.CommandPath(), strings.Join(names, ", "))
}

// flagError is the error of a flag the command line got wrong: a usage
// error, with the nearest flag when the flag is unknown.
func flagError(c *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" {
		return usageError{err}
	}
	name := ne.GetSpecifiedName()
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !slices.Contains(names, f.Name) {
			names = append(names, f.Name)
		}
	})
	if near := nearest(name, names); len(near) > 0 {
		for i, n := range near {
			near[i] = "--" + n
		}
		return usageError{fmt.Errorf("unknown flag --%s for %s; did you mean %s?", name, c.CommandPath(),
			strings.Join(near, " or "))}
	}
	if others := commandsWithFlag(c.Root(), name); len(others) > 0 {
		return usageError{fmt.Errorf("unknown flag --%s for %s: it is a flag of %s", name, c.CommandPath(),
			strings.Join(others, ", "))}
	}
	return usageError{fmt.Errorf("unknown flag --%s for %s (%s --help lists its flags)", name, c.CommandPath(), c.CommandPath())}
}

// commandsWithFlag lists the commands under root that take flag name.
func commandsWithFlag(root *cobra.Command, name string) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.IsAvailableCommand() && c.LocalNonPersistentFlags().Lookup(name) != nil {
			out = append(out, c.CommandPath())
		} else if c.PersistentFlags().Lookup(name) != nil {
			out = append(out, c.CommandPath()+" (and its commands)")
			return
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// nearest returns the names closest to typed: those within an edit
// distance of 2 (a third of typed's length, when longer), or that start
// with typed, the closest first. None when typed is too short to judge.
func nearest(typed string, names []string) []string {
	if len(typed) < 2 {
		return nil
	}
	limit := max(2, len(typed)/3)
	type cand struct {
		name string
		d    int
	}
	var cands []cand
	lower := strings.ToLower(typed)
	for _, n := range names {
		d := editDistance(lower, strings.ToLower(n))
		if strings.HasPrefix(strings.ToLower(n), lower) {
			d = min(d, 1)
		}
		if d <= limit {
			cands = append(cands, cand{n, d})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	var out []string
	for _, c := range cands {
		if c.d > cands[0].d || len(out) == 3 {
			break
		}
		out = append(out, c.name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fieldAndFlag matches the "(Declare, --declare)" a library's error puts
// after a hint, naming the setting both as its Go field and as ferry's
// flag; the command line names only the flag.
var fieldAndFlag = regexp.MustCompile(`\((?:[A-Z][A-Za-z0-9]*\.)*[A-Z][A-Za-z0-9]*, (--[a-z][a-z0-9-]*)\)`)

// errorText is the text ferry prints for err: passwords removed, a
// library's Go field names left out where it names the flag as well, on
// one line when the driver wrote several (pgx lists each host it tried,
// and tries each twice with sslmode=prefer: the repeated lines are said
// once).
func errorText(s string) string {
	s = fieldAndFlag.ReplaceAllString(s, "($1)")
	return oneLine(s)
}
