package shop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// With every COMMIT cut off, a commit reports a connection error, and the
// transaction's fate can only be read from the database.
func TestCommitResetLeavesTheOutcomeUnknown(t *testing.T) {
	// serial: t.Setenv: the fault is armed through the environment.
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			url := testsvc.URL(testsvc.EnvMySQL)
			if kind == "postgres" {
				url = testsvc.URL(testsvc.EnvPostgres)
				testsvc.Postgres(t)
			} else {
				testsvc.MySQL(t)
			}
			ctx := testsvc.Context(t, time.Minute)
			plain, err := Open(ctx, url)
			require.NoError(t, err)
			defer plain.Close()
			table := testsvc.Name("commit_fault_")
			_, err = plain.ExecContext(ctx, "CREATE TABLE "+table+" (id BIGINT PRIMARY KEY)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = plain.Exec("DROP TABLE " + table) })

			t.Setenv(EnvCommitResetPct, "100")
			faulty, err := Open(ctx, url)
			require.NoError(t, err)
			defer faulty.Close()
			before := CommitResets.Load()
			const n = 20
			for i := 0; i < n; i++ {
				tx, err := faulty.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, faulty.Q("INSERT INTO "+table+" (id) VALUES (?)"), i)
				require.NoError(t, err)
				err = tx.Commit()
				require.Error(t, err, "the commit's answer never arrives")
				require.True(t, isConnectionError(err), "%T: %v", err, err)
			}
			require.Equal(t, int64(n), CommitResets.Load()-before)
			var committed int
			require.NoError(t, plain.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&committed))
			t.Logf("%s: %d of %d cut-off commits had committed", kind, committed, n)
			// Half the cut-off COMMITs reach the server: both outcomes occur
			// (all 20 alike has a chance of 2 in a million).
			require.Positive(t, committed)
			require.Less(t, committed, n)
		})
	}
}
