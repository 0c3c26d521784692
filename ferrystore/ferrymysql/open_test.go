package ferrymysql_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/internal/testenv"
)

// A store and an inbox opened from a URL expose the pool they opened, for
// the service's own transactions, and close it on Close; made on the
// caller's pool, they return that pool and leave it open.
func TestDBIsExposed(t *testing.T) {
	t.Parallel()
	callers := MySQL(t) // skips without MariaDB
	ctx := testenv.Context(t, time.Minute)
	url := testenv.URL(testenv.EnvMySQL)

	t.Run("OpenInbox", func(t *testing.T) {
		in, err := ferrymysql.OpenInbox(ctx, url, nil)
		require.NoError(t, err)
		db := in.DB()
		require.NotNil(t, db)
		require.NoError(t, db.PingContext(ctx))
		require.NoError(t, in.Close())
		require.Error(t, db.PingContext(ctx), "Close closes the pool OpenInbox opened")
	})
	t.Run("Open", func(t *testing.T) {
		s, err := ferrymysql.Open(ctx, url, nil)
		require.NoError(t, err)
		db := s.DB()
		require.NoError(t, db.PingContext(ctx))
		require.NoError(t, s.Close())
		require.Error(t, db.PingContext(ctx), "Close closes the pool Open opened")
	})
	t.Run("CallersPool", func(t *testing.T) {
		in, err := ferrymysql.NewInbox(callers, nil)
		require.NoError(t, err)
		require.Same(t, callers, in.DB())
		require.NoError(t, in.Close())
		s, err := ferrymysql.New(callers, nil)
		require.NoError(t, err)
		require.Same(t, callers, s.DB())
		require.NoError(t, s.Close())
		require.NoError(t, callers.PingContext(ctx), "Close leaves the caller's pool open")
	})
}
