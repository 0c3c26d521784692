// Package fault kills or stops a process at a named fault point: a real
// crash or a real pause, exactly inside the window under test. It reads no
// environment variable and no flag; a test or the reference shop's own
// binary decides when to arm it.
package fault

import (
	"context"
	"fmt"
	"os"
	"runtime"
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

// Pause returns a fault-point function that stops this process with
// SIGSTOP when it reaches the point spec names, spec being "name=file",
// and only when file exists: the process removes the file, then stops
// itself, so each file the harness creates arms exactly one pause. The
// harness disarms a pause by removing the file itself; whichever of the two
// removes it wins, so the harness knows for certain whether the pause
// landed. It returns nil for an empty spec. The process goes on where it
// stopped when it gets SIGCONT.
func Pause(spec string) (func(ctx context.Context, point string) error, error) {
	if spec == "" {
		return nil, nil
	}
	name, file, ok := strings.Cut(spec, "=")
	if !ok || name == "" || file == "" {
		return nil, fmt.Errorf("pause point %q: want name=file", spec)
	}
	return func(_ context.Context, point string) error {
		if point == name && os.Remove(file) == nil {
			fmt.Fprintf(os.Stderr, "pause point %s reached: stopping this process\n", point)
			stopSelf()
		}
		return nil
	}, nil
}

// Chain returns a fault-point function that calls each non-nil fn in turn
// and returns the first error; nil when every fn is nil.
func Chain(fns ...func(ctx context.Context, point string) error) func(ctx context.Context, point string) error {
	var set []func(ctx context.Context, point string) error
	for _, fn := range fns {
		if fn != nil {
			set = append(set, fn)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return func(ctx context.Context, point string) error {
		for _, fn := range set {
			if err := fn(ctx, point); err != nil {
				return err
			}
		}
		return nil
	}
}

// stopSelf stops the process with SIGSTOP sent to the calling thread: the
// thread takes the signal on its way back from the system call, so it
// stops right here. A SIGSTOP sent to the process instead goes to its main
// thread, and the caller can run on (here: write the outcome the pause is
// meant to delay) until the stop reaches it.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
