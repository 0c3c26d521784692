package ferryadmin

import (
	"context"
	"errors"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// DefaultRelayStaleAfter is how long after its last beat a relay still
// counts as alive by default: three beats of the default interval
// (ferry.DefaultHeartbeat), so that one slow or lost beat is not a death.
const DefaultRelayStaleAfter = 3 * ferry.DefaultHeartbeat

// RelayInfo is a relay of the outbox table as its heartbeat row shows it,
// judged alive or not. Its JSON form is stable: the fields of
// ferrystore.RelayBeat (id, host, pid, version, started_at, last_seen,
// lanes, ordered, in_flight, broker_connected, broker, broker_error), then
// alive, leader and age_seconds.
//
// Of a relay not alive, BrokerConnected is false: what its row last said
// of its broker is no longer known (BrokerError keeps what it recorded).
type RelayInfo struct {
	ferrystore.RelayBeat
	// Alive is true when the relay beat less than staleAfter ago, by the
	// database clock. A relay that stopped cleanly has no row; a row that
	// is not alive is a relay that was killed, hangs, or lost the
	// database (a library relay whose process ended without Stop).
	Alive bool `json:"alive"`
	// Leader is true for the relay that leads the table's maintenance
	// (the sweep, the return of dead relays' claims, the pruning of their
	// rows): the holder of the lease ferrystore.LeaseMaintenance while it
	// lasts.
	Leader bool `json:"leader"`
	// Age is how long ago the relay last beat, by the database clock.
	Age time.Duration `json:"-"`
	// AgeSeconds is Age in seconds, for JSON.
	AgeSeconds float64 `json:"age_seconds"`
	// LogRole is LogRoleReader for the relay that holds the lease
	// ferrystore.LeaseLog, LogRoleStandby for a relay alive whose Source is
	// ferrystore.RelaySourceLog and that does not hold it, empty for the
	// others. Status sets it (it reads the lease); Relays leaves it empty.
	LogRole string `json:"log_role,omitempty"`
}

// Values of RelayInfo.LogRole.
const (
	LogRoleReader  = "reader"
	LogRoleStandby = "standby"
)

// Relays returns the relays that recorded themselves in the heartbeat table
// of a's outbox table (<table>_relay), alive ones first, then by id. A
// relay is alive when its last beat is less than staleAfter old (zero:
// DefaultRelayStaleAfter); set staleAfter to at least three of the relays'
// RelayConfig.Heartbeat. It only reads. A table migrated before
// 0003_relay returns an error wrapping ferrytype.ErrUndefinedTable.
func Relays(ctx context.Context, a ferrystore.Admin, staleAfter time.Duration) ([]RelayInfo, error) {
	if err := needStore("Relays", a); err != nil {
		return nil, err
	}
	if staleAfter < 0 {
		return nil, invalid("Relays: staleAfter %s is negative", staleAfter)
	}
	if staleAfter == 0 {
		staleAfter = DefaultRelayStaleAfter
	}
	beats, err := a.Relays(ctx)
	if err != nil {
		return nil, err
	}
	// The leader holds the maintenance lease; a table not yet migrated to
	// 0006_lease has none to tell.
	var leader string
	l, ok, err := a.LeaseState(ctx, ferrystore.LeaseMaintenance)
	switch {
	case err != nil && !errors.Is(err, ferrytype.ErrUndefinedTable):
		return nil, err
	case ok && l.LeaseLeft > 0:
		leader = l.Owner
	}
	now := time.Now()
	out := make([]RelayInfo, 0, len(beats))
	for _, b := range beats {
		age := max(now.Sub(b.LastSeen), 0)
		alive := age < staleAfter
		b.BrokerConnected = b.BrokerConnected && alive
		out = append(out, RelayInfo{RelayBeat: b, Alive: alive, Leader: b.ID == leader, Age: age,
			AgeSeconds: age.Seconds()})
	}
	// Alive first; the store returns them by id.
	alive := make([]RelayInfo, 0, len(out))
	var gone []RelayInfo
	for _, r := range out {
		if r.Alive {
			alive = append(alive, r)
		} else {
			gone = append(gone, r)
		}
	}
	return append(alive, gone...), nil
}

// aliveRelays counts the relays alive.
func aliveRelays(rs []RelayInfo) int {
	n := 0
	for _, r := range rs {
		if r.Alive {
			n++
		}
	}
	return n
}
