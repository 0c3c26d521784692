package ferry

import "sync/atomic"

// RelayStats counts what a relay did since it was created.
type RelayStats struct {
	Claims     int64 // claim statements that returned events
	Claimed    int64 // events claimed
	Confirmed  int64 // events confirmed and marked SENT
	Duplicates int64 // confirmed events the broker reported as duplicates
	Returned   int64 // unroutable outcomes
	Rejected   int64 // rejected outcomes
	Unknown    int64 // unknown outcomes
	Retried    int64 // events put back to NEW with a delay, by settle or sweep
	NotSent    int64 // unknown outcomes that never left the process (ferrytype.ErrNotSent), given back without spending an attempt
	Released   int64 // of those, events given back to NEW (Store.Release)
	Outages    int64 // broker outages the relay waited out
	Dead       int64 // events moved to DEAD, by settle or sweep
	Fenced     int64 // outcome marks that found the lease gone (0 rows)
	Swept      int64 // expired leases the sweeper returned or killed
	Purged     int64 // SENT rows deleted by retention
	Errors     int64 // database errors in claims and marks
	// Heartbeats counts the beats recorded in the heartbeat table,
	// HeartbeatErrors the beats that failed.
	Heartbeats, HeartbeatErrors int64
}

// relayCounters are a relay's counters, which its parts add to.
type relayCounters struct {
	claims, claimed, confirmed, duplicates, returned, rejected, unknown atomic.Int64
	retried, dead, fenced, swept, purged, errors                        atomic.Int64
	notSent, released, outages, beats, beatErrors                       atomic.Int64
}

func (c *relayCounters) stats() RelayStats {
	return RelayStats{
		Claims: c.claims.Load(), Claimed: c.claimed.Load(), Confirmed: c.confirmed.Load(),
		Duplicates: c.duplicates.Load(), Returned: c.returned.Load(), Rejected: c.rejected.Load(),
		Unknown: c.unknown.Load(), Retried: c.retried.Load(), Dead: c.dead.Load(),
		NotSent: c.notSent.Load(), Released: c.released.Load(), Outages: c.outages.Load(),
		Fenced: c.fenced.Load(), Swept: c.swept.Load(), Purged: c.purged.Load(), Errors: c.errors.Load(),
		Heartbeats: c.beats.Load(), HeartbeatErrors: c.beatErrors.Load(),
	}
}
