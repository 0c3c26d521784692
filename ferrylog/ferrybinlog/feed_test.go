package ferrybinlog_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrylog/ferrybinlog"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

func TestNew(t *testing.T) {
	t.Parallel()
	t.Run("ValidatesTheConfig", func(t *testing.T) {
		for name, cfg := range map[string]*ferrybinlog.Config{
			"nil":        nil,
			"no URL":     {},
			"scheme":     {URL: "postgres://u@h/db"},
			"no db":      {URL: "mysql://u@h:3306/"},
			"bad table":  {URL: "mysql://u@h:3306/db", Table: "a-b"},
			"long table": {URL: "mysql://u@h:3306/db", Table: strings.Repeat("a", 58)},
		} {
			_, err := ferrybinlog.New(cfg)
			require.Error(t, err, name)
		}
		_, err := ferrybinlog.New(&ferrybinlog.Config{URL: "mysql://u@h:3306/db", Table: "a-b"})
		require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
	})
	t.Run("SourceNamesTheServer", func(t *testing.T) {
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: "mysql://u:secret@db.example:3310/shop"})
		require.NoError(t, err)
		require.Equal(t, "binlog db.example:3310", f.Source())
		require.NoError(t, f.Close())
		require.NoError(t, f.Close(), "Close twice")
		err = f.Stream(context.Background(), "", func(context.Context, ferrystore.LogBatch) error { return nil })
		require.ErrorIs(t, err, ferrytype.ErrClosed)
	})
	t.Run("ConnectionErrorHasNoPassword", func(t *testing.T) {
		// Nothing listens on port 1.
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: "mysql://u:s3cretpw@127.0.0.1:1/shop?timeout=2s"})
		require.NoError(t, err)
		defer f.Close()
		err = f.Stream(testenv.Context(t, 10*time.Second), "", func(context.Context, ferrystore.LogBatch) error { return nil })
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cretpw")
		_, err = f.Position(testenv.Context(t, 10*time.Second))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cretpw")
	})
}

// userURL returns the binlog server's URL for user with password.
func userURL(t *testing.T, user, password string) string {
	u, err := url.Parse(binlogURL())
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	return u.String()
}

// createUser creates a user on the binlog server with grants, dropped
// when t ends, and returns its URL.
func createUser(t *testing.T, b bundle, grants ...string) string {
	t.Helper()
	user, password := testenv.Name("fbu_"), "pw-"+testenv.Name("")
	b.exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+password+"'")
	t.Cleanup(func() { _, _ = b.db.Exec("DROP USER '" + user + "'@'%'") })
	for _, g := range grants {
		b.exec(t, "GRANT "+g+" TO '"+user+"'@'%'")
	}
	return userURL(t, user, password)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	t.Run("PassesOnTheBinlogServer", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		require.NoError(t, b.feed.Check(testenv.Context(t, 30*time.Second)))
	})
	t.Run("BinlogOff", func(t *testing.T) {
		t.Parallel()
		open(t, testenv.URL(testenv.EnvMySQL))
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: testenv.URL(testenv.EnvMySQL)})
		require.NoError(t, err)
		defer f.Close()
		err = f.Check(testenv.Context(t, 30*time.Second))
		require.ErrorIs(t, err, ferrystore.ErrLogSetup)
		require.Contains(t, err.Error(), "log_bin=OFF")
		_, err = f.Position(testenv.Context(t, 30*time.Second))
		require.ErrorIs(t, err, ferrystore.ErrLogSetup)
	})
	t.Run("NoReplicationSlave", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		u := createUser(t, b, "SELECT ON test.* ")
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: u, Table: b.store.Table()})
		require.NoError(t, err)
		defer f.Close()
		err = f.Check(testenv.Context(t, 30*time.Second))
		require.ErrorIs(t, err, ferrystore.ErrLogSetup)
		require.Contains(t, err.Error(), "REPLICATION SLAVE")
		require.NotContains(t, err.Error(), "pw-")
	})
	t.Run("NoBinlogMonitor", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		u := createUser(t, b, "SELECT ON test.*", "REPLICATION SLAVE ON *.*")
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: u, Table: b.store.Table()})
		require.NoError(t, err)
		defer f.Close()
		err = f.Check(testenv.Context(t, 30*time.Second))
		require.ErrorIs(t, err, ferrystore.ErrLogSetup)
		require.Contains(t, err.Error(), "BINLOG MONITOR")
	})
	t.Run("ReplicationUserPasses", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		u := createUser(t, b, "SELECT ON test.*", "REPLICATION SLAVE, BINLOG MONITOR ON *.*")
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: u, Table: b.store.Table()})
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, f.Check(testenv.Context(t, 30*time.Second)))
	})
	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		open(t, binlogURL())
		f, err := ferrybinlog.New(&ferrybinlog.Config{URL: binlogURL(), Table: testenv.Name("fb_none_")})
		require.NoError(t, err)
		defer f.Close()
		err = f.Check(testenv.Context(t, 30*time.Second))
		require.ErrorIs(t, err, ferrystore.ErrLogSetup)
		require.ErrorIs(t, err, ferrytype.ErrUndefinedTable)
		require.Contains(t, err.Error(), "ferry migrate")
	})
}

