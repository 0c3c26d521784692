// Package fault injects crashes at named points for fault-injection tests.
// A process started with FERRY_CRASH_POINT=name[:n] kills itself with
// SIGKILL the n-th time (default first) it reaches the point named: a real
// crash, exactly inside the window under test. Production runs never set
// the variable.
package fault

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvCrashPoint names the variable that arms a crash.
const EnvCrashPoint = "FERRY_CRASH_POINT"

// FromEnv returns a fault-point function armed by FERRY_CRASH_POINT, or nil
// when the variable is unset. An invalid value is an error.
func FromEnv() (func(ctx context.Context, point string) error, error) {
	v := os.Getenv(EnvCrashPoint)
	if v == "" {
		return nil, nil
	}
	name, nth, err := Parse(v)
	if err != nil {
		return nil, err
	}
	var hits atomic.Int64
	return func(_ context.Context, point string) error {
		if point == name && hits.Add(1) == int64(nth) {
			fmt.Fprintf(os.Stderr, "ferry: crash point %s reached (hit %d): killing this process\n", point, nth)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	}, nil
}

// Parse splits "name[:n]".
func Parse(v string) (name string, nth int, err error) {
	name, n, ok := strings.Cut(v, ":")
	nth = 1
	if ok {
		if nth, err = strconv.Atoi(n); err != nil || nth < 1 {
			return "", 0, fmt.Errorf("%s=%q: the hit count after ':' must be a positive integer", EnvCrashPoint, v)
		}
	}
	if name == "" {
		return "", 0, fmt.Errorf("%s=%q: no point name", EnvCrashPoint, v)
	}
	return name, nth, nil
}
