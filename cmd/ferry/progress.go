package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
)

// defaultProgressInterval is the default of --progress-interval.
const defaultProgressInterval = 2 * time.Second

// progress prints a long command's progress as lines on the command's
// error output, at most one per interval, so that standard output keeps
// only the result (and --json stays clean).
type progress struct {
	w       io.Writer
	every   time.Duration
	started time.Time
	last    time.Time
}

// progressFlag adds --progress-interval to fl.
func progressFlag(fl *pflag.FlagSet, every *time.Duration) {
	fl.DurationVar(every, "progress-interval", defaultProgressInterval,
		"print progress on stderr at most this often (0: never)")
}

func newProgress(w io.Writer, every time.Duration) *progress {
	now := time.Now()
	return &progress{w: w, every: every, started: now, last: now}
}

// due reports whether a line is due now, and if so counts it printed.
func (p *progress) due() bool {
	if p.every <= 0 {
		return false
	}
	now := time.Now()
	if now.Sub(p.last) < p.every {
		return false
	}
	p.last = now
	return true
}

// printf prints one line, prefixed "ferry: ".
func (p *progress) printf(format string, args ...any) {
	fmt.Fprintf(p.w, "ferry: "+format+"\n", args...)
}

// rate is n per second since the start, for people.
func (p *progress) rate(n int64) string {
	secs := time.Since(p.started).Seconds()
	if secs <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f/s", float64(n)/secs)
}

// percent is done of total, for people.
func percent(done, total int64) string {
	if total <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(done)/float64(total))
}
