package ferrypgoutput_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrylog/ferrypgoutput"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

var pools sync.Map // env -> *pgxpool.Pool

// pool returns a pool on the server of env, skipping (or failing, with
// FERRY_REQUIRE_SERVICES=1) when it is unreachable.
func pool(t testing.TB, env string) *pgxpool.Pool {
	t.Helper()
	if p, ok := pools.Load(env); ok {
		return p.(*pgxpool.Pool)
	}
	url := testenv.URL(env)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, url)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL at "+ferrytype.RedactURL(url), err)
	}
	if old, loaded := pools.LoadOrStore(env, p); loaded {
		p.Close()
		return old.(*pgxpool.Pool)
	}
	return p
}

// bundle is a migrated outbox table on the logical server and a feed on
// it (not yet checked).
type bundle struct {
	pool  *pgxpool.Pool
	store *ferrypg.Store
	feed  *ferrypgoutput.Feed
	cfg   ferrypgoutput.Config
}

// setup migrates a fresh outbox table on the logical server and returns a
// feed on it; the feed is closed, and its slot, publication and table are
// dropped, when the test ends. adjust, when not nil, changes the config.
func setup(t *testing.T, adjust func(*ferrypgoutput.Config)) *bundle {
	t.Helper()
	p := pool(t, testenv.EnvPostgresLogical)
	table := testenv.Name("fo_")
	s, err := ferrypg.New(p, &ferrypg.Config{Table: table})
	require.NoError(t, err)
	testenv.Migrated(t, s, func(q string) error { _, err := p.Exec(context.Background(), q); return err })
	cfg := ferrypgoutput.Config{URL: testenv.URL(testenv.EnvPostgresLogical), Table: table, StatusInterval: 50 * time.Millisecond}
	if adjust != nil {
		adjust(&cfg)
	}
	f, err := ferrypgoutput.New(&cfg)
	require.NoError(t, err)
	dropSlotAndPublication(t, p, f.Slot(), f.Publication())
	t.Cleanup(func() { require.NoError(t, f.Close()) }) // runs before the drops
	return &bundle{pool: p, store: s, feed: f, cfg: cfg}
}

// dropSlotAndPublication drops the slot and the publication when the test
// ends, waiting for the slot's walsender to go away.
func dropSlotAndPublication(t *testing.T, p *pgxpool.Pool, slot, pub string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, `DROP PUBLICATION IF EXISTS "`+pub+`"`); err != nil {
			t.Errorf("drop publication %s: %v", pub, err)
		}
		for {
			var n int
			err := p.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
				WHERE slot_name = $1 AND NOT active`, slot).Scan(&n)
			if err == nil {
				err = p.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
			}
			if err == nil && n == 0 {
				return
			}
			if ctx.Err() != nil {
				t.Errorf("drop replication slot %s: %v (still there: %d)", slot, err, n)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond): // poll until the walsender let go
			}
		}
	})
}

// enqueue commits one transaction with events ids.
func (b *bundle) enqueue(t *testing.T, ids ...string) {
	t.Helper()
	require.NoError(t, b.enqueueTx(t, true, ids...))
}

// enqueueTx writes events ids in a transaction and commits it or rolls it
// back.
func (b *bundle) enqueueTx(t *testing.T, commit bool, ids ...string) error {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	events := make([]ferrytype.Event, len(ids))
	for i, id := range ids {
		events[i] = ferrytype.Event{ID: id, Type: "Tested", AggregateID: "a", Payload: json.RawMessage(`{"n":1}`)}
	}
	if err := b.store.Enqueue(ctx, b.store.UnwrapTx(tx), events, ferrystore.EnqueueOptions{}); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// exec runs q on the logical server.
func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(testenv.Context(t, 30*time.Second), q, args...)
	require.NoError(t, err, q)
}

// stream is a running Stream whose batches arrive on a channel.
type stream struct {
	batches chan ferrystore.LogBatch
	done    chan error
	cancel  context.CancelFunc
}

// startStream runs b.feed.Stream from from until the test ends or stop.
func (b *bundle) startStream(t *testing.T, from ferrystore.LogPosition) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{batches: make(chan ferrystore.LogBatch, 1000), done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- b.feed.Stream(ctx, from, func(ctx context.Context, batch ferrystore.LogBatch) error {
			select {
			case s.batches <- batch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels the stream and returns its error, failing the test when it
// does not return promptly.
func (s *stream) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for a second stop
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return within 5s of its context's end")
		return nil
	}
}

// next returns the next batch with events, skipping empty ones.
func (s *stream) next(t *testing.T) ferrystore.LogBatch {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case b := <-s.batches:
			if len(b.Events) > 0 {
				return b
			}
		case err := <-s.done:
			s.done <- err
			t.Fatalf("Stream ended: %v", err)
		case <-deadline:
			t.Fatal("no batch with events within 20s")
		}
	}
}

// noneUntil fails the test if a batch with events arrives before a batch with
// position at least pos: the stream went past pos without reporting one.
func (s *stream) noneUntil(t *testing.T, pos ferrystore.LogPosition) {
	t.Helper()
	want := lsn(t, pos)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case b := <-s.batches:
			if len(b.Events) > 0 {
				t.Fatalf("unexpected batch %+v", b)
			}
			if lsn(t, b.Pos) >= want {
				return
			}
		case err := <-s.done:
			s.done <- err
			t.Fatalf("Stream ended: %v", err)
		case <-deadline:
			t.Fatalf("the stream did not reach %s within 20s", pos)
		}
	}
}

func lsn(t testing.TB, pos ferrystore.LogPosition) pglogrepl.LSN {
	t.Helper()
	l, err := pglogrepl.ParseLSN(string(pos))
	require.NoError(t, err, "position %q", pos)
	return l
}

// ids returns a batch's event ids.
func ids(b ferrystore.LogBatch) []string {
	out := make([]string, len(b.Events))
	for i, e := range b.Events {
		out[i] = e.ID
	}
	return out
}

// slotState reads the slot's confirmed_flush_lsn; ok is false when the
// slot does not exist.
func slotState(t testing.TB, p *pgxpool.Pool, slot string) (confirmed pglogrepl.LSN, active, ok bool) {
	t.Helper()
	var s *string
	err := p.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s, &active)
	if err != nil {
		return 0, false, false
	}
	if s != nil {
		confirmed, err = pglogrepl.ParseLSN(*s)
		require.NoError(t, err)
	}
	return confirmed, active, true
}
