package ferrysqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// MigrationTable records which migrations ran, per component.
const MigrationTable = sqlstore.MigrationTable

// Apply runs the migrations in fsys that component has not run yet, in one
// BEGIN IMMEDIATE transaction, which also keeps concurrent migrators apart.
func Apply(ctx context.Context, db *sql.DB, component string, fsys fs.FS) (err error) {
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
	if err := sqlstore.Migrate(ctx, ferrystore.SQL(conn), dialect{}, `(
  component  TEXT    NOT NULL,
  version    INTEGER NOT NULL,
  name       TEXT    NOT NULL,
  applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  PRIMARY KEY (component, version)
)`, component, fsys); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
