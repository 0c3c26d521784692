package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// IdleResult is what an idle ferry relay process costs: the statements
// the database server counted per second while the relay was its only
// client, and the relay's CPU time as a share of one core.
type IdleResult struct {
	Seconds float64 `json:"seconds"`
	// QueriesPerSecond is the server's count of statements (MySQL:
	// Questions; PostgreSQL: scans of the outbox's tables, each of the
	// relay's statements being one), less the bench's own; nil where the
	// server keeps no such count (SQLite).
	QueriesPerSecond *float64 `json:"queries_per_second,omitempty"`
	// CPUPercent is the relay process's user and system time over the
	// window, in percent of one core.
	CPUPercent float64 `json:"cpu_percent"`
}

// idleSettle is how long the relay runs before the window opens: its
// probe backs off from 1ms to PollInterval within about 0.3s.
const idleSettle = 2 * time.Second

// idleProcess runs ferry relay with default settings on t's empty table
// for settle + d and measures the window d. Any other client of the
// database server during the window is counted as the relay's.
func idleProcess(ctx context.Context, t *Target, b *Broker, binary string, env []string, d time.Duration) (IdleResult, error) {
	var res IdleResult
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	cmd, out, err := relayProcess(ctx, binary, env, t, b)
	if err != nil {
		return res, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			return fmt.Errorf("ferry relay: %w: %s", err, strings.TrimSpace(out.String()))
		}
		return nil
	}
	// wait lets the relay run for d; it fails if the relay exits or ctx ends.
	wait := func(d time.Duration) error {
		select {
		case err := <-exited:
			return fmt.Errorf("ferry relay exited while idle: %v: %s", err, strings.TrimSpace(out.String()))
		case <-ctx.Done():
			_ = stop()
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(idleSettle); err != nil {
		return res, err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	cpu0, _, okCPU := statCPU(pid)
	q0, okQ, err := t.statements(ctx)
	if err != nil {
		_ = stop()
		return res, err
	}
	start := time.Now()
	if err := wait(d); err != nil {
		return res, err
	}
	cpu1, _, okCPU1 := statCPU(pid)
	q1, _, err := t.statements(ctx)
	took := time.Since(start)
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return res, err
	}
	if !okCPU || !okCPU1 {
		return res, fmt.Errorf("read the relay's CPU time from /proc/%s/stat", pid)
	}
	res.Seconds = took.Seconds()
	res.CPUPercent = 100 * (cpu1 - cpu0).Seconds() / took.Seconds()
	if okQ {
		qps := float64(q1-q0-t.ownStatements()) / took.Seconds()
		res.QueriesPerSecond = &qps
	}
	return res, nil
}

// ownStatements is how many of the statements counted in a window the
// bench made itself: MySQL counts its first SHOW STATUS; the scan count
// of PostgreSQL, none.
func (t *Target) ownStatements() int64 {
	if t.Dialect == "mysql" {
		return 1
	}
	return 0
}

// statements returns the database server's count of client statements,
// and false where it keeps none.
func (t *Target) statements(ctx context.Context) (int64, bool, error) {
	var n int64
	switch t.Dialect {
	case "mysql":
		var name string
		if err := t.DB.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
			return 0, false, fmt.Errorf("count statements: %w", err)
		}
	case "postgres":
		// The scans of the outbox's tables, each statement of the relay
		// being one: unlike the database's transaction count, this leaves
		// out autovacuum and other clients' work. Sessions report their
		// counts within about a second of going idle: a window of many
		// seconds keeps that error small.
		table := t.Store.Table()
		q := "SELECT COALESCE(SUM(seq_scan + COALESCE(idx_scan, 0)), 0) FROM pg_stat_user_tables" +
			" WHERE schemaname = current_schema() AND relname IN ($1, $2, $3)"
		if err := t.DB.QueryRowContext(ctx, q, table, table+"_relay", table+"_seq").Scan(&n); err != nil {
			return 0, false, fmt.Errorf("count statements: %w", err)
		}
	default:
		return 0, false, nil
	}
	return n, true, nil
}

func (r IdleResult) String() string {
	q := "n/a"
	if r.QueriesPerSecond != nil {
		q = fmt.Sprintf("%.1f", *r.QueriesPerSecond)
	}
	return fmt.Sprintf("%s queries/s, %.2f%% of a core, over %.0fs", q, r.CPUPercent, r.Seconds)
}
