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

// idleProcess runs ferry relay with default settings, and args, on t's
// empty table for settle + d and measures the window d. Any other client
// of the database server during the window is counted as the relay's.
func idleProcess(ctx context.Context, t *Target, b *Broker, binary string, env []string, d time.Duration, args ...string) (IdleResult, error) {
	var res IdleResult
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	cmd, out, err := relayProcess(ctx, binary, env, t, b, args...)
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
		// out autovacuum and other clients' work (<table>_lease: the
		// relays' leases and the log's checkpoint). Sessions report their
		// counts within about a second of going idle: a window of many
		// seconds keeps that error small.
		table := t.Store.Table()
		q := "SELECT COALESCE(SUM(seq_scan + COALESCE(idx_scan, 0)), 0) FROM pg_stat_user_tables" +
			" WHERE schemaname = current_schema() AND relname IN ($1, $2, $3, $4)"
		if err := t.DB.QueryRowContext(ctx, q, table, table+"_relay", table+"_seq", table+"_lease").Scan(&n); err != nil {
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

// statementCount is the database server's counts of statements at one
// time: the total (statements), and on MySQL each kind (Com_*).
type statementCount struct {
	ok    bool
	total int64
	kinds map[string]int64
}

// statementKinds are the MySQL counters a drain reports: statements by
// kind, and the rows read for them (what a statement costs: MySQL counts
// Innodb_rows_read, MariaDB Rows_read, and both Handler_read_next, the
// index entries stepped through).
var statementKinds = []string{"Com_select", "Com_insert", "Com_update", "Com_delete", "Com_commit", "Com_begin", "Com_set_option",
	"Innodb_rows_read", "Rows_read", "Handler_read_next"}

// statementCount reads the server's counts; a failure, or a server that
// keeps none, gives a count that is not ok.
func (t *Target) statementCount(ctx context.Context) statementCount {
	n, ok, err := t.statements(ctx)
	c := statementCount{ok: ok && err == nil, total: n}
	if c.ok && t.Dialect == "postgres" {
		// What the scans read: index entries and the rows they led to
		// (dead ones included), and the rows changed.
		table := t.Store.Table()
		var fetched, tupRead, upd, hot int64
		q := "SELECT COALESCE(SUM(COALESCE(idx_tup_fetch, 0)), 0), COALESCE(SUM(seq_tup_read), 0), COALESCE(SUM(n_tup_upd), 0)," +
			" COALESCE(SUM(n_tup_hot_upd), 0) FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname IN ($1, $2, $3)"
		if t.DB.QueryRowContext(ctx, q, table, table+"_relay", table+"_seq").Scan(&fetched, &tupRead, &upd, &hot) == nil {
			c.kinds = map[string]int64{"idx_tup_fetch": fetched, "seq_tup_read": tupRead, "n_tup_upd": upd, "n_tup_hot_upd": hot}
		}
		return c
	}
	if !c.ok || t.Dialect != "mysql" {
		return c
	}
	rows, err := t.DB.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(statementKinds, "', '")+"')")
	if err != nil {
		return c
	}
	defer rows.Close()
	c.kinds = map[string]int64{}
	for rows.Next() {
		var (
			name string
			v    int64
		)
		if rows.Scan(&name, &v) == nil {
			c.kinds[strings.ToLower(strings.TrimPrefix(name, "Com_"))] = v
		}
	}
	return c
}

// Statements are the statements the database server counted during a
// drain, per event drained.
type Statements struct {
	// PerEvent is every statement (see IdleResult.QueriesPerSecond for
	// what each server counts); nil where it keeps no count.
	PerEvent *float64 `json:"per_event,omitempty"`
	// Kinds are MySQL's counts by kind (select, update, commit, ...) and
	// the rows InnoDB read; PostgreSQL's rows fetched by index scans, read
	// by sequential scans, updated and updated in place (HOT), on the
	// outbox's tables.
	Kinds map[string]float64 `json:"kinds,omitempty"`
}

// since returns the statements from c0 to c per event of n, less own
// statements of the bench's (counted in the total only).
func (c statementCount) since(c0 statementCount, own int64, n int) Statements {
	var s Statements
	if !c.ok || !c0.ok || n == 0 {
		return s
	}
	own *= 2 // the kinds' query too, on MySQL
	per := float64(c.total-c0.total-own) / float64(n)
	s.PerEvent = &per
	for k, v := range c.kinds {
		if s.Kinds == nil {
			s.Kinds = map[string]float64{}
		}
		s.Kinds[k] = float64(v-c0.kinds[k]) / float64(n)
	}
	return s
}

func (s Statements) String() string {
	if s.PerEvent == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *s.PerEvent)
}

// detail is the count per event and what the statements read: MySQL's
// InnoDB rows read, PostgreSQL's rows fetched through indexes.
func (s Statements) detail() string {
	out := s.String()
	for _, k := range []string{"innodb_rows_read", "rows_read", "idx_tup_fetch"} {
		if v, ok := s.Kinds[k]; ok {
			out += fmt.Sprintf("; %s %.1f", strings.TrimPrefix(k, "innodb_"), v)
			break
		}
	}
	return out
}
