package ferrysqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/internal/migrate"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = "ferry_migration"

// Apply runs the migrations in fsys that component has not run yet, in one
// BEGIN IMMEDIATE transaction, which also keeps concurrent migrators apart.
func Apply(ctx context.Context, db *sql.DB, component string, fsys fs.FS) (err error) {
	migs, err := migrate.List(fsys)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+quote(MigrationTable)+` (
  component  TEXT    NOT NULL,
  version    INTEGER NOT NULL,
  name       TEXT    NOT NULL,
  applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  PRIMARY KEY (component, version)
)`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", MigrationTable, err)
	}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM "+quote(MigrationTable)+" WHERE component = ?", component)
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
		return err
	}
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range migrate.Statements(m.Up) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate %s %04d_%s: %w", component, m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+quote(MigrationTable)+" (component, version, name) VALUES (?, ?, ?)",
			component, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %s: record version %d: %w", component, m.Version, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
