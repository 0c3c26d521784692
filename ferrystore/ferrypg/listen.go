package ferrypg

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Listen holds one connection in LISTEN on the table's channel and calls
// notify for each notification, that is after each commit that enqueued
// events. It returns when ctx ends (with ctx's error) or the connection
// fails; the relay calls it again with a backoff.
func (s *core) Listen(ctx context.Context, notify func()) error {
	return s.listen(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "LISTEN "+quote(s.channel)); err != nil {
			return fmt.Errorf("listen %s: %w", s.channel, err)
		}
		defer func() {
			// A connection interrupted by ctx is closed by pgx; a healthy
			// one goes back to the pool without the subscription.
			if !c.IsClosed() {
				_, _ = c.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
			}
		}()
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

func stdlibListen(db *sql.DB) func(ctx context.Context, fn func(*pgx.Conn) error) error {
	return func(ctx context.Context, fn func(*pgx.Conn) error) error {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("ferrypg: LISTEN needs pgx's stdlib driver, not %T", dc)
			}
			return fn(sc.Conn())
		})
	}
}
