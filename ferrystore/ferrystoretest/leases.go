package ferrystoretest

import (
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/migrate"
)

// exerciseLeases tests the named, fenced leases of a table
// (Store.AcquireLease and the rest): one owner at a time, decided by the
// database in one statement even when relays race for it, renewals fenced
// after a takeover, a release handing the lease on at once, the position
// kept across owners.
func exerciseLeases[TTx any](t *testing.T, h Harness[TTx]) {
	const name = ferrystore.LeaseMaintenance

	t.Run("AcquireAFreeOrAbsentLease", func(t *testing.T) {
		b := setup(t, h)
		st, ok, err := b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.False(t, ok, "no row before the first acquire")
		require.Empty(t, st.Owner)

		st, held, err := b.store.AcquireLease(b.ctx, name, "a", "relay a", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "an absent row is created, held")
		require.Equal(t, name, st.Name)
		require.Equal(t, "a", st.Owner)
		require.Equal(t, "relay a", st.Source)
		require.Empty(t, st.Position)
		require.Greater(t, st.LeaseLeft, 50*time.Second)
		require.WithinDuration(t, time.Now().Add(time.Minute), st.LeaseUntil, 10*time.Second, "now + ttl by the database clock")

		// The owner renews by acquiring again; another lease of the table
		// is a row of its own.
		_, held, err = b.store.AcquireLease(b.ctx, name, "a", "relay a", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "already the owner's")
		st, held, err = b.store.AcquireLease(b.ctx, ferrystore.LeaseLog, "b", "binlog db:3306", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the log lease is another row")
		require.Equal(t, ferrystore.LeaseLog, st.Name)

		st, ok, err = b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "a", st.Owner)
	})

	t.Run("HeldByAnotherIsRefused", func(t *testing.T) {
		b := setup(t, h)
		_, held, err := b.store.AcquireLease(b.ctx, name, "a", "relay a", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		st, held, err := b.store.AcquireLease(b.ctx, name, "b", "relay b", time.Minute)
		require.NoError(t, err)
		require.False(t, held, "the lease is a's")
		require.Equal(t, "a", st.Owner, "the row as it is: a's")
		require.Equal(t, "relay a", st.Source, "the refused acquire wrote nothing")
		require.Greater(t, st.LeaseLeft, 50*time.Second)
	})

	t.Run("TakeoverAfterTheLeaseEndsByTheDatabaseClock", func(t *testing.T) {
		b := setup(t, h)
		const ttl = 2 * time.Second
		start := time.Now()
		_, held, err := b.store.AcquireLease(b.ctx, name, "a", "relay a", ttl)
		require.NoError(t, err)
		require.True(t, held)
		_, held, err = b.store.AcquireLease(b.ctx, name, "b", "relay b", time.Minute)
		require.NoError(t, err)
		require.False(t, held, "a's lease runs")
		var st ferrystore.LeaseState
		waitFor(t, 30*time.Second, func() bool {
			st, held, err = b.store.AcquireLease(b.ctx, name, "b", "relay b", time.Minute)
			require.NoError(t, err)
			return held
		})
		require.GreaterOrEqual(t, time.Since(start), ttl/2, "not before a's lease ended")
		require.Equal(t, "b", st.Owner)
		require.Equal(t, "relay b", st.Source, "the source of the new owner")
	})

	t.Run("RenewIsFencedAfterATakeover", func(t *testing.T) {
		b := setup(t, h)
		_, held, err := b.store.AcquireLease(b.ctx, name, "a", "relay a", 100*time.Millisecond)
		require.NoError(t, err)
		require.True(t, held)
		renewed, err := b.store.RenewLease(b.ctx, name, "a", "p1", 100*time.Millisecond)
		require.NoError(t, err)
		require.True(t, renewed, "the owner renews")
		waitFor(t, 30*time.Second, func() bool {
			_, held, err = b.store.AcquireLease(b.ctx, name, "b", "relay b", time.Minute)
			require.NoError(t, err)
			return held
		})
		renewed, err = b.store.RenewLease(b.ctx, name, "a", "p0", time.Minute)
		require.NoError(t, err)
		require.False(t, renewed, "the old owner is fenced")
		renewed, err = b.store.RenewLease(b.ctx, name, "a", "", time.Minute)
		require.NoError(t, err)
		require.False(t, renewed, "with or without a position")
		st, _, err := b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.Equal(t, "b", st.Owner)
		require.Equal(t, ferrystore.LogPosition("p1"), st.Position, "the fenced renewal wrote nothing")
		renewed, err = b.store.RenewLease(b.ctx, name, "b", "", time.Minute)
		require.NoError(t, err)
		require.True(t, renewed)

		renewed, err = b.store.RenewLease(b.ctx, "never-taken", "b", "p", time.Minute)
		require.NoError(t, err)
		require.False(t, renewed, "a lease never taken is held by nobody")
	})

	t.Run("ReleaseLetsAnotherTakeItAtOnce", func(t *testing.T) {
		b := setup(t, h)
		_, held, err := b.store.AcquireLease(b.ctx, name, "a", "relay a", time.Hour)
		require.NoError(t, err)
		require.True(t, held)
		require.NoError(t, b.store.ReleaseLease(b.ctx, name, "b"), "not holding it is no error")
		st, _, err := b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.Equal(t, "a", st.Owner, "and changes nothing")

		require.NoError(t, b.store.ReleaseLease(b.ctx, name, "a"))
		st, _, err = b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.Empty(t, st.Owner)
		require.LessOrEqual(t, st.LeaseLeft, time.Duration(0), "a released lease has ended")
		_, held, err = b.store.AcquireLease(b.ctx, name, "b", "relay b", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "free at once, an hour early")
		require.NoError(t, b.store.ReleaseLease(b.ctx, "never-taken", "b"), "nor releasing a lease never taken")
	})

	t.Run("PositionIsKeptAcrossOwners", func(t *testing.T) {
		b := setup(t, h)
		_, held, err := b.store.AcquireLease(b.ctx, ferrystore.LeaseLog, "a", "binlog x", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		renewed, err := b.store.RenewLease(b.ctx, ferrystore.LeaseLog, "a", "f.000001:120", time.Minute)
		require.NoError(t, err)
		require.True(t, renewed)
		st, _, err := b.store.LeaseState(b.ctx, ferrystore.LeaseLog)
		require.NoError(t, err)
		require.Equal(t, ferrystore.LogPosition("f.000001:120"), st.Position)
		require.WithinDuration(t, time.Now(), st.SavedAt, 10*time.Second, "saved now, by the database clock")
		require.NoError(t, b.store.ReleaseLease(b.ctx, ferrystore.LeaseLog, "a"))

		st, held, err = b.store.AcquireLease(b.ctx, ferrystore.LeaseLog, "b", "binlog x", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, ferrystore.LogPosition("f.000001:120"), st.Position, "the next owner resumes from the position")
		renewed, err = b.store.RenewLease(b.ctx, ferrystore.LeaseLog, "b", "", time.Minute)
		require.NoError(t, err)
		require.True(t, renewed)
		st, _, err = b.store.LeaseState(b.ctx, ferrystore.LeaseLog)
		require.NoError(t, err)
		require.Equal(t, ferrystore.LogPosition("f.000001:120"), st.Position, "a renewal without a position keeps it")
		renewed, err = b.store.RenewLease(b.ctx, ferrystore.LeaseLog, "b", "f.000002:4", time.Minute)
		require.NoError(t, err)
		require.True(t, renewed)
		st, _, err = b.store.LeaseState(b.ctx, ferrystore.LeaseLog)
		require.NoError(t, err)
		require.Equal(t, ferrystore.LogPosition("f.000002:4"), st.Position)
	})

	// Relays racing for a lease that is absent, free or ended: the
	// database gives it to exactly one of them, every time.
	t.Run("ConcurrentAcquireHasExactlyOneWinner", func(t *testing.T) {
		b := setup(t, h)
		const racers = 8
		race := func(round string, ttl time.Duration) string {
			t.Helper()
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				mu      sync.Mutex
				winners []string
				errs    []error
			)
			for i := range racers {
				owner := fmt.Sprintf("%s-%d", round, i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					st, held, err := b.store.AcquireLease(b.ctx, name, owner, "racer", ttl)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						errs = append(errs, err)
					case held:
						winners = append(winners, owner)
						if st.Owner != owner {
							errs = append(errs, fmt.Errorf("%s holds the lease, and the row names %q", owner, st.Owner))
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs, round)
			require.Len(t, winners, 1, "%s: exactly one of %d racers holds the lease: %v", round, racers, winners)
			st, _, err := b.store.LeaseState(b.ctx, name)
			require.NoError(t, err)
			require.Equal(t, winners[0], st.Owner, round)
			return winners[0]
		}

		won := race("absent", time.Minute)
		require.NoError(t, b.store.ReleaseLease(b.ctx, name, won))
		// Every round's lease outlasts its racers, however slow the
		// machine: a lease that ended during the round would let a late
		// racer take it after the winner. The winner then shortens it to
		// let it end.
		won = race("released", time.Minute)
		renewed, err := b.store.RenewLease(b.ctx, name, won, "", 200*time.Millisecond)
		require.NoError(t, err)
		require.True(t, renewed, "the winner renews its lease")
		waitFor(t, 30*time.Second, func() bool {
			st, _, err := b.store.LeaseState(b.ctx, name)
			require.NoError(t, err)
			return st.LeaseLeft <= 0
		})
		race("ended", time.Minute)
	})

	// Migration 0006 moves the log relay's checkpoint row of <table>_log
	// (0005) into <table>_lease as the lease "log", and drops the old
	// table; its down migration moves it back.
	t.Run("MigrationMovesTheLogCheckpoint", func(t *testing.T) {
		needs(t, h.Exec != nil, "Exec", "the migration's statements are run by hand")
		b := setup(t, h)
		_, held, err := b.store.AcquireLease(b.ctx, ferrystore.LeaseLog, "a", "binlog x", time.Hour)
		require.NoError(t, err)
		require.True(t, held)
		renewed, err := b.store.RenewLease(b.ctx, ferrystore.LeaseLog, "a", "p1", time.Hour)
		require.NoError(t, err)
		require.True(t, renewed)
		fsys, err := b.store.Migrations()
		require.NoError(t, err)
		run := func(file string) {
			text, err := fs.ReadFile(fsys, file)
			require.NoError(t, err)
			for _, q := range migrate.Statements(string(text)) {
				h.Exec(b.ctx, t, b.store, q)
			}
		}
		logTable := b.store.Table() + "_log"

		run("0006_lease.down.sql")
		_, _, err = b.store.LeaseState(b.ctx, ferrystore.LeaseLog)
		require.ErrorIs(t, err, ferrytype.ErrUndefinedTable, "the lease table is gone")
		// The row is back in the old table, which an older relay saves to.
		h.Exec(b.ctx, t, b.store, "UPDATE "+logTable+" SET position = 'p2' WHERE id = 1 AND owner = 'a'")
		err = b.store.Beat(b.ctx, ferrystore.RelayBeat{ID: "r"})
		require.Error(t, err, "the heartbeat table lost its claims column")

		run("0006_lease.up.sql")
		st, ok, err := b.store.LeaseState(b.ctx, ferrystore.LeaseLog)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "a", st.Owner)
		require.Equal(t, "binlog x", st.Source)
		require.Equal(t, ferrystore.LogPosition("p2"), st.Position, "the checkpoint saved in the old table")
		require.Greater(t, st.LeaseLeft, 50*time.Minute, "the lease's end, moved with it")
		require.NoError(t, b.store.Beat(b.ctx, ferrystore.RelayBeat{ID: "r", Claims: "abc"}))
		// The old table is gone: creating it again succeeds.
		h.Exec(b.ctx, t, b.store, "CREATE TABLE "+logTable+" (id INTEGER)")
		h.Exec(b.ctx, t, b.store, "DROP TABLE "+logTable)
	})

	t.Run("BadArgumentsAreRefused", func(t *testing.T) {
		b := setup(t, h)
		long := strings.Repeat("n", ferrystore.MaxLeaseNameLen+1)
		_, _, err := b.store.AcquireLease(b.ctx, name, "", "s", time.Minute)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "an empty owner would match a released lease")
		_, err = b.store.RenewLease(b.ctx, name, "", "p", time.Minute)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		require.ErrorIs(t, b.store.ReleaseLease(b.ctx, name, ""), ferrytype.ErrInvalidConfig)
		for _, bad := range []string{"", long} {
			_, _, err = b.store.AcquireLease(b.ctx, bad, "a", "s", time.Minute)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "name %q", bad)
			_, _, err = b.store.LeaseState(b.ctx, bad)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "name %q", bad)
		}
		_, _, err = b.store.AcquireLease(b.ctx, name, strings.Repeat("o", ferrystore.MaxLeaseOwnerLen+1), "s", time.Minute)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		_, _, err = b.store.AcquireLease(b.ctx, name, "a", "s", 0)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "a lease of no time")
		_, ok, err := b.store.LeaseState(b.ctx, name)
		require.NoError(t, err)
		require.False(t, ok, "nothing was written")

		// The longest name and owner fit; a long source is cut.
		maxName := strings.Repeat("n", ferrystore.MaxLeaseNameLen)
		maxOwner := strings.Repeat("o", ferrystore.MaxLeaseOwnerLen)
		st, held, err := b.store.AcquireLease(b.ctx, maxName, maxOwner, strings.Repeat("s", 300), time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, maxOwner, st.Owner)
		require.Len(t, st.Source, ferrystore.MaxLeaseSourceLen)
	})
}

