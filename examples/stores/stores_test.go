package stores

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The snippets of docs/library.md run as written, on a database of their
// own (they use ferry's default table names): the order is PAID and its
// one event is in the outbox, or neither.
func TestPayOnEachDatabase(t *testing.T) {
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		admin := testsvc.MySQL(t)
		ctx := testsvc.Context(t, time.Minute)
		fresh(t, ctx, admin, "DROP DATABASE IF EXISTS ferry_stores_example", "CREATE DATABASE ferry_stores_example")
		cfg, err := ferrymysql.ParseURL(testsvc.URL(testsvc.EnvMySQL))
		require.NoError(t, err)
		cfg.DBName = "ferry_stores_example"
		cfg.InterpolateParams = true
		dsn := cfg.FormatDSN()
		db, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		defer db.Close()
		store, err := ferrymysql.New(db, nil)
		require.NoError(t, err)
		require.NoError(t, store.Migrate(ctx))
		fresh(t, ctx, db, "CREATE TABLE purchase_order (id VARCHAR(20) PRIMARY KEY, status VARCHAR(10) NOT NULL)",
			"INSERT INTO purchase_order VALUES ('42', 'NEW')")

		require.NoError(t, PayMySQL(ctx, dsn, "42"))
		requirePaid(t, ctx, db, "42")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin := testsvc.PostgresSQL(t)
		ctx := testsvc.Context(t, time.Minute)
		fresh(t, ctx, admin, "DROP DATABASE IF EXISTS ferry_stores_example WITH (FORCE)", "CREATE DATABASE ferry_stores_example")
		u, err := url.Parse(testsvc.URL(testsvc.EnvPostgres))
		require.NoError(t, err)
		u.Path = "/ferry_stores_example"
		db, err := sql.Open("pgx", u.String())
		require.NoError(t, err)
		defer db.Close()
		store, err := ferrypg.NewStdlib(db, nil)
		require.NoError(t, err)
		require.NoError(t, store.Migrate(ctx))
		fresh(t, ctx, db, "CREATE TABLE purchase_order (id TEXT PRIMARY KEY, status TEXT NOT NULL)",
			"INSERT INTO purchase_order VALUES ('42', 'NEW'), ('43', 'NEW')")

		require.NoError(t, PayPostgres(ctx, u.String(), "42"))
		requirePaid(t, ctx, db, "42")
		require.NoError(t, PayPostgresStdlib(ctx, u.String(), "43"))
		requirePaid(t, ctx, db, "43")
	})
}

func fresh(t *testing.T, ctx context.Context, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.ExecContext(ctx, s)
		require.NoError(t, err, s)
	}
}

func requirePaid(t *testing.T, ctx context.Context, db *sql.DB, id string) {
	t.Helper()
	var status string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT status FROM purchase_order WHERE id = '`+id+`'`).Scan(&status))
	require.Equal(t, "PAID", status)
	var events int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_event WHERE aggregate_id = '`+id+`' AND event_type = 'OrderPaid'`).Scan(&events))
	require.Equal(t, 1, events, "one event for order %s", id)
}
