package ferrybinlog_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrylog/ferrybinlog"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// purgeLock keeps the binlog's files in place: every test that streams
// holds it for reading; the test that purges the binlog holds it for
// writing, so that no stream loses its start under it.
var purgeLock sync.RWMutex

// shareBinlog holds purgeLock for reading until t ends.
func shareBinlog(t *testing.T) {
	purgeLock.RLock()
	t.Cleanup(purgeLock.RUnlock)
	testenv.BinlogLock(t, false) // and from the other packages' tests
}

// ownBinlog holds purgeLock for writing until t ends: no other test of
// the package writes to or reads the binlog meanwhile.
func ownBinlog(t *testing.T) {
	purgeLock.Lock()
	t.Cleanup(purgeLock.Unlock)
	testenv.BinlogLock(t, true)
}

var (
	dbMu   sync.Mutex
	dbs    = map[string]*sql.DB{}
	dbErrs = map[string]error{}
)

// open returns the package's pool on the database at rawURL, or skips t
// (fails it with FERRY_REQUIRE_SERVICES=1) when the server does not answer.
func open(t *testing.T, rawURL string) *sql.DB {
	t.Helper()
	dbMu.Lock()
	defer dbMu.Unlock()
	if db, ok := dbs[rawURL]; ok {
		return db
	}
	if err, ok := dbErrs[rawURL]; ok {
		testenv.Unavailable(t, "MariaDB at "+ferrytype.RedactURL(rawURL), err)
	}
	db, err := func() (*sql.DB, error) {
		cfg, err := ferrymysql.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, err
		}
		db.SetMaxOpenConns(32)
		return db, nil
	}()
	if err != nil {
		dbErrs[rawURL] = err
		testenv.Unavailable(t, "MariaDB at "+ferrytype.RedactURL(rawURL), err)
	}
	dbs[rawURL] = db
	return db
}

// binlogURL is the MariaDB with its binlog on.
func binlogURL() string { return testenv.URL(testenv.EnvMySQLBinlog) }

// bundle is what a stream test works with.
type bundle struct {
	db    *sql.DB
	store *ferrymysql.Store
	feed  *ferrybinlog.Feed
}

// setup returns a migrated outbox table on the binlog server (dropped
// when t ends) and a feed on it (closed when t ends).
func setup(t *testing.T) bundle {
	t.Helper()
	db := open(t, binlogURL())
	s, err := ferrymysql.New(db, &ferrymysql.Config{Table: testenv.Name("fb_")})
	require.NoError(t, err)
	testenv.Migrated(t, s, func(q string) error { _, err := db.Exec(q); return err })
	f, err := ferrybinlog.New(&ferrybinlog.Config{URL: binlogURL(), Table: s.Table()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return bundle{db: db, store: s, feed: f}
}

// enqueue writes events with ids in one transaction, committed (or
// rolled back when commit is false).
func (b bundle) enqueue(t *testing.T, commit bool, ids ...string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	evs := make([]ferrytype.Event, len(ids))
	for i, id := range ids {
		evs[i] = ferrytype.Event{ID: id, AggregateType: "order", AggregateID: id, Type: "OrderPaid", Payload: json.RawMessage(`{"n":1}`)}
	}
	require.NoError(t, b.store.Enqueue(ctx, ferrystore.SQL(tx), evs, ferrystore.EnqueueOptions{}))
	if commit {
		require.NoError(t, tx.Commit())
	} else {
		require.NoError(t, tx.Rollback())
	}
}

// exec runs a statement on the binlog server.
func (b bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.db.ExecContext(testenv.Context(t, 30*time.Second), q, args...)
	require.NoError(t, err, q)
}

// stream is a running Stream whose batches with events arrive on
// batches; every batch, empty ones too, is counted in all.
type stream struct {
	batches chan ferrystore.LogBatch
	done    chan struct{} // closed when Stream returned err
	err     error
	cancel  context.CancelFunc
}

// startStream runs f.Stream from from until t ends or stop is called.
func startStream(t *testing.T, f *ferrybinlog.Feed, from ferrystore.LogPosition) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{batches: make(chan ferrystore.LogBatch, 100), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.done)
		s.err = f.Stream(ctx, from, func(ctx context.Context, b ferrystore.LogBatch) error {
			if len(b.Events) == 0 {
				return nil
			}
			select {
			case s.batches <- b:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels the stream and returns its error; it fails t if the
// stream does not end within 10 s.
func (s *stream) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
		return s.err
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not return within 10s of its context's end")
		return nil
	}
}

// next returns the next batch with events, failing t after 20 s or when
// the stream ends first.
func (s *stream) next(t *testing.T) ferrystore.LogBatch {
	t.Helper()
	select {
	case b := <-s.batches:
		return b
	case <-s.done:
		t.Fatalf("Stream ended: %v", s.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no batch within 20s")
	}
	return ferrystore.LogBatch{}
}

// until returns the batches with events up to the one holding the event
// marker.
func (s *stream) until(t *testing.T, marker string) []ferrystore.LogBatch {
	t.Helper()
	var got []ferrystore.LogBatch
	for {
		b := s.next(t)
		got = append(got, b)
		for _, e := range b.Events {
			if e.ID == marker {
				return got
			}
		}
	}
}

// warm waits until s reads the binlog: it commits an event ("warm-N")
// again and again until one arrives, and returns the batches up to it.
// A stream from the empty position starts wherever the binlog ends when
// it starts, which a test cannot see otherwise.
func (s *stream) warm(t *testing.T, b bundle) []ferrystore.LogBatch {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for i := 0; ; i++ {
		id := "warm-" + strconv.Itoa(i)
		b.enqueue(t, true, id)
		wait := time.NewTimer(200 * time.Millisecond)
		select {
		case bt := <-s.batches:
			wait.Stop()
			got := []ferrystore.LogBatch{bt}
			if bt.Events[len(bt.Events)-1].ID != id {
				got = append(got, s.until(t, id)...)
			}
			return got
		case <-s.done:
			t.Fatalf("Stream ended: %v", s.err)
		case <-deadline:
			t.Fatal("the stream read nothing within 20s")
		case <-wait.C:
		}
	}
}

func ids(bs ...ferrystore.LogBatch) [][]string {
	var out [][]string
	for _, b := range bs {
		var one []string
		for _, e := range b.Events {
			one = append(one, e.ID)
		}
		out = append(out, one)
	}
	return out
}

func isMySQLError(err error, code uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == code
}