// exerciseClaimsOf tests Store.ClaimsOf: the SENDING rows of one relay,
// by the prefix of their tokens, whether or not their lease ended.
func exerciseClaimsOf[TTx any](t *testing.T, h Harness[TTx]) {
	const (
		dead  = "0123456789abcdef"
		other = "0123456789abcdef0" // dead's prefix is its prefix too
	)
	claim := func(t *testing.T, b *bundle[TTx], token string, n int, lease time.Duration) []string {
		t.Helper()
		msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: n, Token: token, Lease: lease})
		require.NoError(t, err)
		require.Len(t, msgs, n)
		return ids(msgs)
	}
	byID := func(cs []ferrystore.Claimed) map[string]ferrystore.Claimed {
		out := map[string]ferrystore.Claimed{}
		for _, c := range cs {
			out[c.ID] = c
		}
		return out
	}

	t.Run("OnlyTheSendingRowsOfThatPrefix", func(t *testing.T) {
		b := setup(t, h)
		routed := ev("A", "1", `{}`)
		routed.Destination = "orders.paid"
		b.enqueue(t, routed, ev("A", "2", `{}`))
		mine := claim(t, b, dead+".1111", 2, time.Hour) // a lease far from its end
		b.enqueue(t, ev("B", "3", `{}`))
		theirs := claim(t, b, other+".2222", 1, time.Hour)
		b.enqueue(t, ev("C", "4", `{}`))
		plain := claim(t, b, dead+"x", 1, time.Hour) // not prefix + "."
		b.enqueue(t, ev("D", "5", `{}`))
		upper := claim(t, b, strings.ToUpper(dead)+".3333", 1, time.Hour)
		b.enqueue(t, ev("E", "6", `{}`))
		sent := claim(t, b, dead+".4444", 1, time.Hour)
		n, err := b.store.MarkSent(b.ctx, dead+".4444", sent)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		b.enqueue(t, ev("F", "7", `{}`)) // NEW, claimed by nobody

		got, err := b.store.ClaimsOf(b.ctx, dead, 10)
		require.NoError(t, err)
		require.Len(t, got, 2, "only SENDING rows under %s.: not %v (%s.), %v (no dot), %v (upper case), %v (SENT)",
			dead, theirs, other, plain, upper, sent)
		m := byID(got)
		for _, id := range mine {
			require.Equal(t, dead+".1111", m[id].Token, "the token, to fence the return")
			require.Equal(t, 1, m[id].Attempts)
		}
		dests := []string{m[mine[0]].Destination, m[mine[1]].Destination}
		require.ElementsMatch(t, []string{"orders.paid", "A"}, dests, "each names where its event goes")

		got, err = b.store.ClaimsOf(b.ctx, other, 10)
		require.NoError(t, err)
		require.Equal(t, theirs, idsOfClaimed(got), "a prefix of another's is not theirs")

		got, err = b.store.ClaimsOf(b.ctx, "fedcba", 10)
		require.NoError(t, err)
		require.Empty(t, got)

		// What the maintainer does with them: return them, fenced by each
		// token, as the sweeper does.
		fails := make([]ferrystore.Failure, len(mine))
		for i, id := range mine {
			fails[i] = ferrystore.Failure{ID: id, Token: dead + ".1111", Error: "relay found dead"}
		}
		res, err := b.store.MarkFailed(b.ctx, fails)
		require.NoError(t, err)
		require.ElementsMatch(t, mine, res.Retried)
		got, err = b.store.ClaimsOf(b.ctx, dead, 10)
		require.NoError(t, err)
		require.Empty(t, got, "returned: no longer SENDING")
	})

	t.Run("EndedLeasesToo", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`))
		mine := claim(t, b, dead+".1", 1, time.Millisecond)
		waitFor(t, 10*time.Second, func() bool {
			expired, err := b.store.ExpiredClaims(b.ctx, 10)
			require.NoError(t, err)
			return len(expired) == 1
		})
		got, err := b.store.ClaimsOf(b.ctx, dead, 10)
		require.NoError(t, err)
		require.Equal(t, mine, idsOfClaimed(got))
	})

	t.Run("BoundedByTheLimit", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("A", "3", `{}`))
		claim(t, b, dead+".1", 3, time.Hour)
		got, err := b.store.ClaimsOf(b.ctx, dead, 2)
		require.NoError(t, err)
		require.Len(t, got, 2)
	})

	t.Run("BadPrefixIsRefused", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`))
		claim(t, b, dead+".1", 1, time.Hour)
		for _, bad := range []string{"", "0123456789ABCDEF", "01234x", "0123.", "01%", "01_3", strings.Repeat("a", 33)} {
			got, err := b.store.ClaimsOf(b.ctx, bad, 10)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "prefix %q", bad)
			require.Empty(t, got, "an empty prefix must never match every claim")
		}
		_, err := b.store.ClaimsOf(b.ctx, dead, 0)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
		got, err := b.store.ClaimsOf(b.ctx, strings.Repeat("a", ferrystore.MaxClaimsPrefixLen), 10)
		require.NoError(t, err, "the longest prefix")
		require.Empty(t, got)
	})
}

func idsOfClaimed(cs []ferrystore.Claimed) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
