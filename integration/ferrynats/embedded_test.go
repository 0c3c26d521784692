package ferrynats_test

import (
	"testing"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats/ferrynatstest"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The publisher and consumer suites on the NATS server the quickstart
// embeds (nats-server v2.15, in the test process), besides the one
// FERRY_TEST_NATS_URL names (ferrynats's own tests).
func TestConformanceEmbedded(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, ferrynatstest.PublisherHarness(testsvc.EmbeddedNATS,
		func(t testing.TB) string { return testsvc.EmbeddedNATS(t).ConnectedUrl() }))
}

func TestConsumerConformanceEmbedded(t *testing.T) {
	t.Parallel()
	ferrybrokertest.ExerciseConsumer(t, ferrynatstest.ConsumerHarness(testsvc.EmbeddedNATS))
}
