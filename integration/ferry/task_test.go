package ferry_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/relaytest"
)

func TestTasksExecuteEachKeyOnceAcrossCrashes(t *testing.T) {
	t.Parallel()
	onKinds(t, []string{"mysql", "postgres"}, false, relaytest.TasksExecuteEachKeyOnceAcrossCrashes)
}

func TestTaskWithoutHandlerIsDead(t *testing.T) {
	t.Parallel()
	relaytest.TaskWithoutHandlerIsDead(t, sqlSetup("sqlite"))
}
