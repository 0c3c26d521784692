package ferry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
)

// lease is one of the table's fenced leases as this relay holds it: the
// maintainer's (ferrystore.LeaseMaintenance) and the log reader's
// (ferrystore.LeaseLog). It is the relays' one leadership mechanism.
// Taking and renewing it is one statement, by the database clock; a holder
// that does not renew within ttl loses it to the next relay that asks, and
// its renewals are fenced from then on.
type lease struct {
	store       ferrystore.Store
	name, owner string
	source      string
	ttl         time.Duration
	// held is whether the last acquire took or renewed the lease.
	held atomic.Bool
}

// acquire takes the lease, or renews it when this relay holds it already;
// it returns the lease's row and whether this relay holds it. A relay
// that did not hold it reads the row first and asks for it only when it
// is free or ended: a standby's round is a read, not a write queued
// behind the database's writers (SQLite has one, and a heartbeat waiting
// behind a standby's write lands late).
func (l *lease) acquire(ctx context.Context) (ferrystore.LeaseState, bool, error) {
	if !l.held.Load() {
		st, found, err := l.store.LeaseState(ctx, l.name)
		if err != nil {
			return ferrystore.LeaseState{}, false, err
		}
		if found && st.Owner != "" && st.Owner != l.owner && st.LeaseLeft > 0 {
			return st, false, nil
		}
	}
	st, held, err := l.store.AcquireLease(ctx, l.name, l.owner, l.source, l.ttl)
	l.held.Store(err == nil && held)
	return st, held, err
}

// renew extends the lease, saving pos with it when not empty; false when
// it was fenced: another relay holds it now.
func (l *lease) renew(ctx context.Context, pos ferrystore.LogPosition) (bool, error) {
	saved, err := l.store.RenewLease(ctx, l.name, l.owner, pos, l.ttl)
	if err == nil && !saved {
		l.held.Store(false)
	}
	return saved, err
}

// release gives the lease up, so that another relay takes it at once.
func (l *lease) release(ctx context.Context) error {
	l.held.Store(false)
	return l.store.ReleaseLease(ctx, l.name, l.owner)
}
