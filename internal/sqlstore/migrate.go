package sqlstore

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/migrate"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = "ferry_migration"

// Migrate runs the migrations in fsys that component has not run yet, in
// version order, on ex: a connection or transaction on which the caller
// holds its dialect's migration lock. createTable is the dialect's DDL of
// MigrationTable, run first.
func Migrate(ctx context.Context, ex ferrystore.Executor, d Dialect, createTable, component string, fsys fs.FS) error {
	migs, err := migrate.List(fsys)
	if err != nil {
		return err
	}
	table := d.Quote(MigrationTable)
	if _, err := ex.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" "+createTable); err != nil {
		return fmt.Errorf("migrate: create %s: %w", MigrationTable, err)
	}
	rows, err := ex.Query(ctx, d.Rebind("SELECT version FROM "+table+" WHERE component = ?"), component)
	if err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: read applied versions: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	record := d.Rebind("INSERT INTO " + table + " (component, version, name) VALUES (?, ?, ?)")
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range migrate.Statements(m.Up) {
			if _, err := ex.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrate %s %04d_%s: %w", component, m.Version, m.Name, err)
			}
		}
		if _, err := ex.Exec(ctx, record, component, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %s: record version %d: %w", component, m.Version, err)
		}
	}
	return nil
}
