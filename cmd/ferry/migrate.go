package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// migratable is what migrate needs of an outbox or an inbox store.
type migratable interface {
	Dialect() string
	Migrate(ctx context.Context) error
	Migrations() (fs.FS, error)
	Close() error
}

func newMigrate(g *globals) *cobra.Command {
	var (
		print, inbox bool
		tables       inboxTables
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox tables (or, with --inbox, a consumer's inbox tables)",
		Long: `Applies the embedded migrations for the outbox table (--table) that have not run
yet, recording them in ferry_migration. Safe to run repeatedly and from several
machines at once. With --print it prints the SQL instead, for your own
migration tool.

With --inbox it migrates a consumer's inbox tables instead (--marker-table,
--conflict-table, --version-table), in the consumer's database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var (
				store  migratable
				outbox ferrystore.Admin // nil with --inbox
				what   string
				err    error
			)
			if inbox {
				store, err = tables.open(cmd, g)
				what = "inbox tables " + tables.markers + ", " + tables.conflicts + ", " + tables.versions + ", " + tables.keys
			} else {
				outbox, err = open.Store(ctx, g.databaseURL, g.table)
				if outbox != nil {
					store, what = outbox, "outbox table "+outbox.Table()
				}
			}
			if err != nil {
				return err
			}
			defer store.Close()
			if print {
				fsys, err := store.Migrations()
				if err != nil {
					return err
				}
				names, err := fs.Glob(fsys, "*.up.sql")
				if err != nil {
					return err
				}
				sort.Strings(names)
				for _, n := range names {
					b, err := fs.ReadFile(fsys, n)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "-- %s\n%s\n", n, b)
				}
				return nil
			}
			// What ran: the outbox's migrations missing before (another
			// ferry migrate may run some of them meanwhile; Migrate is safe
			// to run concurrently). An inbox records no schema to compare:
			// whether its conflict table was there says whether the tables
			// were created now.
			var (
				before  []ferrystore.MigrationID
				known   bool // before is what the table lacked
				created bool // the inbox tables were missing
			)
			if outbox != nil {
				if sc, err := outbox.CheckSchema(ctx); err == nil {
					before, known = sc.Missing, true
				}
			} else if ib, ok := store.(ferrystore.InboxStore); ok {
				if _, err := ib.Conflicts(ctx, ferrystore.ConflictFilter{Limit: 1}); err != nil {
					created = errors.Is(ib.Classify(err), ferrytype.ErrUndefinedTable)
				}
			}
			if err := store.Migrate(ctx); err != nil {
				return err
			}
			line := what + " (" + store.Dialect() + ")"
			switch {
			case outbox == nil && created:
				line += ": created"
			case outbox == nil:
				line += ": up to date"
			case known && len(before) == 0:
				line += ": up to date, nothing to apply"
			case known:
				ran := appliedNow(ctx, outbox, before)
				switch {
				case len(ran) > 0:
					line += ": applied " + strings.Join(ran, ", ")
				default:
					line += ": up to date (another ferry migrate applied what it lacked meanwhile)"
				}
			default:
				line += ": up to date"
			}
			// Events that died before migration 0004 recorded no error
			// class: record it once, so that the database groups them.
			if outbox != nil {
				n, err := ferryadmin.ClassifyErrors(ctx, outbox)
				if err != nil {
					return err
				}
				if n > 0 {
					line += fmt.Sprintf("; recorded the error class of %s that failed before 0004_dead",
						plural(n, "DEAD or DISCARDED event"))
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the migrations' SQL instead of applying them")
	cmd.Flags().BoolVar(&inbox, "inbox", false, "migrate a consumer's inbox tables instead of the outbox")
	tables.flags(cmd.Flags(), false)
	return cmd
}

// appliedNow lists the migrations of before that the outbox table has now.
func appliedNow(ctx context.Context, outbox ferrystore.Admin, before []ferrystore.MigrationID) []string {
	sc, err := outbox.CheckSchema(ctx)
	if err != nil {
		ran := make([]string, len(before)) // Migrate succeeded: it applied them
		for i, m := range before {
			ran[i] = m.String()
		}
		return ran
	}
	still := map[ferrystore.MigrationID]bool{}
	for _, m := range sc.Missing {
		still[m] = true
	}
	var ran []string
	for _, m := range before {
		if !still[m] {
			ran = append(ran, m.String())
		}
	}
	return ran
}