// parsed returns a position's file and offset.
func parsed(t *testing.T, p ferrystore.LogPosition) (string, uint64) {
	t.Helper()
	i := strings.LastIndexByte(string(p), ':')
	require.Positive(t, i, "position %q", p)
	off, err := strconv.ParseUint(string(p)[i+1:], 10, 32)
	require.NoError(t, err, "position %q", p)
	return string(p)[:i], off
}

// after reports whether a is after b (binlog file names of one server
// sort in their order); a malformed position is after none.
func after(a, b ferrystore.LogPosition) bool {
	split := func(p ferrystore.LogPosition) (string, uint64, bool) {
		i := strings.LastIndexByte(string(p), ':')
		if i <= 0 {
			return "", 0, false
		}
		off, err := strconv.ParseUint(string(p)[i+1:], 10, 32)
		return string(p)[:i], off, err == nil
	}
	fa, oa, oka := split(a)
	fb, ob, okb := split(b)
	return oka && okb && (fa > fb || fa == fb && oa > ob)
}

// requireAfter fails t unless a is after b.
func requireAfter(t *testing.T, a, b ferrystore.LogPosition) {
	t.Helper()
	require.True(t, after(a, b), "%s is not after %s", a, b)
}

func TestStream(t *testing.T) {
	t.Parallel()
	t.Run("TransactionsInCommitOrder", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		other := setup(t) // another outbox table: its rows are not reported
		ctx := testenv.Context(t, time.Minute)
		start, err := b.feed.Position(ctx)
		require.NoError(t, err)
		s := startStream(t, b.feed, start)

		b.enqueue(t, true, "a1", "a2")
		b.enqueue(t, false, "r1", "r2") // rolled back
		other.enqueue(t, true, "o1")
		b.enqueue(t, true, "b1")
		b.enqueue(t, true, "c1", "c2", "c3")
		b.enqueue(t, true, "mark")
		got := s.until(t, "mark")
		require.Equal(t, [][]string{{"a1", "a2"}, {"b1"}, {"c1", "c2", "c3"}, {"mark"}}, ids(got...))
		prev := start
		for _, bt := range got {
			requireAfter(t, bt.Pos, prev)
			prev = bt.Pos
			require.WithinDuration(t, time.Now(), bt.Committed, time.Minute)
			for _, e := range bt.Events {
				require.Zero(t, e.Attempts)
			}
		}
	})
	t.Run("UpdatesBackToNew", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		b.enqueue(t, true, "x")
		ctx := testenv.Context(t, time.Minute)
		start, err := b.feed.Position(ctx)
		require.NoError(t, err)
		s := startStream(t, b.feed, start)

		tbl := "`" + b.store.Table() + "`"
		b.exec(t, "UPDATE "+tbl+" SET status = 'SENDING', attempts = 1 WHERE event_id = 'x'")
		b.exec(t, "UPDATE "+tbl+" SET status = 'NEW', attempts = 2 WHERE event_id = 'x'") // a retry
		b.exec(t, "UPDATE "+tbl+" SET status = 'SENT' WHERE event_id = 'x'")
		b.enqueue(t, true, "y")
		b.exec(t, "UPDATE "+tbl+" SET available_at = NOW(6) WHERE event_id = 'y'") // NEW stays NEW
		b.exec(t, "UPDATE "+tbl+" SET status = 'DEAD', attempts = 5 WHERE event_id = 'y'")
		b.exec(t, "UPDATE "+tbl+" SET status = 'NEW', attempts = 0 WHERE event_id = 'y'") // ferry dead retry
		b.enqueue(t, true, "mark")
		got := s.until(t, "mark")
		var evs []ferrystore.LogEvent
		for _, bt := range got {
			evs = append(evs, bt.Events...)
		}
		require.Equal(t, []ferrystore.LogEvent{{ID: "x", Attempts: 2}, {ID: "y"}, {ID: "y"}, {ID: "mark"}}, evs)
	})
	t.Run("FollowsAnAlterTable", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		ctx := testenv.Context(t, time.Minute)
		start, err := b.feed.Position(ctx)
		require.NoError(t, err)
		s := startStream(t, b.feed, start)
		b.enqueue(t, true, "a")
		require.Equal(t, [][]string{{"a"}}, ids(s.until(t, "a")...))
		// Every column moves one place on: read by the old positions,
		// event_id would be read from the new column.
		b.exec(t, "ALTER TABLE `"+b.store.Table()+"` ADD COLUMN note VARCHAR(64) NOT NULL DEFAULT 'not an id' FIRST")
		b.enqueue(t, true, "b")
		b.exec(t, "UPDATE `"+b.store.Table()+"` SET status = 'DEAD', attempts = 4 WHERE event_id = 'b'")
		b.exec(t, "UPDATE `"+b.store.Table()+"` SET status = 'NEW' WHERE event_id = 'b'")
		got := s.until(t, "b")
		require.Equal(t, []ferrystore.LogEvent{{ID: "b"}}, got[0].Events)
		got = s.until(t, "b")
		require.Equal(t, []ferrystore.LogEvent{{ID: "b", Attempts: 4}}, got[0].Events)
	})
	t.Run("ResumesAfterABatch", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		ctx := testenv.Context(t, time.Minute)
		start, err := b.feed.Position(ctx)
		require.NoError(t, err)
		s := startStream(t, b.feed, start)
		b.enqueue(t, true, "a")
		b.enqueue(t, true, "b")
		b.enqueue(t, true, "c")
		got := s.until(t, "c")
		require.Equal(t, [][]string{{"a"}, {"b"}, {"c"}}, ids(got...))
		require.ErrorIs(t, s.stop(t), context.Canceled)

		again := startStream(t, b.feed, got[0].Pos)
		rest := again.until(t, "c")
		require.Equal(t, [][]string{{"b"}, {"c"}}, ids(rest...))
		require.Equal(t, got[1].Pos, rest[0].Pos)
		require.Equal(t, got[2].Pos, rest[1].Pos)
	})
	t.Run("ReportsPositionsWithoutEvents", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		ctx, cancel := context.WithCancel(testenv.Context(t, time.Minute))
		defer cancel()
		start, err := b.feed.Position(ctx)
		require.NoError(t, err)
		tbl := "`" + testenv.Name("fb_plain_") + "`"
		b.exec(t, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY) ENGINE=InnoDB")
		t.Cleanup(func() { _, _ = b.db.Exec("DROP TABLE IF EXISTS " + tbl) })
		b.exec(t, "INSERT INTO "+tbl+" VALUES (1)")
		written, err := b.feed.Position(ctx)
		require.NoError(t, err)
		reached := make(chan ferrystore.LogPosition, 1)
		done := make(chan error, 1)
		go func() {
			done <- b.feed.Stream(ctx, start, func(_ context.Context, bt ferrystore.LogBatch) error {
				if len(bt.Events) > 0 {
					return fmt.Errorf("unexpected events %v", bt.Events)
				}
				if !after(written, bt.Pos) {
					select {
					case reached <- bt.Pos:
					default:
					}
					cancel()
				}
				return nil
			})
		}()
		select {
		case <-reached:
		case err := <-done:
			t.Fatalf("Stream ended before an empty batch reached %s: %v", written, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("no empty batch reached %s within 20s", written)
		}
		require.ErrorIs(t, <-done, context.Canceled)
	})
	t.Run("ReturnsWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		b.enqueue(t, true, "old")
		s := startStream(t, b.feed, "") // from the binlog's end
		got := s.warm(t, b)
		require.NotContains(t, ids(got...)[0], "old")
		began := time.Now()
		require.ErrorIs(t, s.stop(t), context.Canceled)
		require.Less(t, time.Since(began), 3*time.Second)
	})
	t.Run("CloseEndsTheStream", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		s := startStream(t, b.feed, "")
		s.warm(t, b)
		require.NoError(t, b.feed.Close())
		select {
		case <-s.done:
			require.ErrorIs(t, s.err, ferrytype.ErrClosed)
		case <-time.After(10 * time.Second):
			t.Fatal("Stream did not return within 10s of Close")
		}
	})
	t.Run("OneStreamAtATime", func(t *testing.T) {
		t.Parallel()
		shareBinlog(t)
		b := setup(t)
		s := startStream(t, b.feed, "")
		s.warm(t, b)
		err := b.feed.Stream(testenv.Context(t, 10*time.Second), "", func(context.Context, ferrystore.LogBatch) error { return nil })
		require.ErrorContains(t, err, "already streaming")
	})
}

