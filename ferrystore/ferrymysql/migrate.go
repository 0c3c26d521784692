package ferrymysql

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

// Apply runs the migrations in fsys that component has not run yet, in
// version order, holding GET_LOCK('ferry_migrate') on one connection so that
// concurrent migrators wait. MySQL commits each DDL statement on its own: a
// migration that fails halfway is reported and must be finished by hand
// (each statement is written to be re-runnable: IF NOT EXISTS).
func Apply(ctx context.Context, db *sql.DB, component string, fsys fs.FS) error {
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
	defer func() {
		// The connection goes back to the pool: release the lock even when
		// ctx ended. A failed release ends with the session anyway.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('ferry_migrate')")
	}()
	return sqlstore.Migrate(ctx, ferrystore.SQL(conn), dialect{}, `(
  component  VARCHAR(128) NOT NULL,
  version    INT          NOT NULL,
  name       VARCHAR(128) NOT NULL,
  applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (component, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, component, fsys)
}
