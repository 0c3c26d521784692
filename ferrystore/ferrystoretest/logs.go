package ferrystoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
)

// exerciseLogCheckpoints tests the log relay's checkpoint row: one owner
// at a time, fenced saves, a standby taking over after the lease or a
// release, the checkpoint kept across owners.
func exerciseLogCheckpoints[TTx any](t *testing.T, h Harness[TTx]) {
	setupLog := func(t *testing.T) (*bundle[TTx], ferrystore.LogCheckpoints) {
		b := setup(t, h)
		lc, ok := b.store.(ferrystore.LogCheckpoints)
		if !ok {
			t.Skip("the store keeps no log checkpoints")
		}
		return b, lc
	}

	t.Run("OneOwnerAtATime", func(t *testing.T) {
		b, lc := setupLog(t)
		_, ok, err := lc.LogState(b.ctx)
		require.NoError(t, err)
		require.False(t, ok, "no reader yet")
		pos, held, err := lc.AcquireLog(b.ctx, "a", "binlog x", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		require.Empty(t, pos)
		_, held, err = lc.AcquireLog(b.ctx, "b", "binlog x", time.Minute)
		require.NoError(t, err)
		require.False(t, held, "the lease is a's")
		saved, err := lc.SaveLog(b.ctx, "a", "f.000001:120", time.Minute)
		require.NoError(t, err)
		require.True(t, saved)
		saved, err = lc.SaveLog(b.ctx, "b", "f.000009:1", time.Minute)
		require.NoError(t, err)
		require.False(t, saved, "a save by another owner is fenced")
		st, ok, err := lc.LogState(b.ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, ferrystore.LogPosition("f.000001:120"), st.Position)
		require.Equal(t, "a", st.Owner)
		require.Equal(t, "binlog x", st.Source)
		require.Greater(t, st.LeaseLeft, 50*time.Second)
	})

	t.Run("StandbyTakesOverAfterTheLeaseOrARelease", func(t *testing.T) {
		b, lc := setupLog(t)
		_, held, err := lc.AcquireLog(b.ctx, "a", "s", time.Millisecond)
		require.NoError(t, err)
		require.True(t, held)
		_, err = lc.SaveLog(b.ctx, "a", "p1", time.Millisecond)
		require.NoError(t, err)
		var pos ferrystore.LogPosition
		deadline := time.Now().Add(10 * time.Second)
		for !held || pos == "" {
			require.True(t, time.Now().Before(deadline), "the lease did not end")
			pos, held, err = lc.AcquireLog(b.ctx, "b", "s", time.Minute)
			require.NoError(t, err)
		}
		require.Equal(t, ferrystore.LogPosition("p1"), pos, "the standby resumes from the checkpoint")
		saved, err := lc.SaveLog(b.ctx, "a", "p0", time.Minute)
		require.NoError(t, err)
		require.False(t, saved, "the old owner is fenced")

		require.NoError(t, lc.ReleaseLog(b.ctx, "b"))
		pos, held, err = lc.AcquireLog(b.ctx, "c", "s", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "a release hands the lease on at once")
		require.Equal(t, ferrystore.LogPosition("p1"), pos)
	})
}
