package ferryadmin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// bundle is a migrated outbox on a fresh table of a real database.
type bundle struct {
	ctx   context.Context
	kind  string
	st    testsvc.SQLStore
	admin ferrystore.Admin
	ob    *ferry.Outbox[*sql.Tx]
}

func setup(t *testing.T, kind string) *bundle {
	t.Helper()
	b := &bundle{ctx: testsvc.Context(t, 2*time.Minute), kind: kind, st: testsvc.Store(t, kind)}
	b.admin = b.st.Driver
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	return b
}

func (b *bundle) enqueue(t *testing.T, events ...ferry.Event) []string {
	t.Helper()
	tx, err := b.st.DB.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := b.ob.EnqueueTx(b.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return ids
}

// claim claims n events, as a relay does, and returns their ids and token.
func (b *bundle) claim(t *testing.T, n int) ([]string, string) {
	t.Helper()
	tok := testsvc.Name("tok-")
	msgs, err := b.admin.Claim(b.ctx, ferrystore.ClaimParams{Limit: n, Token: tok, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, n)
	ids := make([]string, n)
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids, tok
}

// dead claims n events and marks them DEAD with lastError, as a relay
// that gave up does.
func (b *bundle) dead(t *testing.T, n int, lastError string) []string {
	t.Helper()
	ids, tok := b.claim(t, n)
	fails := make([]ferrystore.Failure, n)
	for i, id := range ids {
		fails[i] = ferrystore.Failure{ID: id, Token: tok, Dead: true, Error: lastError}
	}
	_, err := b.admin.MarkFailed(b.ctx, fails)
	require.NoError(t, err)
	return ids
}

// sent claims n events and marks them SENT.
func (b *bundle) sent(t *testing.T, n int) []string {
	t.Helper()
	ids, tok := b.claim(t, n)
	_, err := b.admin.MarkSent(b.ctx, tok, ids)
	require.NoError(t, err)
	return ids
}

func (b *bundle) status(t *testing.T, id string) string {
	t.Helper()
	r, err := b.admin.Get(b.ctx, id)
	require.NoError(t, err)
	return string(r.Status)
}

func event(typ, agg string) ferry.Event {
	return ferry.Event{AggregateType: "order", AggregateID: agg, Type: typ, Payload: json.RawMessage(`{"order_id":` + agg + `}`)}
}

// eventually polls cond until it holds, failing the test after d.
func eventually(t *testing.T, d time.Duration, cond func() bool, why string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %s: %s", d, why)
		}
		<-tick.C
	}
}

// inbox is a consumer's inbox tables on a fresh name in a real database.
type inbox struct {
	db      *sql.DB
	store   ferrystore.InboxDriver[*sql.Tx]
	url     string
	markers string
}

func setupInbox(t *testing.T, kind string) *inbox {
	t.Helper()
	b := &inbox{}
	m, c, v := testsvc.InboxTables()
	var err error
	switch kind {
	case "mysql":
		b.db, b.url = testsvc.MySQL(t), testsvc.URL(testsvc.EnvMySQL)
		b.store, err = ferrymysql.NewInbox(b.db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "postgres":
		b.db, b.url = testsvc.PostgresSQL(t), testsvc.URL(testsvc.EnvPostgres)
		b.store, err = ferrypg.NewStdlibInbox(b.db, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "sqlite":
		b.db = testsvc.SQLite(t)
		var file string
		require.NoError(t, b.db.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file))
		b.url = "sqlite://" + file
		b.store, err = ferrysqlite.NewInbox(b.db, &ferrysqlite.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	}
	require.NoError(t, err)
	testsvc.MigratedInbox(t, b.store, func(q string) error { _, err := b.db.Exec(q); return err }, m, m, c, v)
	b.markers = m
	return b
}

// apply processes an operation through consumer's inbox, with a business
// function that changes nothing.
func (b *inbox) apply(t *testing.T, consumer, key, eventID string, fields any) (ferry.InboxResult, error) {
	t.Helper()
	in, err := ferry.NewInbox(b.store, &ferry.InboxConfig{Consumer: consumer})
	require.NoError(t, err)
	return in.Process(context.Background(), ferry.Operation{Key: key, EventID: eventID, Fields: fields},
		func(context.Context, *sql.Tx) error { return nil })
}
