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
		up, err := fs.ReadFile(fsys, "0001_outbox.up.sql")
		require.NoError(t, err)
		require.Contains(t, string(up), b.store.Table())
		_, err = fs.ReadFile(fsys, "0001_outbox.down.sql")
		require.NoError(t, err)
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
