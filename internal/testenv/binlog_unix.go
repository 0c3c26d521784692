//go:build unix

package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// BinlogLock holds, until t ends, a lock on the binlog of the MariaDB
// that keeps one (EnvMySQLBinlog), shared by every test process of the
// machine: exclusive for a test that purges the binlog, shared for a test
// that resumes reading it from a saved position, which a purge in another
// package's test would turn into a gap.
func BinlogLock(t testing.TB, exclusive bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "ferry-test-binlog.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("binlog lock: %v", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("binlog lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
