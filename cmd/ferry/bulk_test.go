package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// cliMix is the DEAD events of the CLI's bulk tests: row i of kind i % 10,
// so that of n rows 5/10 fail on a missing stream, 3/10 on a timeout and
// 2/10 on a quota whose error holds % and _; the look-alike without them
// is 1/10 of the timeouts' share, kind 9.
var cliMix = func() []testsvc.DeadKind {
	kinds := make([]testsvc.DeadKind, 10)
	for i := range kinds {
		switch {
		case i < 5:
			kinds[i] = testsvc.DeadKind{Destination: "orders.paid", Error: `attempt 20: returned: nats: no stream matches subject "orders.paid.{n}"`}
		case i < 8:
			kinds[i] = testsvc.DeadKind{Destination: "orders.paid", Error: "attempt 20: dial tcp 10.0.{m}.7:4222: i/o timeout after 30s"}
		case i < 9:
			kinds[i] = testsvc.DeadKind{Destination: "orders.shipped", Error: "attempt 20: payload 100% over quota_limit ({n} bytes)"}
		default:
			kinds[i] = testsvc.DeadKind{Destination: "orders.shipped", Error: "attempt 20: payload 100 over quotaXlimit ({n} bytes)"}
		}
	}
	return kinds
}()

// cliBulkSize is 12,000 rows on MariaDB and PostgreSQL, two pages of the
// walk (ferrystore.MaxStateListLimit), 5,000 on SQLite (its engine is Go
// code, which -race slows about fifty-fold). The one 100,000-row run of
// the bulk actions is ferryadmin's (integration/ferryadmin): the command
// adds flags and output to the same code, not another walk.
func cliBulkSize(kind string) int {
	if kind == "sqlite" {
		return 5_000
	}
	return 12_000
}

func (b *opsBundle) count(t *testing.T, s ferrytype.Status) int64 {
	t.Helper()
	n, err := b.st.Driver.CountByStatus(b.ctx, s)
	require.NoError(t, err)
	return n[s]
}

// jsonBulk is the JSON dead retry, discard and restore print.
type jsonBulk struct {
	ferryadmin.BulkResult
	Error string `json:"error"`
}

