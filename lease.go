package ferry

import (
	"context"
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
}

// acquire takes the lease, or renews it when this relay holds it already;
// it returns the lease's row and whether this relay holds it.
func (l *lease) acquire(ctx context.Context) (ferrystore.LeaseState, bool, error) {
	return l.store.AcquireLease(ctx, l.name, l.owner, l.source, l.ttl)
}

// renew extends the lease, saving pos with it when not empty; false when
// it was fenced: another relay holds it now.
func (l *lease) renew(ctx context.Context, pos ferrystore.LogPosition) (bool, error) {
	return l.store.RenewLease(ctx, l.name, l.owner, pos, l.ttl)
}

// release gives the lease up, so that another relay takes it at once.
func (l *lease) release(ctx context.Context) error {
	return l.store.ReleaseLease(ctx, l.name, l.owner)
}
