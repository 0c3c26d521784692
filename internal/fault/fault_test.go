package fault_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fault"
)

// TestPauseStopsTheProcessOncePerFile runs a child process that reaches a
// pause point twice: with no file it goes on; with the file it removes it
// and stops itself until SIGCONT.
func TestPauseStopsTheProcessOncePerFile(t *testing.T) {
	if file := os.Getenv("FAULT_PAUSE_CHILD"); file != "" {
		pause, err := fault.Pause("p=" + file)
		if err != nil {
			os.Exit(3)
		}
		for {
			if _, err := os.Stat(file); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = pause(context.Background(), "other") // another point: never pauses
		os.Stdout.WriteString("armed\n")
		// The pause is reached on another thread than the main one, as a
		// relay's lane reaches it: that thread must stop before it runs on.
		runtime.LockOSThread()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = pause(context.Background(), "p") // removes the file and stops
			_ = os.WriteFile(file+".after", nil, 0o600)
		}()
		<-done
		os.Stdout.WriteString("continued\n")
		_ = pause(context.Background(), "p") // no file: goes on
		os.Exit(0)
	}
	file := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPauseStopsTheProcessOncePerFile$")
	cmd.Env = append(os.Environ(), "FAULT_PAUSE_CHILD="+file)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stopped := func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "stat"))
		if err != nil {
			return false
		}
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return len(fields) > 0 && fields[0] == "T"
	}
	deadline := time.Now().Add(20 * time.Second)
	for !stopped() {
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop itself at the armed pause point")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the pause did not consume its file: %v", err)
	}
	if _, err := os.Stat(file + ".after"); !os.IsNotExist(err) {
		t.Fatalf("the thread that reached the pause point ran on past it: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child: %v; output %q", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not go on after SIGCONT")
	}
	if got := out.String(); !strings.Contains(got, "armed\n") || !strings.HasSuffix(got, "continued\n") {
		t.Fatalf("child output %q", got)
	}
}

func TestPauseSpec(t *testing.T) {
	for _, spec := range []string{"p", "=f", "p=", "="} {
		if _, err := fault.Pause(spec); err == nil {
			t.Errorf("Pause(%q): no error", spec)
		}
	}
	if fn, err := fault.Pause(""); fn != nil || err != nil {
		t.Errorf("Pause(\"\") = %v, %v; want nil, nil", fn != nil, err)
	}
	if fault.Chain(nil, nil) != nil {
		t.Error("Chain of nils is not nil")
	}
}