func decodeBulk(t *testing.T, out string) jsonBulk {
	t.Helper()
	var r jsonBulk
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// ferry dead retry --all acts on every DEAD event (cliBulkSize of them), and
// says so; a dry run counts them all and changes nothing; --max is
// honoured and the rest reported; summary groups them and a group's
// selectors retry exactly it; progress goes to stderr, JSON stays clean.
func TestDeadRetryAllActsOnEveryEvent(t *testing.T) {
	testsvc.Slow(t, "a bulk run")
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupOps(t, kind)
			n := int64(cliBulkSize(kind))
			testsvc.InsertDead(t, b.st, int(n), cliMix...)
			share := func(k int64) int64 { return n * k / 10 }

			code, out, errOut := b.cli(t, "dead", "retry", "--all", "--dry-run")
			require.Equal(t, exitOK, code, errOut)
			require.Regexp(t, fmt.Sprintf(`would retry %d of %d matching DEAD events \(dry run: nothing changed\); `+
				`to act on these and none that dies since: --died-by [0-9T:.-]+Z; the first %d:`, n, n, ferryadmin.DefaultBulkBatch), out)
			require.Equal(t, n, b.count(t, ferrytype.StatusDead))

			code, out, errOut = b.cli(t, "dead", "retry", "--all", "--dry-run", "--json")
			require.Equal(t, exitOK, code, errOut)
			res := decodeBulk(t, out)
			require.Equal(t, [2]int64{n, n}, [2]int64{res.Matched, res.Changed})
			require.Len(t, res.Preview, ferryadmin.DefaultBulkBatch)
			require.Len(t, res.IDs, ferryadmin.DefaultBulkBatch)

			code, out, errOut = b.cli(t, "dead", "summary", "--json")
			require.Equal(t, exitOK, code, errOut)
			var sum ferryadmin.DeadSummary
			require.NoError(t, json.Unmarshal([]byte(out), &sum))
			require.Equal(t, n, sum.Total)
			require.Len(t, sum.Groups, 4)
			require.Equal(t, []int64{share(5), share(3), share(1), share(1)},
				[]int64{sum.Groups[0].Count, sum.Groups[1].Count, sum.Groups[2].Count, sum.Groups[3].Count})
			code, out, errOut = b.cli(t, "dead", "summary")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, fmt.Sprintf("%d DEAD events in 4 groups, largest first:", n))
			require.Contains(t, out, `attempt <n>: dial tcp <n>:<n>: i/o timeout after <d>`)
			require.Contains(t, out, `select a group: ferry dead list --destination 'orders.paid' --error-class `+
				`'attempt <n>: returned: nats: no stream matches subject "<s>"'`)

			// % and _ are literal; --max caps the run and says what it left.
			quota := share(1)
			capped := quota * 6 / 10
			code, out, errOut = b.cli(t, "dead", "discard", "--error-contains", "100% OVER quota_limit", "--max", fmt.Sprint(capped),
				"--reason", "over quota, INC-7", "--progress-interval", "1ns")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, fmt.Sprintf("discarded %d of %d matching DEAD events in %s: over quota, INC-7 (by ",
				capped, quota, plural((capped+ferryadmin.DefaultBulkBatch-1)/ferryadmin.DefaultBulkBatch, "batch")))
			require.Contains(t, out, fmt.Sprintf("; stopped at --max %d: %d still match (run again to go on)", capped, quota-capped))
			require.Contains(t, errOut, fmt.Sprintf("ferry: discard: %d of %d DEAD events", min(ferryadmin.DefaultBulkBatch, capped), quota), "progress per batch")
			require.Equal(t, capped, b.count(t, ferrytype.StatusDiscarded))

			// One group, by its selectors, bound to its dry run's instant.
			timeout := sum.Groups[1]
			code, out, errOut = b.cli(t, "dead", "retry", "--destination", timeout.Destination, "--error-class", timeout.ErrorClass,
				"--dry-run", "--json")
			require.Equal(t, exitOK, code, errOut)
			at := decodeBulk(t, out).At.Format(time.RFC3339Nano)
			code, _, errOut = b.cli(t, "dead", "retry", "--destination", timeout.Destination, "--died-by", "yesterday")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, `--died-by "yesterday" is not an RFC 3339 time`)
			code, out, errOut = b.cli(t, "dead", "retry", "--destination", timeout.Destination, "--error-class", timeout.ErrorClass,
				"--died-by", at, "--json")
			require.Equal(t, exitOK, code, errOut)
			res = decodeBulk(t, out)
			require.Equal(t, [4]int64{timeout.Count, timeout.Count, 0, 0}, [4]int64{res.Matched, res.Changed, res.Skipped, res.Later})
			require.True(t, res.Complete)
			require.Empty(t, res.Error)
			require.Equal(t, timeout.Count, b.count(t, ferrytype.StatusNew))

			// Everything else.
			left := n - timeout.Count - capped
			batches := (left + ferryadmin.DefaultBulkBatch - 1) / ferryadmin.DefaultBulkBatch
			code, out, errOut = b.cli(t, "dead", "retry", "--all", "--progress-interval", "1ns")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, fmt.Sprintf("retried %d of %d matching DEAD events in %s: NEW again", left, left, plural(batches, "batch")))
			require.Contains(t, errOut, fmt.Sprintf("ferry: retry: %d of %d DEAD events (100%%), %s", left, left, plural(batches, "batch")))
			require.Len(t, regexp.MustCompile(`(?m)^ferry: retry: `).FindAllString(errOut, -1), int(batches), "a line a batch")
			require.Zero(t, b.count(t, ferrytype.StatusDead))
			require.Equal(t, n-capped, b.count(t, ferrytype.StatusNew))

			code, out, errOut = b.cli(t, "dead", "retry", "--all")
			require.Equal(t, exitNoMatch, code)
			require.Equal(t, "ferry: no event is DEAD: nothing to retry\n", errOut, "one line")
			require.Empty(t, out, "no totals of a run that did nothing")

			// The discarded ones: listed with the record, restored to DEAD.
			code, out, errOut = b.cli(t, "dead", "discarded", "--limit", "5")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "over quota, INC-7 (by ")
			require.Contains(t, out, "(more than 5: narrow the selection or raise --limit)")
			code, out, errOut = b.cli(t, "dead", "restore", "--all", "--json")
			require.Equal(t, exitOK, code, errOut)
			res = decodeBulk(t, out)
			require.Equal(t, [2]int64{capped, capped}, [2]int64{res.Matched, res.Changed})
			require.Equal(t, "restore", res.Action)
			require.Equal(t, capped, b.count(t, ferrytype.StatusDead))
			require.Zero(t, b.count(t, ferrytype.StatusDiscarded))
		})
	}
}

// Restore by id, as arguments; a restored event shows its discard record;
// the filters reach the discarded list.
func TestDeadRestoreByID(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	testsvc.InsertDead(t, b.st, 3, cliMix[0], cliMix[5], cliMix[8])
	code, out, errOut := b.cli(t, "dead", "discard", "--all", "--reason", "test")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "discarded 3 of 3 matching DEAD events in 1 batch: test (by ")

	code, out, errOut = b.cli(t, "dead", "discarded", "--error-contains", "quota_limit", "--json")
	require.Equal(t, exitOK, code, errOut)
	var list ferryadmin.DeadList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Events, 1)
	require.Equal(t, "dead-000002", list.Events[0].ID)

	code, out, errOut = b.cli(t, "dead", "restore", "dead-000000", "dead-000002")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "restored 2 of 2 matching DISCARDED events in 1 batch: DEAD again, for you to retry or discard; restored by ")
	require.Equal(t, ferrytype.StatusDead, b.status(t, "dead-000000"))
	require.Equal(t, ferrytype.StatusDiscarded, b.status(t, "dead-000001"))
	code, out, errOut = b.cli(t, "dead", "show", "dead-000000")
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `discard record: +test \(by \S+ at \S+\); restored by \S+ at \S+ \(discarded, then restored\)`, out)

	code, _, errOut = b.cli(t, "dead", "restore", "dead-000000")
	require.Equal(t, exitNoMatch, code, "not DISCARDED any more")
	require.Contains(t, errOut, "no DISCARDED event matches --id dead-000000: nothing to restore")
	code, _, errOut = b.cli(t, "dead", "restore")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "or pass --all")
	code, _, errOut = b.cli(t, "dead", "retry", "--error-class", "attempt 20: nope")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `is not an error class`)
}

// A run that fails part way (here its context ends after the first
// batch, as on Ctrl-C) exits 1 and says what it did before.
func TestDeadRetryThatFailsSaysWhatItDid(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "postgres")
	testsvc.InsertDead(t, b.st, 3*ferryadmin.DefaultBulkBatch, cliMix...)
	for i, jsonOut := range []bool{false, true} {
		const batch = ferryadmin.DefaultBulkBatch
		matched := int64(3*batch - batch*i) // the first run retried a batch
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out bytes.Buffer
		errOut := &cancelOn{match: "ferry: retry: ", cancel: cancel}
		args := append([]string{"dead", "retry", "--all", "--progress-interval", "1ns"}, b.args...)
		if jsonOut {
			args = append(args, "--json")
		}
		code := executeContext(ctx, newRoot(), args, &out, errOut)
		require.Equal(t, exitFailed, code, "%s\n%s", out.String(), errOut.String())
		require.Contains(t, errOut.String(), "context canceled")
		if jsonOut {
			res := decodeBulk(t, out.String())
			require.Equal(t, [2]int64{matched, batch}, [2]int64{res.Matched, res.Changed}, "one batch, then the error")
			require.False(t, res.Complete)
			require.Contains(t, res.Error, "context canceled")
		} else {
			require.Contains(t, out.String(), fmt.Sprintf("retry stopped by an error: retried %d of %d matching DEAD events in 1 batch",
				batch, matched))
		}
	}
	require.Equal(t, int64(2*ferryadmin.DefaultBulkBatch), b.count(t, ferrytype.StatusNew), "two runs, one batch each")
}

// cancelOn is a writer that calls cancel once what it was written holds
// match.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	match  string
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.match) {
		c.cancel()
	}
	return n, err
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// relay --drain prints its progress on stderr while it waits.
func TestDrainPrintsProgress(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	// An event for a subject no stream takes: returned, retried, pending.
	b.enqueue(t, orderPaid("1", "nowhere.paid"))
	cmd := exec.Command(os.Args[0], append([]string{"relay", "--drain", "--drain-timeout", "5m", "--progress-interval", "20ms",
		"--broker-url", testsvc.EmbeddedNATS(t).ConnectedUrl(), "--retry-initial", "10ms", "--poll-interval", "20ms"}, b.args...)...)
	cmd.Env = append(os.Environ(), envExecMain+"=1")
	var stdout, stderr testsvc.LogBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := regexp.MustCompile(`^ferry: drain: 1 left \(\d new, \d sending\), 0 sent, 0 dead, \S+$`)
	testsvc.WaitFor(t, 30*time.Second, func() bool {
		for _, l := range stderr.Lines("ferry: drain:") {
			if line.MatchString(l) {
				return true
			}
		}
		return false
	}, func() string { return "a progress line on stderr: " + strings.Join(stderr.Lines(), "\n") })
	require.Empty(t, stdout.Lines("ferry: drain:"), "progress goes to stderr only")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Wait() // an interrupted drain exits 3: not what this test is about
}

// ferry migrate records the error class of the events that died before
// migration 0004, once.
func TestMigrateClassifiesEventsThatDiedBeforeTheMigration(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupOps(t, kind)
			testsvc.InsertDead(t, b.st, 30, testsvc.Unclassified(cliMix)...)
			code, out, errOut := b.cli(t, "migrate")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "recorded the error class of 30 DEAD or DISCARDED events that failed before 0004_dead\n")
			code, out, errOut = b.cli(t, "migrate")
			require.Equal(t, exitOK, code, errOut)
			require.NotContains(t, out, "recorded the error class", "once")
		})
	}
}
