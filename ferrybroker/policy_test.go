package ferrybroker

import (
	"errors"
	"testing"

	"github.com/ferrydev/ferry/ferrytype"
)

// A consumer whose tables are not migrated retries and never parks: the
// message is not at fault, and parking would dead-letter every message
// until someone migrates. A transient error is parked at the limit, and
// poison at once.
func TestParkReasonNeverParksAnUnmigratedDatabase(t *testing.T) {
	p := RedeliveryPolicy{MaxDeliveries: 3}.WithDefaults()
	missing := ferrytype.Classed(errors.New("relation \"inbox_marker\" does not exist"), ferrytype.ErrUndefinedTable)
	outdated := ferrytype.Classed(errors.New("inbox points: run ferry migrate --inbox"), ferrytype.ErrSchemaOutdated)
	for _, n := range []int{1, 3, 100, 1 << 30} {
		if err := p.ParkReason(missing, n); err != nil {
			t.Errorf("undefined table, delivery %d: parked: %v", n, err)
		}
		if err := p.ParkReason(outdated, n); err != nil {
			t.Errorf("schema outdated, delivery %d: parked: %v", n, err)
		}
	}
	if p.ParkReason(errors.New("connection reset"), 3) == nil {
		t.Error("a transient error on the last delivery must be parked")
	}
	if p.ParkReason(ferrytype.Poison(missing), 1) == nil {
		t.Error("poison is parked at once, whatever it wraps")
	}
}
