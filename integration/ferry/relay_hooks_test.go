package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

func TestRelaySweptTransitionsAreCountedAndReported(t *testing.T) {
	t.Parallel()
	relaytest.RelaySweptTransitionsAreCountedAndReported(t, sqlSetup("sqlite"))
}

func TestRelayReportsSettlesByDestination(t *testing.T) {
	t.Parallel()
	relaytest.RelayReportsSettlesByDestination(t, sqlSetup("postgres"))
}
