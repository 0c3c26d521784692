package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/token"
)

// leaseStatements are the statements of the lease table, table_lease: one
// row per lease, by its primary key (name). Each write is one statement on
// one row, fenced by its owner column.
type leaseStatements struct {
	acquire, renew, save, release, state string
}

func newLeaseStatements(d Dialect, table string) leaseStatements {
	lt := d.Quote(LeaseTable(table))
	// The lease is taken when it is free, already the caller's, or ended
	// by the database clock; owner is the first column set, as UpsertIf
	// asks: once it is the caller's, the condition still holds.
	free := lt + ".owner = " + d.Inserted("owner") + " OR " + lt + ".owner = '' OR " + lt + ".lease_until < " + d.Now()
	return leaseStatements{
		// One statement: a row absent is inserted; two relays inserting it
		// at once meet on the primary key, and the second one's insert
		// becomes the conditional update, under the row's lock.
		acquire: d.Rebind("INSERT INTO " + lt + " (name, owner, source, lease_until) VALUES (?, ?, ?, " + d.Shift() + ") " +
			d.UpsertIf("name", []string{"owner", "source", "lease_until"}, free)),
		renew: d.Rebind("UPDATE " + lt + " SET lease_until = " + d.Shift() + " WHERE name = ? AND owner = ?"),
		save: d.Rebind("UPDATE " + lt + " SET lease_until = " + d.Shift() + ", position = ?, saved_at = " + d.Now() +
			" WHERE name = ? AND owner = ?"),
		release: d.Rebind("UPDATE " + lt + " SET owner = '', lease_until = " + d.Now() + " WHERE name = ? AND owner = ?"),
		state: d.Rebind("SELECT owner, source, position, " + d.AgeMicros("lease_until") + ", " + d.AgeMicros("saved_at") +
			" FROM " + lt + " WHERE name = ?"),
	}
}

// AcquireLease takes or renews the lease name for owner (see
// ferrystore.Store.AcquireLease).
func (o *Outbox) AcquireLease(ctx context.Context, name, owner, source string, ttl time.Duration) (ferrystore.LeaseState, bool, error) {
	if err := ferrystore.ValidateLease(name, owner); err != nil {
		return ferrystore.LeaseState{}, false, err
	}
	if ttl <= 0 {
		return ferrystore.LeaseState{}, false, fmt.Errorf("%w: lease %s: ttl %s must be positive", ferrytype.ErrInvalidConfig, name, ttl)
	}
	source = token.Truncate(source, ferrystore.MaxLeaseSourceLen)
	if _, err := o.pool.Exec(ctx, o.leases.acquire, name, owner, source, o.d.Duration(ttl)); err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	st, _, err := o.LeaseState(ctx, name)
	if err != nil {
		return ferrystore.LeaseState{}, false, err
	}
	// The statement took the lease exactly when owner is the row's owner
	// now: refused, it left another owner there.
	return st, st.Owner == owner, nil
}

// RenewLease extends owner's lease, and stores pos when it is not empty.
func (o *Outbox) RenewLease(ctx context.Context, name, owner string, pos ferrystore.LogPosition, ttl time.Duration) (bool, error) {
	if err := ferrystore.ValidateLease(name, owner); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("%w: lease %s: ttl %s must be positive", ferrytype.ErrInvalidConfig, name, ttl)
	}
	var (
		n   int64
		err error
	)
	if pos == "" {
		n, err = o.pool.Exec(ctx, o.leases.renew, o.d.Duration(ttl), name, owner)
	} else {
		n, err = o.pool.Exec(ctx, o.leases.save, o.d.Duration(ttl), string(pos), name, owner)
	}
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", name, err)
	}
	return n == 1, nil
}

// ReleaseLease gives up owner's lease, keeping its position.
func (o *Outbox) ReleaseLease(ctx context.Context, name, owner string) error {
	if err := ferrystore.ValidateLease(name, owner); err != nil {
		return err
	}
	if _, err := o.pool.Exec(ctx, o.leases.release, name, owner); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// LeaseState reads the lease's row.
func (o *Outbox) LeaseState(ctx context.Context, name string) (ferrystore.LeaseState, bool, error) {
	if err := ferrystore.ValidateLeaseName(name); err != nil {
		return ferrystore.LeaseState{}, false, err
	}
	rows, err := o.pool.Query(ctx, o.leases.state, name)
	if err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ferrystore.LeaseState{}, false, fmt.Errorf("lease %s: %w", name, err)
		}
		return ferrystore.LeaseState{Name: name}, false, nil
	}
	var (
		st              = ferrystore.LeaseState{Name: name}
		pos             string
		leaseAge, saved sql.NullInt64
	)
	if err := rows.Scan(&st.Owner, &st.Source, &pos, &leaseAge, &saved); err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	now := time.Now()
	st.Position = ferrystore.LogPosition(pos)
	st.LeaseLeft = -time.Duration(leaseAge.Int64) * time.Microsecond
	st.LeaseUntil = now.Add(st.LeaseLeft)
	st.SavedAt = now.Add(-time.Duration(saved.Int64) * time.Microsecond)
	if err := rows.Err(); err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	return st, true, nil
}
