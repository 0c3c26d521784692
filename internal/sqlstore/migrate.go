package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = ferrystore.MigrationTable

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

// Schema compares the table of o with the migrations in fsys that
// component records in MigrationTable. It reads two tables and changes
// nothing; a table that does not exist (MigrationTable included) is an
// answer, not an error.
func (o *Outbox) Schema(ctx context.Context, component string, fsys fs.FS) (ferrystore.Schema, error) {
	s := ferrystore.Schema{Table: o.name}
	migs, err := migrate.List(fsys)
	if err != nil {
		return s, err
	}
	exists, err := o.exists(ctx, o.t)
	if err != nil {
		return s, fmt.Errorf("check schema of %s: %w", o.name, err)
	}
	s.TableExists = exists
	recorded := map[int]string{}
	if ok, err := o.exists(ctx, o.d.Quote(MigrationTable)); err != nil {
		return s, fmt.Errorf("check schema of %s: %w", o.name, err)
	} else if ok {
		rows, err := o.pool.Query(ctx, o.d.Rebind("SELECT version, name FROM "+o.d.Quote(MigrationTable)+
			" WHERE component = ? ORDER BY version"), component)
		if err != nil {
			return s, fmt.Errorf("check schema of %s: read %s: %w", o.name, MigrationTable, err)
		}
		for rows.Next() {
			var m ferrystore.MigrationID
			if err := rows.Scan(&m.Version, &m.Name); err != nil {
				rows.Close()
				return s, fmt.Errorf("check schema of %s: read %s: %w", o.name, MigrationTable, err)
			}
			recorded[m.Version] = m.Name
			s.Applied = append(s.Applied, m)
		}
		if err := rows.Close(); err != nil {
			return s, fmt.Errorf("check schema of %s: read %s: %w", o.name, MigrationTable, err)
		}
	}
	known := map[int]bool{}
	for _, m := range migs {
		known[m.Version] = true
		if _, ok := recorded[m.Version]; !ok {
			s.Missing = append(s.Missing, ferrystore.MigrationID{Version: m.Version, Name: m.Name})
		}
	}
	for _, m := range s.Applied {
		if !known[m.Version] {
			s.Unknown = append(s.Unknown, m)
		}
	}
	if exists && len(s.Applied) == 0 {
		// Created by another tool: nothing says which migrations it holds.
		s.Unrecorded, s.Missing = true, nil
	}
	return s, nil
}

// exists reports whether the quoted table t exists, by reading none of its
// rows.
func (o *Outbox) exists(ctx context.Context, t string) (bool, error) {
	rows, err := o.pool.Query(ctx, "SELECT 1 FROM "+t+" WHERE 1 = 0")
	if err == nil {
		for rows.Next() {
		}
		err = rows.Close()
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ferrytype.ErrUndefinedTable):
		return false, nil
	}
	return false, err
}
