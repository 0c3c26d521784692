package ferrymem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/token"
)

// relayRow is a relay's heartbeat row: what it said at its last beat, and
// the database clock's times of its first and last beats.
type relayRow struct {
	beat              ferrystore.RelayBeat
	started, lastSeen time.Time
}

// leaseRow is one lease of the table.
type leaseRow struct {
	owner, source string
	position      ferrystore.LogPosition
	until, saved  time.Time // saved is zero until a position is saved
}

// toLocal converts a time of the database clock to this process's clock:
// now minus how long ago it was by the database clock (see
// ferrystore.RelayBeat.LastSeen), so that a clock a test moved neither
// ages nor rejuvenates what the relays compare with their own clock.
func toLocal(at, dbNow, local time.Time) time.Time { return local.Add(at.Sub(dbNow)) }

// Beat records b as the relay's current state: its row is created at the
// first beat (the start time then set) and every field but the start
// replaced at the later ones, the last beat set to the database clock.
func (s *Store) Beat(ctx context.Context, b ferrystore.RelayBeat) error {
	if err := b.Validate(); err != nil {
		return err
	}
	b.Host = token.Truncate(b.Host, ferrystore.MaxRelayHostLen)
	b.Version = token.Truncate(b.Version, ferrystore.MaxRelayVersionLen)
	b.Broker = token.Truncate(ferrytype.RedactURL(b.Broker), ferrystore.MaxRelayBrokerLen)
	b.BrokerError = token.Truncate(ferrytype.RedactURL(b.BrokerError), ferrystore.MaxRelayBrokerErrorLen)
	b.Source = token.Truncate(b.Source, ferrystore.MaxRelaySourceLen)
	b.StartedAt, b.LastSeen = time.Time{}, time.Time{}
	err := s.db.statement(ctx, func(now time.Time) error {
		r := s.t.relays[b.ID]
		if r == nil {
			r = &relayRow{started: now}
			s.t.relays[b.ID] = r
		}
		r.beat, r.lastSeen = b, now
		return nil
	})
	if err != nil {
		return fmt.Errorf("relay heartbeat: %w", err)
	}
	return nil
}

// Relays returns the recorded relays by id, at most
// ferrystore.MaxListLimit of them, their times converted to this
// process's clock.
func (s *Store) Relays(ctx context.Context) ([]ferrystore.RelayBeat, error) {
	out := []ferrystore.RelayBeat{}
	err := s.db.statement(ctx, func(now time.Time) error {
		local := time.Now()
		for _, r := range s.t.relays {
			b := r.beat
			b.StartedAt, b.LastSeen = toLocal(r.started, now, local), toLocal(r.lastSeen, now, local)
			out = append(out, b)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list relays: %w", err)
	}
	slices.SortFunc(out, func(a, b ferrystore.RelayBeat) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), ferrystore.MaxListLimit)], nil
}

// ForgetRelay deletes the relay's row; a relay without one is no error.
func (s *Store) ForgetRelay(ctx context.Context, id string) error {
	err := s.db.statement(ctx, func(time.Time) error {
		delete(s.t.relays, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget relay %s: %w", id, err)
	}
	return nil
}

// PruneRelays deletes the rows whose last beat is more than olderThan old
// by the database clock, but keep's.
func (s *Store) PruneRelays(ctx context.Context, olderThan time.Duration, keep string) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: prune relays: olderThan %s must be positive", ferrytype.ErrInvalidConfig, olderThan)
	}
	var n int64
	err := s.db.statement(ctx, func(now time.Time) error {
		for id, r := range s.t.relays {
			if id != keep && r.lastSeen.Before(now.Add(-olderThan)) {
				delete(s.t.relays, id)
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune relays: %w", err)
	}
	return n, nil
}

// checkLease validates a lease's name, owner and ttl.
func checkLease(name, owner string, ttl time.Duration) error {
	if err := ferrystore.ValidateLease(name, owner); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: lease %s: ttl %s must be positive", ferrytype.ErrInvalidConfig, name, ttl)
	}
	return nil
}

// AcquireLease takes or renews the lease name for owner until the
// database clock's now + ttl, in one step: it succeeds when the lease is
// absent (it is created), free, already owner's, or ended. It returns the
// lease as it is after the call and whether owner holds it.
func (s *Store) AcquireLease(ctx context.Context, name, owner, source string, ttl time.Duration) (ferrystore.LeaseState, bool, error) {
	if err := checkLease(name, owner, ttl); err != nil {
		return ferrystore.LeaseState{}, false, err
	}
	source = token.Truncate(source, ferrystore.MaxLeaseSourceLen)
	var st ferrystore.LeaseState
	err := s.db.statement(ctx, func(now time.Time) error {
		l := s.t.leases[name]
		if l == nil {
			l = &leaseRow{}
			s.t.leases[name] = l
		}
		if l.owner == "" || l.owner == owner || l.until.Before(now) {
			l.owner, l.source, l.until = owner, source, now.Add(ttl)
		}
		st = l.state(name, now)
		return nil
	})
	if err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	return st, st.Owner == owner, nil
}

// RenewLease extends owner's lease name to now + ttl, and stores pos as
// its position when pos is not empty, while owner holds it. It reports
// whether it did.
func (s *Store) RenewLease(ctx context.Context, name, owner string, pos ferrystore.LogPosition, ttl time.Duration) (bool, error) {
	if err := checkLease(name, owner, ttl); err != nil {
		return false, err
	}
	var renewed bool
	err := s.db.statement(ctx, func(now time.Time) error {
		l := s.t.leases[name]
		if l == nil || l.owner != owner {
			return nil
		}
		l.until = now.Add(ttl)
		if pos != "" {
			l.position, l.saved = pos, now
		}
		renewed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", name, err)
	}
	return renewed, nil
}

// ReleaseLease gives up owner's lease name, keeping its position, so that
// another owner takes it at once. Not holding it is no error.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string) error {
	if err := ferrystore.ValidateLease(name, owner); err != nil {
		return err
	}
	err := s.db.statement(ctx, func(now time.Time) error {
		if l := s.t.leases[name]; l != nil && l.owner == owner {
			l.owner, l.until = "", now
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// LeaseState reads the lease name; ok is false when it was never taken.
func (s *Store) LeaseState(ctx context.Context, name string) (ferrystore.LeaseState, bool, error) {
	if err := ferrystore.ValidateLeaseName(name); err != nil {
		return ferrystore.LeaseState{}, false, err
	}
	st, ok := ferrystore.LeaseState{Name: name}, false
	err := s.db.statement(ctx, func(now time.Time) error {
		if l := s.t.leases[name]; l != nil {
			st, ok = l.state(name, now), true
		}
		return nil
	})
	if err != nil {
		return ferrystore.LeaseState{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	return st, ok, nil
}

// state is the lease as LeaseState returns it, its times converted to
// this process's clock.
func (l *leaseRow) state(name string, now time.Time) ferrystore.LeaseState {
	local := time.Now()
	st := ferrystore.LeaseState{Name: name, Owner: l.owner, Source: l.source, Position: l.position,
		LeaseUntil: toLocal(l.until, now, local), LeaseLeft: l.until.Sub(now)}
	if !l.saved.IsZero() {
		st.SavedAt = toLocal(l.saved, now, local)
	}
	return st
}
