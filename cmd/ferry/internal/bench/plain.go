package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// plainRelay is the baseline ferry is measured against: the simplest
// relay with the same protocol, written by hand on the same outbox table.
// In one READ COMMITTED transaction it selects a batch of NEW rows FOR
// UPDATE SKIP LOCKED and leases them (SENDING, a fresh token), publishes
// them all persistently and waits for every confirm, then marks them SENT
// in one UPDATE fenced by the token.
type plainRelay struct {
	t     *Target
	b     *Broker
	batch int
}

type plainRow struct{ id, dest, payload string }

// loop runs one relay loop on its own connection and publisher until the
// outbox has nothing to claim (poll 0) or ctx ends (poll > 0, looking
// again after poll whenever a claim came back short). It adds the events
// it marked SENT to sent.
func (p *plainRelay) loop(ctx context.Context, poll time.Duration, sent *atomic.Int64) error {
	conn, err := p.t.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if p.t.Dialect == "mysql" {
		// Once per session, instead of once per transaction.
		if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
			return err
		}
	}
	publish, closePub, err := p.publisher(ctx)
	if err != nil {
		return err
	}
	defer closePub()
	for {
		token := uuid.NewString()
		// A polling loop is stopped by ending ctx, which may cut a batch
		// short: its events stay leased, as after a crash.
		stopped := func(err error) bool { return poll > 0 && ctx.Err() != nil && err != nil }
		rows, err := p.claim(ctx, conn, token)
		if stopped(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("plain claim: %w", err)
		}
		if len(rows) > 0 {
			if err := publish(ctx, rows); stopped(err) {
				return nil
			} else if err != nil {
				return fmt.Errorf("plain publish: %w", err)
			}
			k, err := p.mark(ctx, conn, token, rows)
			if stopped(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("plain mark: %w", err)
			}
			if k != int64(len(rows)) {
				return fmt.Errorf("plain mark: %d of %d events marked SENT", k, len(rows))
			}
			sent.Add(k)
		}
		if len(rows) == p.batch {
			continue
		}
		if poll <= 0 {
			if len(rows) == 0 {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

func (p *plainRelay) table() string { return p.t.quote(p.t.Store.Table()) }

func (p *plainRelay) claim(ctx context.Context, conn *sql.Conn, token string) ([]plainRow, error) {
	lock, lease := " FOR UPDATE SKIP LOCKED", "NOW(6) + INTERVAL 30 SECOND"
	switch p.t.Dialect {
	case "postgres":
		lease = "now() + interval '30 seconds'"
	case "sqlite":
		// The store's connections begin IMMEDIATE: the writer lock is the row lock.
		lock, lease = "", "strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds')"
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	// idx_pending (status, available_at, event_id) serves the scan.
	q := p.t.bind("SELECT event_id, destination, payload FROM " + p.table() +
		" WHERE status = 'NEW' AND available_at <= " + p.t.now() + " ORDER BY available_at, event_id LIMIT ?" + lock)
	res, err := tx.QueryContext(ctx, q, p.batch)
	if err != nil {
		return nil, err
	}
	var rows []plainRow
	for res.Next() {
		var r plainRow
		if err := res.Scan(&r.id, &r.dest, &r.payload); err != nil {
			res.Close()
			return nil, err
		}
		rows = append(rows, r)
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, tx.Commit()
	}
	args := []any{token}
	q = p.t.bind("UPDATE " + p.table() + " SET status = 'SENDING', lease_token = ?, locked_until = " + lease +
		" WHERE event_id IN (" + p.ids(rows, &args) + ")")
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return nil, err
	}
	return rows, tx.Commit()
}

func (p *plainRelay) mark(ctx context.Context, conn *sql.Conn, token string, rows []plainRow) (int64, error) {
	args := []any{token}
	q := p.t.bind("UPDATE " + p.table() + " SET status = 'SENT', sent_at = " + p.t.now() +
		" WHERE lease_token = ? AND status = 'SENDING' AND event_id IN (" + p.ids(rows, &args) + ")")
	res, err := conn.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (p *plainRelay) ids(rows []plainRow, args *[]any) string {
	var sb strings.Builder
	for i, r := range rows {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('?')
		*args = append(*args, r.id)
	}
	return sb.String()
}

// publisher opens the loop's own broker client (see destination.plain).
func (p *plainRelay) publisher(ctx context.Context) (func(context.Context, []plainRow) error, func(), error) {
	return p.b.d.plain(ctx)
}
