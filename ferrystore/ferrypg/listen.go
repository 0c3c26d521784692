package ferrypg

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Listen holds a connection of its own, outside the store's pool, in
// LISTEN on the table's channel and calls notify for each notification,
// that is after each commit that enqueued events. It returns when ctx ends
// (with ctx's error) or the connection fails; the relay calls it again
// with a backoff. The connection is not the pool's: a relay listens for
// as long as it runs, and relays sharing a pool would each pin one of its
// connections, until, with as many relays as connections, every claim
// waited for a connection forever.
func (s *core) Listen(ctx context.Context, notify func()) error {
	return s.listen(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "LISTEN "+quote(s.channel)); err != nil {
			return fmt.Errorf("listen %s: %w", s.channel, err)
		}
		notify() // catch up on whatever committed before LISTEN took effect
		for {
			if _, err := c.WaitForNotification(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("listen %s: %w", s.channel, err)
			}
			notify()
		}
	})
}

// listenOn runs fn on a connection of its own, made with cfg and closed
// when fn returns.
func listenOn(ctx context.Context, cfg *pgx.ConnConfig, fn func(*pgx.Conn) error) error {
	c, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return fn(c)
}

// stdlibListen connects like the connections of db, which pgx's stdlib
// driver opened: it borrows one only to read its configuration.
func stdlibListen(db *sql.DB) func(ctx context.Context, fn func(*pgx.Conn) error) error {
	return func(ctx context.Context, fn func(*pgx.Conn) error) error {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		var cfg *pgx.ConnConfig
		err = c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("ferrypg: LISTEN needs pgx's stdlib driver, not %T", dc)
			}
			cfg = sc.Conn().Config()
			return nil
		})
		c.Close()
		if err != nil {
			return err
		}
		return listenOn(ctx, cfg, fn)
	}
}
