package ferrypg

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/internal/sqlstore"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = sqlstore.MigrationTable

// migrateLockKey is the advisory lock migrators take ("ferry" in ASCII).
const migrateLockKey = 0x6665727279

// apply runs the migrations in fsys that component has not run yet, in one
// transaction under an advisory lock: PostgreSQL's DDL is transactional, so
// a failing migration leaves nothing behind.
func apply(ctx context.Context, c sqlstore.Pool, component string, fsys fs.FS) (err error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLockKey)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if err := sqlstore.Migrate(ctx, tx, dialect{}, `(
  component  varchar(128) NOT NULL,
  version    integer      NOT NULL,
  name       varchar(128) NOT NULL,
  applied_at timestamptz  NOT NULL DEFAULT now(),
  PRIMARY KEY (component, version)
)`, component, fsys); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
