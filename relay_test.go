package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

// The relay's behaviour tests on the in-memory store and broker
// (memSetup). Each is in internal/relaytest, under its name less "Test";
// the integration module runs it on the real databases and NATS.

func TestRelayFourRelaysDrainEveryEventOnce(t *testing.T) {
	t.Parallel()
	relaytest.RelayFourRelaysDrainEveryEventOnce(t, memSetup)
}

func TestRelayLateMarkIsFenced(t *testing.T) {
	t.Parallel()
	relaytest.RelayLateMarkIsFenced(t, memSetup)
}

func TestRelayCrashWindows(t *testing.T) {
	t.Parallel()
	relaytest.RelayCrashWindows(t, memSetup)
}

func TestRelayOrderedUnderFailures(t *testing.T) {
	t.Parallel()
	relaytest.RelayOrderedUnderFailures(t, memSetup)
}

func TestRelayDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	relaytest.RelayDeadAfterMaxAttempts(t, memSetup)
}

func TestRelayStopFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	relaytest.RelayStopFinishesInFlightBatch(t, memSetup)
}

func TestRelayRetentionPurgesSentRowsOnly(t *testing.T) {
	t.Parallel()
	relaytest.RelayRetentionPurgesSentRowsOnly(t, memSetup)
}

func TestRelayIdleProbesOncePerInterval(t *testing.T) {
	t.Parallel()
	relaytest.RelayIdleProbesOncePerInterval(t, memSetup)
}

func TestRelayProbeFindsEventsOfAnotherProcess(t *testing.T) {
	t.Parallel()
	relaytest.RelayProbeFindsEventsOfAnotherProcess(t, memSetup)
}

func TestRelayClaimsWhileABatchIsInFlight(t *testing.T) {
	t.Parallel()
	relaytest.RelayClaimsWhileABatchIsInFlight(t, memSetup)
}

func TestRelayOrderedProbeWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	relaytest.RelayOrderedProbeWaitsForTheBatchInFlight(t, memSetup)
}

func TestRelayWakesOnEnqueueBeforeCommit(t *testing.T) {
	t.Parallel()
	relaytest.RelayWakesOnEnqueueBeforeCommit(t, memSetup)
}

func TestRelayFencedFailureCountsNeitherDeadNorRetried(t *testing.T) {
	t.Parallel()
	relaytest.RelayFencedFailureCountsNeitherDeadNorRetried(t, memSetup)
}

func TestRelaySweptTransitionsAreCountedAndReported(t *testing.T) {
	t.Parallel()
	relaytest.RelaySweptTransitionsAreCountedAndReported(t, memSetup)
}

func TestRelayReportsSettlesByDestination(t *testing.T) {
	t.Parallel()
	relaytest.RelayReportsSettlesByDestination(t, memSetup)
}

func TestRelayBrokerOutageSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	relaytest.RelayBrokerOutageSpendsNoAttempt(t, memSetup)
}

func TestRelayNotSentBacksOffWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	relaytest.RelayNotSentBacksOffWithoutSpendingAttempts(t, memSetup)
}

func TestRelayMalformedRowsNeverStallTheOutbox(t *testing.T) {
	t.Parallel()
	relaytest.RelayMalformedRowsNeverStallTheOutbox(t, memSetup)
}

func TestRelayHeartbeatShowsTheRelay(t *testing.T) {
	t.Parallel()
	relaytest.RelayHeartbeatShowsTheRelay(t, memSetup)
}

func TestRelayHeartbeatShowsOutageSeenInResults(t *testing.T) {
	t.Parallel()
	relaytest.RelayHeartbeatShowsOutageSeenInResults(t, memSetup)
}

func TestRelayKilledLeavesAgeingRowThatIsPruned(t *testing.T) {
	t.Parallel()
	relaytest.RelayKilledLeavesAgeingRowThatIsPruned(t, memSetup)
}

func TestRelayHeartbeatConfig(t *testing.T) {
	t.Parallel()
	relaytest.RelayHeartbeatConfig(t, memSetup)
}

func TestRelayWithoutALoggerLogsToTheDefaultLogger(t *testing.T) {
	// serial: slog.SetDefault replaces the process's default logger, which parallel tests share.
	relaytest.RelayWithoutALoggerLogsToTheDefaultLogger(t, memSetup)
}
