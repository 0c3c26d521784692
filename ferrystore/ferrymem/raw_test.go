package ferrymem_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestRawRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := ferrymem.New(ferrymem.NewDB(nil), nil)
	require.NoError(t, err)

	t.Run("InsertRawIsReadAsWritten", func(t *testing.T) {
		require.NoError(t, ferrymem.InsertRaw(s, "raw-1", []string{"event_type", "payload", "headers"}, []string{"T", "{}", `{"k":"v"}`}))
		row, err := s.Get(ctx, "raw-1")
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Equal(t, map[string]string{"k": "v"}, row.Headers)
		require.Error(t, ferrymem.InsertRaw(s, "raw-1", []string{"event_type"}, []string{"T"}), "the event id is unique")
		require.ErrorContains(t, ferrymem.InsertRaw(s, "raw-2", []string{"nope"}, []string{"x"}), "no column nope")
	})

	t.Run("UpdateRawSetsUnindexedColumns", func(t *testing.T) {
		require.NoError(t, ferrymem.InsertRaw(s, "raw-3", []string{"event_type", "payload"}, []string{"T", "{}"}))
		require.NoError(t, ferrymem.UpdateRaw(s, "raw-3", []string{"lease_token", "last_error"}, []string{"operator", "by hand"}))
		row, err := s.Get(ctx, "raw-3")
		require.NoError(t, err)
		require.Equal(t, "operator", row.LeaseToken)
		require.Equal(t, "by hand", row.LastError)
		require.ErrorContains(t, ferrymem.UpdateRaw(s, "raw-3", []string{"status"}, []string{"SENT"}), "cannot be updated by hand")
		require.ErrorIs(t, ferrymem.UpdateRaw(s, "missing", []string{"lease_token"}, []string{"x"}), ferrytype.ErrNotFound)
	})
}
