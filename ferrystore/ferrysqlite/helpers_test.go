package ferrysqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testenv"
)

// SQLite returns a new SQLite database in a temporary directory, opened
// with ferry's settings.
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	s, err := ferrysqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "ferry.db"), nil)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.DB()
}

// Store returns a migrated store on a fresh table of a new database.
func Store(t testing.TB) ferrystore.Driver[*sql.Tx] {
	t.Helper()
	db := SQLite(t)
	s, err := ferrysqlite.New(db, &ferrysqlite.Config{Table: testenv.Name("ft_")})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Migrated(t, s, func(q string) error { _, err := db.Exec(q); return err })
	return s
}
