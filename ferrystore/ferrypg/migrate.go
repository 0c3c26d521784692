package ferrypg

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/internal/migrate"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = "ferry_migration"

// migrateLockKey is the advisory lock migrators take ("ferry" in ASCII).
const migrateLockKey = 0x6665727279

// apply runs the migrations in fsys that component has not run yet, in one
// transaction: PostgreSQL's DDL is transactional, so a failing migration
// leaves nothing behind.
func apply(ctx context.Context, c conn, component string, fsys fs.FS) (err error) {
	migs, err := migrate.List(fsys)
	if err != nil {
		return err
	}
	tx, err := c.begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLockKey)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+quote(MigrationTable)+` (
  component  varchar(128) NOT NULL,
  version    integer      NOT NULL,
  name       varchar(128) NOT NULL,
  applied_at timestamptz  NOT NULL DEFAULT now(),
  PRIMARY KEY (component, version)
)`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", MigrationTable, err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+quote(MigrationTable)+" WHERE component = $1", component)
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
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range migrate.Statements(m.Up) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrate %s %04d_%s: %w", component, m.Version, m.Name, err)
			}
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+quote(MigrationTable)+" (component, version, name) VALUES ($1, $2, $3)",
			component, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %s: record version %d: %w", component, m.Version, err)
		}
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
