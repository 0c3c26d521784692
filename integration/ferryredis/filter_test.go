package ferryredis_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryredis"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testsvc.URL(testsvc.EnvRedis))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		testsvc.Unavailable(t, "Redis at "+testsvc.URL(testsvc.EnvRedis), err)
	}
	return rdb
}

// The filter short-cuts a known duplicate, but the database decides: a key
// in Redis whose marker is gone (say, purged) is applied again only if the
// database has no marker, and a conflicting redelivery is still caught.
// A nil client, plain or typed, is an error at New, not a panic at the
// first delivery.
func TestNewRefusesANilClient(t *testing.T) {
	t.Parallel()
	var c *redis.Client
	for _, rdb := range []redis.UniversalClient{nil, c} {
		_, err := ferryredis.New(rdb, "")
		require.ErrorIs(t, err, ferry.ErrInvalidConfig)
	}
}

func TestFilterInFrontOfTheInbox(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t)
	ctx := testsvc.Context(t, time.Minute)
	db := testsvc.SQLite(t)
	store, err := ferrysqlite.NewInbox(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = db.Exec(`CREATE TABLE points_account (user_id INTEGER PRIMARY KEY, points INTEGER NOT NULL); INSERT INTO points_account VALUES (7, 0)`)
	require.NoError(t, err)
	prefix := testsvc.Name("ferrytest:") + ":"
	f, err := ferryredis.New(rdb, prefix)
	require.NoError(t, err)
	in, err := ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "points-award", Filter: f, FilterTTL: time.Minute})
	require.NoError(t, err)
	award := func(amount int64) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			return ferry.ExpectResult(tx.ExecContext(ctx, `UPDATE points_account SET points = points + ? WHERE user_id = 7`, amount))
		}
	}
	op := ferry.Operation{Key: "order:42:paid", EventID: "e1", Fields: map[string]int{"user_id": 7, "amount": 10}}
	res, err := in.Process(ctx, op, award(10))
	require.NoError(t, err)
	require.Equal(t, ferry.InboxApplied, res.Outcome)
	seen, err := f.Seen(ctx, "points-award", "order:42:paid")
	require.NoError(t, err)
	require.True(t, seen, "remembered after commit")
	ttl, err := rdb.TTL(ctx, prefix+"points-award:order:42:paid").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)

	op.EventID = "e2"
	res, err = in.Process(ctx, op, award(10))
	require.NoError(t, err)
	require.Equal(t, ferry.InboxDuplicate, res.Outcome)

	op.EventID, op.Fields = "e3", map[string]int{"user_id": 7, "amount": 99}
	_, err = in.Process(ctx, op, award(99))
	require.ErrorIs(t, err, ferry.ErrConflict)

	var points int
	require.NoError(t, db.QueryRow(`SELECT points FROM points_account WHERE user_id = 7`).Scan(&points))
	require.Equal(t, 10, points)
	require.NoError(t, rdb.Del(ctx, prefix+"points-award:order:42:paid").Err())
}
