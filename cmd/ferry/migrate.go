package main

import (
	"fmt"
	"io/fs"
	"sort"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/internal/open"
)

func newMigrate(g *globals) *cobra.Command {
	var print bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox tables",
		Long: `Applies the embedded migrations for the outbox table (--table) that have not run
yet, recording them in ferry_migration. Safe to run repeatedly and from several
machines at once. With --print it prints the SQL instead, for your own
migration tool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := open.Store(ctx, g.databaseURL, g.table)
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
			if err := store.Migrate(ctx); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "outbox table %s is up to date (%s)\n", store.Table(), store.Dialect())
			return nil
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the migrations' SQL instead of applying them")
	return cmd
}
