package ferrypg_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" for database/sql

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgDB   *sql.DB
	pgErr  error
)

func openPostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testenv.URL(testenv.EnvPostgres))
	if err != nil {
		pgErr = err
		return
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		pgErr = err
		return
	}
	pgPool = pool
	pgDB, pgErr = sql.Open("pgx", testenv.URL(testenv.EnvPostgres))
	if pgErr == nil {
		pgDB.SetMaxOpenConns(32)
	}
}

// Postgres returns the package's pgx pool on the test PostgreSQL database.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pgOnce.Do(openPostgres)
	if pgErr != nil {
		testenv.Unavailable(t, "PostgreSQL at "+ferrytype.RedactURL(testenv.URL(testenv.EnvPostgres)), pgErr)
	}
	return pgPool
}

// PostgresSQL returns the package's database/sql pool (pgx stdlib) on the
// test PostgreSQL database.
func PostgresSQL(t testing.TB) *sql.DB {
	t.Helper()
	Postgres(t)
	return pgDB
}

// Store returns a migrated store on a fresh table, used through
// database/sql, dropped when the test ends.
func Store(t testing.TB) ferrystore.Driver[*sql.Tx] {
	t.Helper()
	db := PostgresSQL(t)
	s, err := ferrypg.NewStdlib(db, &ferrypg.Config{Table: testenv.Name("ft_")})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Migrated(t, s, func(q string) error { _, err := db.Exec(q); return err })
	return s
}
