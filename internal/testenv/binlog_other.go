//go:build !unix

package testenv

import "testing"

// BinlogLock is a no-op where flock does not exist: the tests that purge
// the binlog then must not run beside those that resume reading it.
func BinlogLock(t testing.TB, exclusive bool) {}
