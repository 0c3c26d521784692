// Package fault kills a process at a named fault point: a real crash,
// exactly inside the window under test. It reads no environment variable
// and no flag; a test or the reference shop's own binary decides when to
// arm it.
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

// Crash returns a fault-point function that kills this process with
// SIGKILL the n-th time (default first) it reaches the point spec names,
// spec being "name[:n]"; it returns nil for an empty spec. An invalid spec
// is an error.
func Crash(spec string) (func(ctx context.Context, point string) error, error) {
	if spec == "" {
		return nil, nil
	}
	name, nth, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	var hits atomic.Int64
	return func(_ context.Context, point string) error {
		if point == name && hits.Add(1) == int64(nth) {
			fmt.Fprintf(os.Stderr, "crash point %s reached (hit %d): killing this process\n", point, nth)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	}, nil
}

// Parse splits "name[:n]".
func Parse(spec string) (name string, nth int, err error) {
	name, n, ok := strings.Cut(spec, ":")
	nth = 1
	if ok {
		if nth, err = strconv.Atoi(n); err != nil || nth < 1 {
			return "", 0, fmt.Errorf("crash point %q: the hit count after ':' must be a positive integer", spec)
		}
	}
	if name == "" {
		return "", 0, fmt.Errorf("crash point %q: no point name", spec)
	}
	return name, nth, nil
}
