package ferry_test

import (
	"os"
	"testing"
)

// The test binary doubles as the child processes that integration tests
// start and kill: FERRY_TEST_CHILD names the role.
func TestMain(m *testing.M) {
	switch os.Getenv("FERRY_TEST_CHILD") {
	case "points-consumer":
		os.Exit(runPointsConsumer())
	}
	os.Exit(m.Run())
}
