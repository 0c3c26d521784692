package ferrypg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrydev/ferry/ferrytype"
)

// Open connects a pgx pool to the database at rawURL
// (postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=...,
// any libpq connection string pgx accepts, TLS included), checks that it
// answers, and returns a store that closes the pool on Close. Errors never
// contain the password.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: database URL %s: cannot parse", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	if pc.MaxConns < 8 {
		pc.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open %s: %w", ferrytype.RedactURL(rawURL), err)
	}
	s, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.close = pool.Close
	return s, nil
}

// Pool returns the pgx pool of a store made by New or Open.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
