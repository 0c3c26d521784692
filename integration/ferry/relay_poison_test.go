package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

func TestRelayMalformedRowsNeverStallTheOutbox(t *testing.T) {
	t.Parallel()
	onKinds(t, []string{"mysql", "postgres", "sqlite"}, false, relaytest.RelayMalformedRowsNeverStallTheOutbox)
}