// TestGap purges the binlog of the shared server: it holds purgeLock, so
// that no other test of the package streams meanwhile.
func TestGap(t *testing.T) {
	ownBinlog(t)
	b := setup(t)
	ctx := testenv.Context(t, time.Minute)
	s := startStream(t, b.feed, "")
	got := s.warm(t, b)
	saved := got[len(got)-1].Pos
	require.ErrorIs(t, s.stop(t), context.Canceled)

	b.exec(t, "FLUSH BINARY LOGS")
	b.exec(t, "FLUSH BINARY LOGS")
	logs := binaryLogs(t, b)
	newest := logs[len(logs)-1]
	savedFile, _ := parsed(t, saved)
	// MariaDB keeps, with a warning only, the files a binlog checkpoint
	// or a dump thread still needs: purge until the saved file is gone.
	testenv.WaitFor(t, 30*time.Second, func() bool {
		b.exec(t, "PURGE BINARY LOGS TO '"+newest+"'")
		return !slices.Contains(binaryLogs(t, b), savedFile)
	}, func() string { return fmt.Sprintf("%s not purged: %v", savedFile, binaryLogs(t, b)) })

	err := b.feed.Stream(ctx, saved, func(context.Context, ferrystore.LogBatch) error { return nil })
	require.ErrorIs(t, err, ferrystore.ErrLogGap)
	require.Contains(t, err.Error(), string(saved))
}

