package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/token"
)

var _ ferrystore.LogCheckpoints = (*Outbox)(nil)

// logStatements are the statements of the log relay's checkpoint table,
// which holds one row (id 1). Each write is one statement on that row,
// fenced by its owner column.
type logStatements struct {
	create, acquire, save, release, state string
}

func newLogStatements(d Dialect, table string) logStatements {
	lt := d.Quote(LogTable(table))
	return logStatements{
		// A second relay's insert of the row at the same moment fails on
		// the primary key; the row is there, which is all it wanted.
		create: "INSERT INTO " + lt + " (id) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM " + lt + " WHERE id = 1)",
		// The lease is taken when it is free, already the caller's, or
		// ended by the database clock.
		acquire: d.Rebind("UPDATE " + lt + " SET owner = ?, source = ?, lease_until = " + d.Shift() +
			" WHERE id = 1 AND (owner = ? OR owner = '' OR lease_until < " + d.Now() + ")"),
		save: d.Rebind("UPDATE " + lt + " SET position = ?, saved_at = " + d.Now() + ", lease_until = " + d.Shift() +
			" WHERE id = 1 AND owner = ?"),
		release: d.Rebind("UPDATE " + lt + " SET owner = '', lease_until = " + d.Now() + " WHERE id = 1 AND owner = ?"),
		state: "SELECT position, source, owner, " + d.AgeMicros("lease_until") + ", " + d.AgeMicros("saved_at") +
			" FROM " + lt + " WHERE id = 1",
	}
}

// AcquireLog takes or renews the log reader's lease (see
// ferrystore.LogCheckpoints).
func (o *Outbox) AcquireLog(ctx context.Context, owner, source string, lease time.Duration) (ferrystore.LogPosition, bool, error) {
	if owner == "" {
		return "", false, fmt.Errorf("%w: log lease: empty owner", ferrytype.ErrInvalidConfig)
	}
	if _, err := o.pool.Exec(ctx, o.logs.create); err != nil && !errors.Is(o.d.Classify(err), ferrytype.ErrDuplicate) {
		return "", false, fmt.Errorf("log lease: %w", o.d.Classify(err))
	}
	n, err := o.pool.Exec(ctx, o.logs.acquire, owner, token.Truncate(source, 255), o.d.Duration(lease), owner)
	if err != nil {
		return "", false, fmt.Errorf("log lease: %w", o.d.Classify(err))
	}
	st, _, err := o.LogState(ctx)
	if err != nil {
		return "", false, err
	}
	return st.Position, n == 1 && st.Owner == owner, nil
}

// SaveLog stores the checkpoint while owner holds the lease.
func (o *Outbox) SaveLog(ctx context.Context, owner string, pos ferrystore.LogPosition, lease time.Duration) (bool, error) {
	n, err := o.pool.Exec(ctx, o.logs.save, string(pos), o.d.Duration(lease), owner)
	if err != nil {
		return false, fmt.Errorf("log checkpoint: %w", o.d.Classify(err))
	}
	return n == 1, nil
}

// ReleaseLog gives up owner's lease, keeping the checkpoint.
func (o *Outbox) ReleaseLog(ctx context.Context, owner string) error {
	if _, err := o.pool.Exec(ctx, o.logs.release, owner); err != nil {
		return fmt.Errorf("log lease release: %w", o.d.Classify(err))
	}
	return nil
}

// LogState reads the checkpoint row.
func (o *Outbox) LogState(ctx context.Context) (ferrystore.LogState, bool, error) {
	rows, err := o.pool.Query(ctx, o.logs.state)
	if err != nil {
		return ferrystore.LogState{}, false, fmt.Errorf("log state: %w", o.d.Classify(err))
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ferrystore.LogState{}, false, fmt.Errorf("log state: %w", o.d.Classify(err))
		}
		return ferrystore.LogState{}, false, nil
	}
	var (
		st              ferrystore.LogState
		pos             string
		leaseAge, saved sql.NullInt64
	)
	if err := rows.Scan(&pos, &st.Source, &st.Owner, &leaseAge, &saved); err != nil {
		return ferrystore.LogState{}, false, fmt.Errorf("log state: %w", err)
	}
	now := time.Now()
	st.Position = ferrystore.LogPosition(pos)
	st.LeaseLeft = -time.Duration(leaseAge.Int64) * time.Microsecond
	st.LeaseUntil = now.Add(st.LeaseLeft)
	st.SavedAt = now.Add(-time.Duration(saved.Int64) * time.Microsecond)
	return st, true, rows.Err()
}
