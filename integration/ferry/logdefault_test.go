package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

func TestRelayWithoutALoggerLogsToTheDefaultLogger(t *testing.T) {
	// serial: slog.SetDefault replaces the process's default logger, which parallel tests share.
	relaytest.RelayWithoutALoggerLogsToTheDefaultLogger(t, sqlSetup("sqlite"))
}
