package ferrystore

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// Names of the leases of an outbox table (Store.AcquireLease): one row
// each in <table>_lease (outbox migration 0006_lease).
const (
	// LeaseMaintenance is held by the relay that maintains the table:
	// it sweeps expired claims, returns the claims of relays found dead
	// and prunes their heartbeat rows.
	LeaseMaintenance = "maintenance"
	// LeaseLog is held by the relay that reads the table's log
	// (RelayConfig.Feed); its position is the log's checkpoint.
	LeaseLog = "log"
)

// Sizes of the lease row's text columns. The name and the owner are
// checked; the source is cut to fit.
const (
	MaxLeaseNameLen   = 64
	MaxLeaseOwnerLen  = MaxRelayIDLen
	MaxLeaseSourceLen = 255
)

// LeaseState is the row of one lease of a table: who holds it until when,
// and the position its holder saved (the log's checkpoint, for LeaseLog).
// Its JSON form is stable.
type LeaseState struct {
	// Name is the lease's name (LeaseMaintenance, LeaseLog).
	Name string `json:"name"`
	// Owner is the holder (a relay's RelayConfig.ID); empty once released.
	// A lease whose LeaseLeft is not positive has ended: its owner is the
	// last holder, and anyone may take it.
	Owner string `json:"owner"`
	// Source is free text the holder gave when it took the lease: for
	// LeaseLog, the log it reads ("binlog host:port").
	Source string `json:"source"`
	// Position is the position the holders saved (RenewLease); kept
	// across owners, so that the next holder resumes from it.
	Position LogPosition `json:"position"`
	// LeaseUntil is when the lease ends, SavedAt when Position was last
	// saved: stamped by the database clock, converted to this process's
	// clock (now minus how long ago they were, measured by the database),
	// as RelayBeat's times are.
	LeaseUntil time.Time `json:"lease_until"`
	SavedAt    time.Time `json:"saved_at"`
	// LeaseLeft is how long the lease has left by the database clock;
	// zero or less when it ended.
	LeaseLeft time.Duration `json:"-"`
}

// ValidateLease checks a lease's name (1 to MaxLeaseNameLen bytes) and
// owner (1 to MaxLeaseOwnerLen bytes): an error wrapping
// ferrytype.ErrInvalidConfig otherwise. An empty owner would match a
// released lease, whose owner is empty.
func ValidateLease(name, owner string) error {
	if err := ValidateLeaseName(name); err != nil {
		return err
	}
	switch {
	case owner == "":
		return fmt.Errorf("%w: lease %s: empty owner", ferrytype.ErrInvalidConfig, name)
	case len(owner) > MaxLeaseOwnerLen:
		return fmt.Errorf("%w: lease %s: owner %q is longer than %d bytes", ferrytype.ErrInvalidConfig, name, owner,
			MaxLeaseOwnerLen)
	}
	return nil
}

// ValidateLeaseName checks a lease's name: 1 to MaxLeaseNameLen bytes.
func ValidateLeaseName(name string) error {
	if name == "" || len(name) > MaxLeaseNameLen {
		return fmt.Errorf("%w: lease name %q must be 1 to %d bytes", ferrytype.ErrInvalidConfig, name, MaxLeaseNameLen)
	}
	return nil
}

// MaxClaimsPrefixLen is the longest prefix of claim tokens a relay
// records (RelayBeat.Claims) and Store.ClaimsOf looks up.
const MaxClaimsPrefixLen = 32

// ValidateClaimsPrefix checks a prefix of claim tokens for
// Store.ClaimsOf: 1 to MaxClaimsPrefixLen lowercase hex characters, an
// error wrapping ferrytype.ErrInvalidConfig otherwise. An empty prefix
// would match every claim.
func ValidateClaimsPrefix(prefix string) error {
	if prefix == "" || len(prefix) > MaxClaimsPrefixLen {
		return fmt.Errorf("%w: claims prefix %q must be 1 to %d lowercase hex characters", ferrytype.ErrInvalidConfig,
			prefix, MaxClaimsPrefixLen)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: claims prefix %q must be 1 to %d lowercase hex characters", ferrytype.ErrInvalidConfig,
				prefix, MaxClaimsPrefixLen)
		}
	}
	return nil
}
