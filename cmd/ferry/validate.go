package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// checkSettings checks, before the command connects to anything, the
// settings that need no server to be judged: every table name (--table,
// --marker-table, ...), against the limit of the database --database-url
// names, and the form of --database-url and --broker-url. A bad one is a
// configuration error (exit 2) that names it, instead of a connection
// error or a wait for a server that cannot help.
func checkSettings(cmd *cobra.Command) error {
	dbURL := ""
	if f := cmd.Flags().Lookup("database-url"); f != nil && f.Value.Type() == "string" {
		dbURL = f.Value.String()
	}
	outboxMax, inboxMax, _ := tableLimits(dbURL)
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() == "stringArray" {
			return // lists (ferry console's) check each of their values
		}
		v := f.Value.String()
		switch {
		case f.Name == "table":
			err = ferrytype.ValidateTableName("--"+f.Name, v, outboxMax)
		case strings.HasSuffix(f.Name, "-table"):
			err = ferrytype.ValidateTableName("--"+f.Name, v, inboxMax)
		case f.Name == "database-url" && v != "":
			err = open.ValidateDatabaseURL(v)
		case f.Name == "broker-url" && v != "":
			err = open.ValidateBrokerURL(v)
		}
	})
	return err
}

// tableLimits returns the longest outbox and inbox table names, in bytes,
// that the store of the database at rawURL takes, and whether rawURL names
// a database ferry knows; for another URL (or none), the longest any
// store takes, 63, and false: the URL's own check names its fault.
func tableLimits(rawURL string) (outbox, inbox int, known bool) {
	scheme, _, _ := strings.Cut(strings.ToLower(rawURL), ":")
	switch {
	case scheme == "":
	case slices.Contains(ferrymysql.Schemes(), scheme):
		return ferrymysql.MaxTableLen, ferrymysql.MaxInboxTableLen, true
	case slices.Contains(ferrypg.Schemes(), scheme):
		return ferrypg.MaxTableLen, ferrypg.MaxTableLen, true
	case slices.Contains(ferrysqlite.Schemes(), scheme):
		return ferrysqlite.MaxTableLen, ferrysqlite.MaxTableLen, true
	}
	return ferrytype.MaxIdentifierLen, ferrytype.MaxIdentifierLen, false
}
