package ferrybroker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
)

func TestDurabilityLevelsOrder(t *testing.T) {
	order := []ferrybroker.DurabilityLevel{ferrybroker.DurabilityUnknown, ferrybroker.DurabilityVolatile,
		ferrybroker.DurabilitySingle, ferrybroker.DurabilityReplicated}
	for i, l := range order {
		for j, want := range order {
			require.Equal(t, i >= j, l.AtLeast(want), "%s at least %s", l, want)
		}
		got, err := ferrybroker.ParseDurabilityLevel(string(l))
		require.NoError(t, err)
		require.Equal(t, l, got)
	}
	_, err := ferrybroker.ParseDurabilityLevel("durable")
	require.ErrorContains(t, err, `"durable" is none of unknown, volatile, single, replicated`)
	require.False(t, ferrybroker.DurabilityLevel("durable").AtLeast(ferrybroker.DurabilityUnknown) &&
		!ferrybroker.DurabilityUnknown.AtLeast(ferrybroker.DurabilityLevel("durable")), "an unknown name ranks as unknown")
}
