package ferrysqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testenv"
)

// A store and an inbox opened from a URL expose the database they opened,
// for the service's own transactions, and close it on Close; made on the
// caller's database, they return it and leave it open.
func TestDBIsExposed(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, time.Minute)
	url := "sqlite://" + filepath.Join(t.TempDir(), "ferry.db")

	t.Run("OpenInbox", func(t *testing.T) {
		in, err := ferrysqlite.OpenInbox(ctx, url, nil)
		require.NoError(t, err)
		db := in.DB()
		require.NotNil(t, db)
		require.NoError(t, db.PingContext(ctx))
		require.NoError(t, in.Close())
		require.Error(t, db.PingContext(ctx), "Close closes the database OpenInbox opened")
	})
	t.Run("Open", func(t *testing.T) {
		s, err := ferrysqlite.Open(ctx, url, nil)
		require.NoError(t, err)
		db := s.DB()
		require.NoError(t, db.PingContext(ctx))
		require.NoError(t, s.Close())
		require.Error(t, db.PingContext(ctx), "Close closes the database Open opened")
	})
	t.Run("CallersDB", func(t *testing.T) {
		callers := SQLite(t)
		in, err := ferrysqlite.NewInbox(callers, nil)
		require.NoError(t, err)
		require.Same(t, callers, in.DB())
		require.NoError(t, in.Close())
		s, err := ferrysqlite.New(callers, nil)
		require.NoError(t, err)
		require.Same(t, callers, s.DB())
		require.NoError(t, s.Close())
		require.NoError(t, callers.PingContext(ctx), "Close leaves the caller's database open")
	})
}
