package ferrystoretest

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseSchema checks migrations and table names.
func exerciseSchema[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("Migrations", func(t *testing.T) {
		b := setup(t, h)
		require.NoError(t, b.store.Migrate(b.ctx), "a second Migrate must be a no-op")
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		if h.Schemaless {
			files, err := fs.Glob(fsys, "*")
			require.NoError(t, err)
			require.Empty(t, files, "a store without a schema has no migrations")
			return
		}
		up, err := fs.ReadFile(fsys, "0001_outbox.up.sql")
		require.NoError(t, err)
		require.Contains(t, string(up), b.store.Table())
		_, err = fs.ReadFile(fsys, "0001_outbox.down.sql")
		require.NoError(t, err)
	})

	t.Run("CheckSchema", func(t *testing.T) {
		b := setup(t, h)
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		ups, err := fs.Glob(fsys, "*.up.sql")
		require.NoError(t, err)
		s, err := b.store.CheckSchema(b.ctx)
		require.NoError(t, err)
		require.True(t, s.Current(), "%+v", s)
		require.NoError(t, s.Err())
		require.Len(t, s.Applied, len(ups))
		require.Empty(t, s.Missing)
		require.Empty(t, s.Unknown)
		require.Empty(t, s.Warning())

		if h.Exec == nil {
			without(t, "Exec", "the migration table's other states")
			return
		}
		// A table an older ferry migrated: the newest migration is missing.
		component := "'outbox:" + b.store.Table() + "'"
		last := strings.TrimSuffix(ups[len(ups)-1], ".up.sql")
		version, name, _ := strings.Cut(last, "_")
		h.Exec(b.ctx, t, b.store, "DELETE FROM ferry_migration WHERE component = "+component+" AND version = "+version)
		s, err = b.store.CheckSchema(b.ctx)
		require.NoError(t, err)
		require.False(t, s.Current())
		require.Equal(t, name, s.Missing[0].Name)
		require.ErrorIs(t, s.Err(), ferrytype.ErrSchemaOutdated)
		require.ErrorContains(t, s.Err(), "lacks migration "+last)
		require.ErrorContains(t, s.Err(), "run ferry migrate")
		h.Exec(b.ctx, t, b.store, "INSERT INTO ferry_migration (component, version, name) VALUES ("+
			component+", "+version+", '"+name+"')")

		// A table a newer ferry migrated: usable, with a warning.
		h.Exec(b.ctx, t, b.store, "INSERT INTO ferry_migration (component, version, name) VALUES ("+component+", 9999, 'future')")
		s, err = b.store.CheckSchema(b.ctx)
		require.NoError(t, err)
		require.True(t, s.Current())
		require.NoError(t, s.Err())
		require.Equal(t, "9999_future", s.Unknown[0].String())
		require.Contains(t, s.Warning(), "9999_future")

		// A table another tool created (ferry migrate --print): usable, unchecked.
		h.Exec(b.ctx, t, b.store, "DELETE FROM ferry_migration WHERE component = "+component)
		s, err = b.store.CheckSchema(b.ctx)
		require.NoError(t, err)
		require.True(t, s.Unrecorded)
		require.NoError(t, s.Err())
		require.Contains(t, s.Warning(), "not checked")

		// A table dropped by hand while its migrations stay recorded.
		h.Exec(b.ctx, t, b.store, "INSERT INTO ferry_migration (component, version, name) VALUES ("+component+", 1, 'outbox')")
		h.Exec(b.ctx, t, b.store, "DROP TABLE "+b.store.Table())
		s, err = b.store.CheckSchema(b.ctx)
		require.NoError(t, err)
		require.False(t, s.TableExists)
		require.ErrorIs(t, s.Err(), ferrytype.ErrSchemaOutdated)
		require.ErrorContains(t, s.Err(), "does not exist")
		require.ErrorContains(t, s.Err(), "delete those rows")
	})

	t.Run("InvalidTableName", func(t *testing.T) {
		for _, name := range []string{"outbox;drop table x", "1abc", "a-b", `x"y`, "", strings.Repeat("a", 70)} {
			if name == "" {
				continue // empty means the default
			}
			_, err := h.NewWithTable(name)
			require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier, "table %q", name)
		}
	})
}
