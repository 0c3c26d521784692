// Package ferryredis is an optional fast filter for ferry's inbox, in
// Redis. It is never the rule: a Redis key says "this operation was
// probably applied", and the inbox then reads the stored marker from the
// database, which decides. Redis and the business database share no
// transaction (SETNX before the commit can block a retry of a transaction
// that rolled back; after the commit it can be lost), so the filter is
// written only after the commit and trusted only as a hint.
package ferryredis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Filter implements ferry.InboxFilter with one Redis key per operation.
type Filter struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ ferry.InboxFilter = (*Filter)(nil)

// New returns a filter on rdb whose keys start with prefix (default
// "ferry:inbox:"). A nil rdb, or a nil client in it, is an error.
func New(rdb redis.UniversalClient, prefix string) (*Filter, error) {
	if nilness.Nil(rdb) {
		return nil, fmt.Errorf("%w: ferryredis.New needs a Redis client", ferrytype.ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = "ferry:inbox:"
	}
	return &Filter{rdb: rdb, prefix: prefix}, nil
}

func (f *Filter) key(consumer, key string) string { return f.prefix + consumer + ":" + key }

// Seen reports whether the key was remembered.
func (f *Filter) Seen(ctx context.Context, consumer, key string) (bool, error) {
	n, err := f.rdb.Exists(ctx, f.key(consumer, key)).Result()
	return n > 0, err
}

// Remember records the key for ttl.
func (f *Filter) Remember(ctx context.Context, consumer, key string, ttl time.Duration) error {
	return f.rdb.Set(ctx, f.key(consumer, key), 1, ttl).Err()
}
