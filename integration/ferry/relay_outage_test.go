package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

func TestRelayBrokerOutageSpendsNoAttempt(t *testing.T) {
	// serial: it cuts the broker's network and counts attempts over the outage.
	relaytest.RelayBrokerOutageSpendsNoAttempt(t, sqlSetup("postgres"))
}

func TestRelayNotSentBacksOffWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	relaytest.RelayNotSentBacksOffWithoutSpendingAttempts(t, sqlSetup("sqlite"))
}
