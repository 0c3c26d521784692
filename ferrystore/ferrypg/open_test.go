package ferrypg_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/internal/testenv"
)

// A store and an inbox opened from a URL expose the pool they opened, for
// the service's own transactions, and close it on Close; made on the
// caller's pool, they return that pool and leave it open.
func TestPoolIsExposed(t *testing.T) {
	t.Parallel()
	callers := Postgres(t) // skips without PostgreSQL
	ctx := testenv.Context(t, time.Minute)
	url := testenv.URL(testenv.EnvPostgres)

	t.Run("OpenInbox", func(t *testing.T) {
		in, err := ferrypg.OpenInbox(ctx, url, nil)
		require.NoError(t, err)
		pool := in.Pool()
		require.NotNil(t, pool)
		require.NoError(t, pool.Ping(ctx))
		require.NoError(t, in.Close())
		require.Error(t, pool.Ping(ctx), "Close closes the pool OpenInbox opened")
	})
	t.Run("Open", func(t *testing.T) {
		s, err := ferrypg.Open(ctx, url, nil)
		require.NoError(t, err)
		pool := s.Pool()
		require.NoError(t, pool.Ping(ctx))
		require.NoError(t, s.Close())
		require.Error(t, pool.Ping(ctx), "Close closes the pool Open opened")
	})
	t.Run("CallersPool", func(t *testing.T) {
		in, err := ferrypg.NewInbox(callers, nil)
		require.NoError(t, err)
		require.Same(t, callers, in.Pool())
		require.NoError(t, in.Close())
		require.NoError(t, callers.Ping(ctx), "Close leaves the caller's pool open")

		db := PostgresSQL(t)
		std, err := ferrypg.NewStdlibInbox(db, nil)
		require.NoError(t, err)
		require.Same(t, db, std.DB())
		require.NoError(t, std.Close())
		require.NoError(t, db.PingContext(ctx), "Close leaves the caller's pool open")
	})
}

// ferry.ExpectTag takes what pgx.Tx's Exec returns: the command tag and
// the error.
func TestExpectTag(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, time.Minute)
	tx, err := Postgres(t).Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `CREATE TEMPORARY TABLE expect_tag (id int PRIMARY KEY) ON COMMIT DROP`)
	require.NoError(t, err)

	require.NoError(t, ferry.ExpectTag(tx.Exec(ctx, `INSERT INTO expect_tag (id) VALUES ($1)`, 1)))
	tag, err := tx.Exec(ctx, `INSERT INTO expect_tag (id) VALUES ($1), ($2)`, 2, 3)
	require.NoError(t, err)
	require.NoError(t, ferry.ExpectAffected(tag.RowsAffected(), 2))
	err = ferry.ExpectTag(tx.Exec(ctx, `UPDATE expect_tag SET id = 10 WHERE id = $1`, 9))
	require.ErrorIs(t, err, ferry.ErrNoEffect)
	require.EqualError(t, err, "ferry: statement had no effect: 0 rows affected, want 1")
	err = ferry.ExpectTag(tx.Exec(ctx, `UPDATE expect_tag_missing SET id = 1`))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "the statement's error passes through")
	require.Equal(t, "42P01", pe.Code)
}
