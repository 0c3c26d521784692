package sqlstore

import (
	"context"
	"database/sql"
	"io/fs"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
)

// DefaultTable is the outbox table's default name, the seed schema's.
const DefaultTable = "outbox_event"

// TableName returns the configured table name, DefaultTable when empty,
// validated as an identifier of at most maxLen bytes.
func TableName(configured string, maxLen int) (string, error) {
	if configured == "" {
		configured = DefaultTable
	}
	if err := ferrytype.ValidateTableName("table", configured, maxLen); err != nil {
		return "", err
	}
	return configured, nil
}

// MigrationFS renders the outbox migration templates in src's
// "migrations" directory for table (DefaultTable when empty, at most
// maxLen bytes). The templates see Table, SeqTable, RelayTable,
// LeaseTable, LogTable (migration 0005's, which 0006 moves into
// LeaseTable), PendingIndex, AggregateIndex, SettledIndex and DeadIndex
// quoted, and Name as it is.
func MigrationFS(d Dialect, src fs.FS, table string, maxLen int) (fs.FS, error) {
	table, err := TableName(table, maxLen)
	if err != nil {
		return nil, err
	}
	return migrate.Render(src, "migrations", map[string]string{
		"Table":          d.Quote(table),
		"SeqTable":       d.Quote(table + "_seq"),
		"RelayTable":     d.Quote(RelayTable(table)),
		"LeaseTable":     d.Quote(LeaseTable(table)),
		"LogTable":       d.Quote(table + "_log"),
		"PendingIndex":   d.Quote(table + "_pending_idx"),
		"AggregateIndex": d.Quote(table + "_aggregate_idx"),
		"SettledIndex":   d.Quote(table + "_settled_idx"),
		"DeadIndex":      d.Quote(table + "_dead_idx"),
		"Name":           table,
	})
}

// RelayTable is the name of the heartbeat table of the outbox table:
// table + "_relay".
func RelayTable(table string) string { return table + "_relay" }

// LeaseTable is the name of the lease table of the outbox table: table +
// "_lease", one row per lease (ferrystore.LeaseMaintenance,
// ferrystore.LeaseLog).
func LeaseTable(table string) string { return table + "_lease" }

// SQLDB is the database/sql pool of a store or an inbox, and whether the
// store opened it (and so closes it).
type SQLDB struct {
	db    *sql.DB
	owned bool
}

// NewSQLDB returns db, which the store closes on Close when owned.
func NewSQLDB(db *sql.DB, owned bool) SQLDB { return SQLDB{db: db, owned: owned} }

// DB returns the pool.
func (s *SQLDB) DB() *sql.DB { return s.db }

// Close closes the pool if the store opened it; a pool the caller passed
// in stays open.
func (s *SQLDB) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// UnwrapTx returns an executor for the caller's transaction.
func (s *SQLDB) UnwrapTx(tx *sql.Tx) ferrystore.Executor { return ferrystore.SQL(tx) }

// SQLTxs begins, commits and rolls back an inbox's database/sql
// transactions.
type SQLTxs struct{ SQLDB }

// Begin starts a transaction.
func (s *SQLTxs) Begin(ctx context.Context) (*sql.Tx, error) { return s.db.BeginTx(ctx, nil) }

// Commit commits tx.
func (s *SQLTxs) Commit(_ context.Context, tx *sql.Tx) error { return tx.Commit() }

// Rollback rolls tx back.
func (s *SQLTxs) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }
