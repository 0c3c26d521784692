package main

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// README's daemon lines start as written: each passes every check of its
// flags, settings and credentials, and fails only where it reaches for
// the database and broker hosts of the example, here addresses where
// nothing listens (the console, which serves before it reaches them, is
// stopped once it says it serves). A line missing what its command needs,
// as the console's credentials once were, exits 2 and fails this test.
func TestReadmeDaemonLinesStartAsWritten(t *testing.T) {
	t.Parallel()
	lines := readmeDaemonLines(t)
	require.GreaterOrEqual(t, len(lines), 5, "README's daemon block")
	// The example's hosts, swapped for an address where nothing listens;
	// the relay's HTTP port, for a free one.
	swap := strings.NewReplacer("@db:5432/", "@127.0.0.1:1/", "@mq:5672/", "@127.0.0.1:1/", " :9090", " 127.0.0.1:0")
	for _, line := range lines {
		env, args := splitCommandLine(t, swap.Replace(line))
		require.Equal(t, "ferry", args[0], "README: %s", line)
		t.Run(args[1], func(t *testing.T) {
			t.Parallel()
			// The environment, not the line, makes them quick to give up:
			// no wait for the database, the console on a free port.
			env := append(env, "FERRY_CONNECT_TIMEOUT=0", "FERRY_CONSOLE_HTTP_ADDR=127.0.0.1:0")
			out := new(testsvc.LogBuffer)
			cmd := childTo(t, out, env, args[1:]...)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("README: %s: still running after a minute:\n%s", line, out)
			case <-waitLine(t, out, "serving the console"):
				require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
				require.NoError(t, <-done, "README: %s: stopped by SIGTERM:\n%s", line, out)
				return
			}
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "README: %s: %v\n%s", line, err, out)
			require.Equal(t, exitFailed, ee.ExitCode(), "README: %s: exits 1, unable to connect, past every usage check:\n%s", line, out)
			require.Contains(t, out.String(), "127.0.0.1:1", "README: %s: the error names the address it could not reach", line)
		})
	}
}

// readmeDaemonLines returns the command lines of README's "The daemon"
// block, each continued line joined and its comment cut.
func readmeDaemonLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## The daemon\n")
	require.True(t, ok, "README has a section The daemon")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "The daemon shows its commands in a sh block")
	block, _, _ = strings.Cut(block, "```")
	block = strings.ReplaceAll(block, "\\\n", " ")
	comment := regexp.MustCompile(`\s+#\s.*$`)
	var lines []string
	for l := range strings.Lines(block) {
		if l = strings.TrimSpace(comment.ReplaceAllString(strings.TrimRight(l, "\n"), "")); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// splitCommandLine splits a shell command line as sh would for the forms
// README uses: leading NAME=value assignments, words separated by spaces,
// and single-quoted words.
func splitCommandLine(t *testing.T, line string) (env, args []string) {
	t.Helper()
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "an unclosed quote: %s", line)
	if inWord {
		args = append(args, word.String())
	}
	assign := regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
	for len(args) > 0 && assign.MatchString(args[0]) {
		env, args = append(env, args[0]), args[1:]
	}
	require.GreaterOrEqual(t, len(args), 2, "a command and a subcommand: %s", line)
	return env, args
}

// waitLine returns a channel closed once out holds s (and never, if the
// test ends first).
func waitLine(t *testing.T, out *testsvc.LogBuffer, s string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !strings.Contains(out.String(), s) {
			select {
			case <-tick.C:
			case <-t.Context().Done():
				return
			}
		}
		close(ch)
	}()
	return ch
}
