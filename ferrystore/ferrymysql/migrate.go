package ferrymysql

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/internal/migrate"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = "ferry_migration"

// Apply runs the migrations in fsys that component has not run yet, in
// version order, holding GET_LOCK('ferry_migrate') on one connection so that
// concurrent migrators wait. MySQL commits each DDL statement on its own: a
// migration that fails halfway is reported and must be finished by hand
// (each statement is written to be re-runnable: IF NOT EXISTS).
func Apply(ctx context.Context, db *sql.DB, component string, fsys fs.FS) error {
	migs, err := migrate.List(fsys)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('ferry_migrate', 60)").Scan(&got); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migrate: could not take lock ferry_migrate within 60s")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('ferry_migrate')") //nolint:errcheck

	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+quote(MigrationTable)+` (
  component  VARCHAR(128) NOT NULL,
  version    INT          NOT NULL,
  name       VARCHAR(128) NOT NULL,
  applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (component, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", MigrationTable, err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM "+quote(MigrationTable)+" WHERE component = ?", component)
	if err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: read applied versions: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
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
	return nil
}
