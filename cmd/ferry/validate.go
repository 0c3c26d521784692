package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// checkSettings checks, before the command connects to anything, the
// settings that need no server to be judged: every table name (--table,
// --marker-table, ...) and the form of --database-url and --broker-url. A
// bad one is a configuration error (exit 2) that names it, instead of a
// connection error or a wait for a server that cannot help.
func checkSettings(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() == "stringArray" {
			return // lists (ferry console's) check each of their values
		}
		v := f.Value.String()
		switch {
		case f.Name == "table" || strings.HasSuffix(f.Name, "-table"):
			err = ferrytype.ValidateIdentifier("--"+f.Name, v, 63)
		case f.Name == "database-url" && v != "":
			err = open.ValidateDatabaseURL(v)
		case f.Name == "broker-url" && v != "":
			err = open.ValidateBrokerURL(v)
		}
	})
	return err
}
