// Package testenv is the part of ferry's test bed that needs no client
// library: where the test services are (addresses from the environment,
// with loopback defaults), whether an unreachable one skips or fails a test
// (FERRY_REQUIRE_SERVICES=1, set by CI, makes it a failure), fresh names,
// deadlines, waits and the schema clean-up every store test shares. It
// lives in the core module so that every module's tests can use it without
// requiring another module; the helpers that talk to a service live with
// that service's adapter (ferryamqptest, ferrynatstest) or in the test bed
// module (internal/testsvc).
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/faultnet"
)

// Environment variables naming the services, and their defaults.
const (
	EnvRequire  = "FERRY_REQUIRE_SERVICES"
	EnvMySQL    = "FERRY_TEST_MYSQL_URL"
	EnvPostgres = "FERRY_TEST_POSTGRES_URL"
	EnvNATS     = "FERRY_TEST_NATS_URL"
	EnvAMQP     = "FERRY_TEST_AMQP_URL"
	EnvRedis    = "FERRY_TEST_REDIS_URL"
	// The servers that keep a change log, for the log relay's tests
	// (scripts/services.sh starts them): MariaDB with its binlog in ROW
	// format, PostgreSQL with wal_level=logical.
	EnvMySQLBinlog     = "FERRY_TEST_MYSQL_BINLOG_URL"
	EnvPostgresLogical = "FERRY_TEST_POSTGRES_LOGICAL_URL"
)

var defaults = map[string]string{
	EnvMySQL:    "mysql://root@127.0.0.1:3306/test",
	EnvPostgres: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	EnvNATS:     "nats://127.0.0.1:4222",
	EnvAMQP:     "amqp://guest:guest@127.0.0.1:5672/",
	EnvRedis:    "redis://127.0.0.1:6379/0",

	EnvMySQLBinlog:     "mysql://root@127.0.0.1:3307/test",
	EnvPostgresLogical: "postgres://postgres@127.0.0.1:5433/test?sslmode=disable",
}

// URL returns the service URL from env, or its loopback default.
func URL(env string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return defaults[env]
}

// Required reports whether unreachable services fail tests.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable skips t, or fails it when services are required.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (%v); start it with scripts/services.sh, or set %s=1 to make this a failure",
		what, err, EnvRequire)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Slow skips t in the quick tier (go test -short, scripts/test.sh -short):
// what says what the test is (a bulk run, a browser test, a broker
// restart), so that the skip message tells what the quick tier left out.
func Slow(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: not in the quick tier (-short); scripts/test.sh runs it", what)
	}
}

// Name returns a fresh identifier for a test table: prefix + 8 hex digits.
func Name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Context returns a context that ends when the test does, or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test if d passes first; why, when not nil, says what was awaited.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			msg := "condition not met"
			if why != nil {
				msg = why()
			}
			t.Fatalf("not reached within %s: %s", d, msg)
		case <-tick.C:
		}
	}
}

// LogBuffer is an io.Writer that a slog handler may share between
// goroutines, and that a test reads the logged lines from.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the logged lines that contain every one of words.
func (b *LogBuffer) Lines(words ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		keep := l != ""
		for _, w := range words {
			keep = keep && strings.Contains(l, w)
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

// Proxy starts a TCP proxy to the host:port of the service URL rawURL and
// returns the same URL pointing at the proxy. The test cuts and restores
// the proxy to make the service unreachable without stopping it for the
// other tests; the proxy is closed when the test ends.
func Proxy(t testing.TB, rawURL string) (string, *faultnet.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("proxy: parse service URL: %v", err)
	}
	p, err := faultnet.Listen(u.Host)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// Migrated migrates s and drops its tables when the test ends; exec runs
// one statement on the store's database.
func Migrated(t testing.TB, s ferrystore.Store, exec func(string) error) {
	t.Helper()
	ctx := Context(t, time.Minute)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", s.Table(), err)
	}
	t.Cleanup(func() {
		for _, name := range []string{s.Table() + "_lease", s.Table() + "_log", s.Table() + "_relay", s.Table() + "_seq", s.Table()} {
			if err := exec(dropTable(s.Dialect(), name)); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		}
		q := "DELETE FROM ferry_migration WHERE component = 'outbox:" + s.Table() + "'"
		if err := exec(q); err != nil {
			t.Logf("forget migrations of %s: %v", s.Table(), err)
		}
	})
}

// InboxTables returns fresh names for an inbox's marker, conflict and
// version tables.
func InboxTables() (markers, conflicts, versions string) {
	base := Name("fi_")
	return base + "_m", base + "_c", base + "_v"
}

// MigratedInbox migrates s and drops tables when the test ends; exec runs
// one statement on the store's database.
func MigratedInbox(t testing.TB, s ferrystore.InboxStore, exec func(string) error, markers string, tables ...string) {
	t.Helper()
	ctx := Context(t, time.Minute)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate inbox: %v", err)
	}
	t.Cleanup(func() {
		for _, name := range tables {
			if err := exec(dropTable(s.Dialect(), name)); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		}
		_ = exec("DELETE FROM ferry_migration WHERE component = 'inbox:" + markers + "'")
	})
}

func dropTable(dialect, name string) string {
	if dialect == "mysql" {
		return "DROP TABLE IF EXISTS `" + name + "`"
	}
	return `DROP TABLE IF EXISTS "` + name + `"`
}
