package shop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one role of the system run as an OS process by a harness: it can
// be started, signalled, killed and started again, and it collects the
// STATS lines of all its runs.
type Proc struct {
	Name string
	Bin  string
	Args []string
	// Env holds environment variables added to this process's for every run.
	Env []string
	// Log receives the process's other output lines, prefixed by its name.
	Log io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	state  *os.ProcessState
	past   []Stats // the last STATS of each finished run
	cur    Stats
	deaths int      // runs ended by SIGKILL
	tail   []string // the current run's last output lines
}

// tailLines is how many output lines Tail keeps.
const tailLines = 8

// Tail returns the current (or last) run's last output lines other than
// STATS, for an error message about a process that ended by itself.
func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// Start starts a new run with extra arguments after Args (a crash point
// armed for this run only, say).
func (p *Proc) Start(extraArgs ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is running", p.Name)
		}
	}
	cmd := exec.Command(p.Bin, append(append([]string{}, p.Args...), extraArgs...)...)
	cmd.Env = append(os.Environ(), p.Env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	if p.cmd != nil {
		p.past = append(p.past, p.cur)
	}
	p.cmd, p.cur, p.done, p.state, p.tail = cmd, Stats{}, make(chan struct{}), nil, nil
	done := p.done
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if s, ok := ParseStats(line); ok {
				p.mu.Lock()
				if p.cmd == cmd {
					p.cur = s
				}
				p.mu.Unlock()
				continue
			}
			p.mu.Lock()
			if p.cmd == cmd {
				p.tail = append(p.tail, line)
				if len(p.tail) > tailLines {
					p.tail = p.tail[1:]
				}
			}
			p.mu.Unlock()
			if p.Log != nil {
				fmt.Fprintf(p.Log, "  %s | %s\n", p.Name, line)
			}
		}
		_ = cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			p.deaths++
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the current run has not ended.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done returns a channel closed when the current run ends.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Signal sends sig to the current run.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits for the current run to end, at most d; it kills it after d.
func (p *Proc) Wait(d time.Duration) *os.ProcessState {
	done := p.Done()
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-time.After(d):
		_ = p.Signal(syscall.SIGKILL)
		<-done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Stop asks the current run to stop (SIGTERM) and waits up to d.
func (p *Proc) Stop(d time.Duration) *os.ProcessState {
	if !p.Running() {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.state
	}
	_ = p.Signal(syscall.SIGTERM)
	return p.Wait(d)
}

// Killed reports whether the last run ended by SIGKILL.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return false
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Succeeded reports whether the last run ended by itself with exit status
// 0.
func (p *Proc) Succeeded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state != nil && p.state.Success()
}

// Stopped reports whether the current run is stopped by a signal
// (SIGSTOP): its state in /proc is "T". It is false when the process is
// not running or /proc cannot tell.
func (p *Proc) Stopped() bool {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and
	// may itself contain spaces or parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] == "T"
}

// State describes how the last run ended ("exit status 1", "signal:
// killed"), or "running".
func (p *Proc) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return "running"
	}
	return p.state.String()
}

// Deaths returns how many runs ended by SIGKILL.
func (p *Proc) Deaths() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deaths
}

// Total sums the counters of every run (a run killed between two STATS
// lines loses its last interval's counts: totals are lower bounds).
func (p *Proc) Total() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := Stats{Role: p.Name}
	for _, s := range append(append([]Stats{}, p.past...), p.cur) {
		t.Applied += s.Applied
		t.Duplicate += s.Duplicate
		t.Conflict += s.Conflict
		t.Stale += s.Stale
		t.Acked += s.Acked
		t.Parked += s.Parked
		t.Retried += s.Retried
		t.Confirmed += s.Confirmed
		t.Unknown += s.Unknown
		t.Fenced += s.Fenced
		t.Swept += s.Swept
		t.Dupes += s.Dupes
		t.LogEvents += s.LogEvents
		t.LogGaps += s.LogGaps
		t.Paid += s.Paid
		t.UnknownCommits += s.UnknownCommits
	}
	return t
}
