package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

// The task worker's behaviour tests on the in-memory store (memSetup); the
// integration module runs them on the real databases.

func TestTasksExecuteEachKeyOnceAcrossCrashes(t *testing.T) {
	t.Parallel()
	relaytest.TasksExecuteEachKeyOnceAcrossCrashes(t, memSetup)
}

func TestTaskWithoutHandlerIsDead(t *testing.T) {
	t.Parallel()
	relaytest.TaskWithoutHandlerIsDead(t, memSetup)
}
