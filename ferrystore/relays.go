package ferrystore

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// RelayRegistry is the part of every Store that records which relays run
// on its outbox table: one heartbeat row per relay, in the table
// <outbox table>_relay that outbox migration 0003_relay creates. A relay
// writes its row when it starts and every RelayConfig.Heartbeat.Interval after, and
// deletes it when it stops cleanly; a relay that was killed leaves its row,
// whose last beat then ages. ferryadmin.Relays and ferry status read it to
// tell which relays are alive now.
//
// The conformance suite (ferrystoretest) checks it. Every time is taken
// from the database clock, so that no host's clock decides whether a relay
// is alive.
type RelayRegistry interface {
	// Beat records b as the relay's current state in one statement: it
	// inserts the relay's row, or updates every field of it, and sets its
	// last beat to the database clock. The start time is set by the
	// database at the first beat and kept by the later ones; b.StartedAt
	// and b.LastSeen are ignored. b.ID must be 1 to MaxRelayIDLen bytes
	// (an error wrapping ferrytype.ErrInvalidConfig otherwise), b.Claims
	// empty or a valid prefix (ValidateClaimsPrefix); the other strings are
	// cut to their column's size. Beat reads and writes no outbox row.
	Beat(ctx context.Context, b RelayBeat) error
	// Relays returns the recorded relays, by id, at most MaxListLimit of
	// them. StartedAt and LastSeen come from the database clock,
	// converted to this process's clock (see RelayBeat.LastSeen).
	Relays(ctx context.Context) ([]RelayBeat, error)
	// ForgetRelay deletes the row of relay id. A relay that has no row is
	// no error.
	ForgetRelay(ctx context.Context, id string) error
	// PruneRelays deletes the rows whose last beat is more than olderThan
	// old, by the database clock, but never the row of relay keep (the
	// caller's own, however late its last beat landed; "" keeps none), and
	// returns how many it deleted. olderThan must be positive.
	PruneRelays(ctx context.Context, olderThan time.Duration, keep string) (int64, error)
}

// Sizes of the heartbeat row's text columns. ID is checked; the others are
// cut to fit.
const (
	MaxRelayIDLen          = 128
	MaxRelayHostLen        = 255
	MaxRelayVersionLen     = 128
	MaxRelayBrokerLen      = 255
	MaxRelayBrokerErrorLen = 512
	MaxRelaySourceLen      = 16
)

// RelayBeat is one relay's heartbeat row: what the relay said about itself
// at its last beat. Its JSON form is stable.
type RelayBeat struct {
	// ID names the relay, unique among the relays of a table
	// (RelayConfig.ID; by default host-pid-random).
	ID string `json:"id"`
	// Host and PID are the relay's host name and process id.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Version is the relay's ferry version (RelayConfig.Heartbeat.Version).
	Version string `json:"version"`
	// StartedAt is when the relay first beat, LastSeen when it last did.
	// Both are stamped by the database clock; Relays converts them to the
	// reader's clock (now minus how long ago they were, measured by the
	// database), so that a clock skew between the database and the reader
	// neither ages nor rejuvenates a relay.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// Lanes is how many lanes the relay ran at its last beat: its
	// RelayConfig.Lanes, or its share of RelayConfig.TableLanes among the
	// relays alive (0: it stands by). Ordered is its RelayConfig.Ordered.
	Lanes   int  `json:"lanes"`
	Ordered bool `json:"ordered"`
	// InFlight counts the events the relay had claimed and not yet
	// settled (published and marked) at its last beat.
	InFlight int64 `json:"in_flight"`
	// Sent counts the events the relay marked SENT since it started, and
	// SentLastMinute those of them it marked in about the last minute (from
	// its beat nearest to a minute ago, or since it started when it is
	// younger): its rate, read from the database with no metrics system.
	Sent           int64 `json:"sent"`
	SentLastMinute int64 `json:"sent_last_minute"`
	// BrokerConnected says whether the relay could publish at its last
	// beat: false while its broker connection is down or blocked, or
	// while a broker outage holds its claims back.
	BrokerConnected bool `json:"broker_connected"`
	// Broker says what the relay publishes to: a broker URL without its
	// credentials (RelayConfig.Heartbeat.Broker), never a secret.
	Broker string `json:"broker"`
	// BrokerError is why the broker is not connected, redacted; empty
	// while it is.
	BrokerError string `json:"broker_error,omitempty"`
	// Source is where the relay learns which events to publish:
	// RelaySourceTable (it polls the outbox table) or RelaySourceLog (it
	// reads the database's log, RelayConfig.Log.Feed; of the relays with this
	// source the one holding the lease LeaseLog reads, the others stand
	// by). Empty in the rows of relays older than migration 0005_log.
	Source string `json:"source"`
	// Claims is the prefix of the relay's claim tokens: each claim it
	// makes is under the token Claims + "." + a random part, so that the
	// maintainer returns the claims of a relay found dead at once
	// (Store.ClaimsOf) instead of waiting for their leases to end. Empty,
	// or 1 to MaxClaimsPrefixLen lowercase hex characters, unique to one
	// relay process. Empty in the rows of relays older than migration
	// 0006_lease.
	Claims string `json:"claims"`
}

// Values of RelayBeat.Source.
const (
	RelaySourceTable = "table"
	RelaySourceLog   = "log"
)

// Validate checks the fields Beat refuses: the ID and the claims prefix.
func (b RelayBeat) Validate() error {
	switch {
	case b.ID == "":
		return fmt.Errorf("%w: RelayBeat.ID is empty", ferrytype.ErrInvalidConfig)
	case len(b.ID) > MaxRelayIDLen:
		return fmt.Errorf("%w: RelayBeat.ID %q is longer than %d bytes", ferrytype.ErrInvalidConfig, b.ID, MaxRelayIDLen)
	}
	if b.Claims != "" {
		if err := ValidateClaimsPrefix(b.Claims); err != nil {
			return fmt.Errorf("RelayBeat.Claims: %w", err)
		}
	}
	return nil
}