// binaryLogs lists the binlog's files, oldest first.
func binaryLogs(t *testing.T, b bundle) []string {
	t.Helper()
	rows, err := b.db.QueryContext(testenv.Context(t, 30*time.Second), "SHOW BINARY LOGS")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		vals := make([]any, len(cols))
		var name string
		vals[0] = &name
		for i := 1; i < len(vals); i++ {
			vals[i] = new(any)
		}
		require.NoError(t, rows.Scan(vals...))
		names = append(names, name)
	}
	require.NoError(t, rows.Err())
	return names
}

// TestLag holds purgeLock for writing: no other test writes to the
// binlog meanwhile, so its sizes are this test's.
func TestLag(t *testing.T) {
	ownBinlog(t)
	b := setup(t)
	ctx := testenv.Context(t, time.Minute)
	lag, err := b.feed.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, ferrystore.LogLag{Head: lag.Head}, lag, "no checkpoint yet")

	start, err := b.feed.Position(ctx)
	require.NoError(t, err)
	s := startStream(t, b.feed, start)
	b.enqueue(t, true, "a")
	streamed := s.until(t, "a")[0].Pos
	require.ErrorIs(t, s.stop(t), context.Canceled)
	lag, err = b.feed.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, streamed, lag.Position, "the last position streamed")
	// near 0: MariaDB may append a binlog checkpoint event on its own
	require.Less(t, lag.Bytes, int64(200))

	b.enqueue(t, true, "b")
	b.enqueue(t, true, "c")
	grown, err := b.feed.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, streamed, grown.Position)
	require.Greater(t, grown.Bytes, lag.Bytes+500, "two transactions of an outbox row each")

	b.feed.Flushed(grown.Head)
	lag, err = b.feed.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, grown.Head, lag.Position)
	require.Less(t, lag.Bytes, int64(200))

	// Across a rotation: the rest of the old file and the new one.
	b.exec(t, "FLUSH BINARY LOGS")
	b.enqueue(t, true, "d")
	lag, err = b.feed.Lag(ctx)
	require.NoError(t, err)
	hf, ho := parsed(t, lag.Head)
	pf, _ := parsed(t, lag.Position)
	require.NotEqual(t, pf, hf)
	require.Greater(t, lag.Bytes, int64(ho), "the new file's bytes and the old file's rotation")
}

// ferrymysql's Store is what the tests enqueue with.
var _ ferrystore.Store = (*ferrymysql.Store)(nil)
