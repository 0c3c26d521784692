package ferryconsole_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// TestBacklogPlans records every statement the console's overview page and
// ferry status (ferryadmin.Status with the command's defaults) run on an
// outbox behind a backlog (FERRY_PLAN_PENDING NEW events of 1 KiB, default
// 30,000, three times the pending window; 300 SENDING; 10,000 DEAD), and
// asks each database for the plan of each (MySQL: EXPLAIN FORMAT=JSON;
// PostgreSQL: EXPLAIN (FORMAT JSON); SQLite: EXPLAIN QUERY PLAN). It fails
// when a plan reads every pending row: a full scan of the table or of an
// index, or rows read through the pending index or the primary key, each
// with a lookup, beyond ferrystore.PendingWindow, unless the walk is in the
// index's order under a LIMIT of at most the window. Index-only reads
// (counts on the pending index) pass: they read no row. Rows read through
// the DEAD indexes are DEAD rows, never pending ones, and are left to the
// tests of the DEAD listings.
//
// The plans are the planners' own, after the statistics a live table has
// (ANALYZE TABLE; VACUUM ANALYZE; ANALYZE). MySQL's JSON shows no LIMIT: a
// walk is taken as cut by one when its query block feeds a derived table
// the plan estimates at the window or less, with no sort in between.
// SQLite's plan shows neither LIMITs nor row counts: a walk that reads
// rows must be a derived table (a co-routine) whose LIMIT, read in the
// statement, is at most the window, with no sort inside it.
func TestBacklogPlans(t *testing.T) {
	n := 3 * ferrystore.PendingWindow
	if v := os.Getenv("FERRY_PLAN_PENDING"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "FERRY_PLAN_PENDING")
	}
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := testsvc.Context(t, 30*time.Minute)
			// PostgreSQL in a database of its own: another test's open
			// transaction or ANALYZE in the shared one keeps the vacuum
			// below from marking the pages all-visible, and the planner
			// then prefers a full scan to an index-only one.
			st, dbURL := testsvc.StoreOwnDatabase(t, kind)
			testsvc.InsertPending(t, st, testsvc.PendingRows{N: n, Kinds: backlogMix})
			testsvc.InsertDead(t, st, 10_000, scaleMix...)
			// Some events in flight: a relay's claims.
			for i := 0; i < 3; i++ {
				_, err := st.Driver.Claim(ctx, ferrystore.ClaimParams{Limit: 100, Token: testsvc.Name("tok-"), Lease: time.Hour})
				require.NoError(t, err)
			}
			testsvc.Analyze(t, st)

			a, rec := recording(t, st, dbURL)
			h, err := ferryconsole.New(ferryconsole.Config{
				Outboxes:     map[string]ferrystore.Admin{"orders": a},
				Authenticate: ferryconsole.BasicAuth(testUser, testPassword),
				Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			defer srv.Close()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
			require.NoError(t, err)
			req.SetBasicAuth(testUser, testPassword)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode, string(body))
			require.Contains(t, string(body), "among the 10,000 next in line", "the page says the figures are the window's")
			rep, err := ferryadmin.Status(ctx, a, nil)
			require.NoError(t, err)
			require.True(t, rep.PendingWindowed)
			require.NotEmpty(t, rep.Failed)

			table := st.Driver.Table()
			stmts := rec.selects(table)
			require.GreaterOrEqual(t, len(stmts), 6, "the statements of the overview and of ferry status were recorded")
			for _, s := range stmts {
				full, walks, summary := explain(ctx, t, st, s)
				t.Logf("%s\n  %s\n  plan: %s", oneLine(s.query), argsText(s.args), summary)
				for _, p := range full {
					t.Errorf("statement reads every row: %s\n  %s", p, oneLine(s.query))
				}
				for _, p := range walks {
					if readsPending(s) {
						t.Errorf("statement reads every pending row: %s\n  %s", p, oneLine(s.query))
					} else {
						t.Logf("NOTE: the statement reads every row of its (not pending) statuses: %s", p)
					}
				}
			}
		})
	}
}

// recorded is one statement a store ran, with its arguments.
type recorded struct {
	query string
	args  []any
}

// recorder keeps the statements run on the connections of a recording
// database.
type recorder struct {
	mu    sync.Mutex
	stmts []recorded
}

func (r *recorder) add(query string, args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, recorded{query, vals})
}

// selects returns the SELECT statements that read table, once each.
func (r *recorder) selects(table string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []recorded
	for _, s := range r.stmts {
		q := strings.TrimSpace(s.query)
		if seen[q] || !strings.HasPrefix(strings.ToUpper(q), "SELECT") || !regexp.MustCompile(`\b`+table+`\b`).MatchString(q) {
			continue
		}
		seen[q] = true
		out = append(out, s)
	}
	return out
}

// recording returns a store on the table of st whose statements r records:
// the store of st's kind on a second pool of the same database (on
// PostgreSQL, the one at pgURL), whose connections record what they run.
func recording(t *testing.T, st testsvc.SQLStore, pgURL string) (ferrystore.Admin, *recorder) {
	t.Helper()
	var dsn string
	switch st.Kind {
	case "mysql":
		cfg, err := ferrymysql.ParseURL(testsvc.URL(testsvc.EnvMySQL))
		require.NoError(t, err)
		dsn = cfg.FormatDSN()
	case "postgres":
		dsn = pgURL
	case "sqlite":
		var (
			seq        int
			name, file string
		)
		require.NoError(t, st.DB.QueryRow("PRAGMA database_list").Scan(&seq, &name, &file))
		var err error
		dsn, _, err = ferrysqlite.DSN("sqlite://" + file)
		require.NoError(t, err)
	}
	var base driver.Connector = dsnConnector{st.DB.Driver(), dsn}
	if dc, ok := st.DB.Driver().(driver.DriverContext); ok {
		c, err := dc.OpenConnector(dsn)
		require.NoError(t, err)
		base = c
	}
	rec := &recorder{}
	db := sql.OpenDB(&recConnector{base, rec})
	t.Cleanup(func() { db.Close() })
	var (
		a   ferrystore.Admin
		err error
	)
	table := st.Driver.Table()
	switch st.Kind {
	case "mysql":
		a, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
	case "postgres":
		a, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
	case "sqlite":
		a, err = ferrysqlite.New(db, &ferrysqlite.Config{Table: table})
	}
	require.NoError(t, err)
	return a, rec
}

// dsnConnector opens connections of a driver without a connector of its
// own.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

// recConnector makes connections that record the statements they run.
type recConnector struct {
	base driver.Connector
	rec  *recorder
}

func (c *recConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recConn{cn, c.rec}, nil
}

func (c *recConnector) Driver() driver.Driver { return c.base.Driver() }

// recConn records what it runs and passes everything through, the
// optional interfaces of database/sql included.
type recConn struct {
	driver.Conn
	rec *recorder
}

func (c *recConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := qc.QueryContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.rec.add(q, args)
	}
	return rows, err
}

func (c *recConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := ec.ExecContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.rec.add(q, args)
	}
	return res, err
}

func (c *recConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = pc.PrepareContext(ctx, q)
	} else {
		s, err = c.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &recStmt{s, c, q}, nil
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bc, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bc.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the driver has nothing else
}

func (c *recConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *recConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *recConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *recConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// recStmt records a prepared statement each time it runs.
type recStmt struct {
	driver.Stmt
	conn  *recConn
	query string
}

func (s *recStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.conn.rec.add(s.query, args)
	if sq, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return sq.QueryContext(ctx, args)
	}
	return s.Stmt.Query(values(args)) //nolint:staticcheck // the driver has nothing else
}

func (s *recStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.conn.rec.add(s.query, args)
	if se, ok := s.Stmt.(driver.StmtExecContext); ok {
		return se.ExecContext(ctx, args)
	}
	return s.Stmt.Exec(values(args)) //nolint:staticcheck // the driver has nothing else
}

func (s *recStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}

func values(args []driver.NamedValue) []driver.Value {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		out[i] = a.Value
	}
	return out
}

// readsPending says whether s selects NEW or SENDING rows: its text or its
// arguments name one of them. A statement of other statuses reads no
// pending row through the pending index.
func readsPending(s recorded) bool {
	if strings.Contains(s.query, "'NEW'") || strings.Contains(s.query, "'SENDING'") {
		return true
	}
	for _, a := range s.args {
		if a == "NEW" || a == "SENDING" {
			return true
		}
	}
	return false
}

// explain asks the database of st for the plan of s and returns its full
// scans of the outbox table, its walks of rows that no LIMIT cuts in the
// index's order (beyond ferrystore.PendingWindow rows), and a summary of its
// reads of the table.
func explain(ctx context.Context, t *testing.T, st testsvc.SQLStore, s recorded) (full, walks []string, summary string) {
	t.Helper()
	table := st.Driver.Table()
	switch st.Kind {
	case "mysql":
		var plan string
		require.NoError(t, st.DB.QueryRowContext(ctx, "EXPLAIN FORMAT=JSON "+s.query, s.args...).Scan(&plan))
		var v any
		require.NoError(t, json.Unmarshal([]byte(plan), &v))
		return mysqlPlan(v, table)
	case "postgres":
		var plan string
		require.NoError(t, st.DB.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+s.query, s.args...).Scan(&plan))
		var v []map[string]any
		require.NoError(t, json.Unmarshal([]byte(plan), &v))
		require.NotEmpty(t, v)
		return pgPlan(v[0]["Plan"].(map[string]any), table)
	default:
		rows, err := st.DB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+s.query, s.args...)
		require.NoError(t, err)
		defer rows.Close()
		var nodes []eqpNode
		for rows.Next() {
			var (
				n       eqpNode
				notused int
			)
			require.NoError(t, rows.Scan(&n.id, &n.parent, &notused, &n.detail))
			nodes = append(nodes, n)
		}
		require.NoError(t, rows.Err())
		return sqlitePlan(nodes, table, s.query)
	}
}

// deadIndex says whether an index holds DEAD and DISCARDED rows only.
func deadIndex(name string) bool {
	return strings.Contains(name, "settled") || strings.Contains(name, "dead")
}

// mysqlPlan judges the reads of table in an EXPLAIN FORMAT=JSON plan
// (MariaDB's or MySQL's).
func mysqlPlan(plan any, table string) (full, walks []string, summary string) {
	bound := float64(ferrystore.PendingWindow)
	var reads []string
	var walk func(v any, path []map[string]any)
	walk = func(v any, path []map[string]any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e, path)
			}
		case map[string]any:
			if name, _ := x["table_name"].(string); name == table {
				access, _ := x["access_type"].(string)
				key, _ := x["key"].(string)
				rows, _ := x["rows"].(float64)
				covering, _ := x["using_index"].(bool)
				read := fmt.Sprintf("%s on %s, ~%.0f rows", access, orNone(key), rows)
				if covering {
					read += ", index only"
				}
				reads = append(reads, read)
				switch {
				case access == "ALL" || access == "index":
					full = append(full, "a full scan: "+read)
				case covering || rows <= bound || deadIndex(key):
				default:
					// Rows read with a lookup each: only a walk cut by the
					// LIMIT of a derived table (the plan estimates the
					// table at the window or less), with no sort between.
					sorted, cut := false, false
					for i := len(path) - 1; i >= 0; i-- {
						p := path[i]
						if p["filesort"] != nil || p["temporary_table"] != nil || p["read_sorted_file"] != nil {
							sorted = true
						}
						if p["materialized"] != nil {
							r, _ := p["rows"].(float64)
							cut = !sorted && r <= bound
							break
						}
					}
					if !cut {
						walks = append(walks, "rows read with a lookup each, not cut by a LIMIT in the index's order: "+read)
					}
				}
			}
			next := append(path[:len(path):len(path)], x)
			for _, e := range x {
				walk(e, next)
			}
		}
	}
	walk(plan, nil)
	return full, walks, strings.Join(reads, "; ")
}

// pgPlan judges the reads of table in an EXPLAIN (FORMAT JSON) plan.
func pgPlan(root map[string]any, table string) (full, walks []string, summary string) {
	bound := float64(ferrystore.PendingWindow)
	var reads []string
	var walk func(n map[string]any, path []map[string]any)
	walk = func(n map[string]any, path []map[string]any) {
		typ, _ := n["Node Type"].(string)
		if rel, _ := n["Relation Name"].(string); rel == table {
			rows, _ := n["Plan Rows"].(float64)
			index, _ := n["Index Name"].(string)
			if typ == "Bitmap Heap Scan" {
				for _, c := range children(n) {
					if i, _ := c["Index Name"].(string); i != "" {
						index = i
					}
				}
			}
			read := fmt.Sprintf("%s on %s, ~%.0f rows", typ, orNone(index), rows)
			reads = append(reads, read)
			switch {
			case typ == "Seq Scan":
				full = append(full, "a full scan: "+read)
			case typ == "Index Only Scan" || rows <= bound || deadIndex(index):
			default:
				// Rows read with a lookup each: only an index walk without
				// a filter, in order, under a Limit of the window at most,
				// with nothing that reads all its input in between.
				cut := false
				_, filtered := n["Filter"]
			climb:
				for i := len(path) - 1; i >= 0 && !filtered && typ == "Index Scan"; i-- {
					switch p := path[i]; p["Node Type"] {
					case "Limit":
						r, _ := p["Plan Rows"].(float64)
						cut = r <= bound
						break climb
					case "Sort", "Incremental Sort", "Aggregate", "Hash", "SetOp", "WindowAgg":
						break climb
					}
					if rel, _ := path[i]["Parent Relationship"].(string); rel == "InitPlan" || rel == "SubPlan" {
						break
					}
				}
				if !cut {
					walks = append(walks, "rows read with a lookup each, not cut by a LIMIT in the index's order: "+read)
				}
			}
		}
		next := append(path[:len(path):len(path)], n)
		for _, c := range children(n) {
			walk(c, next)
		}
	}
	walk(root, nil)
	return full, walks, strings.Join(reads, "; ")
}

func children(n map[string]any) []map[string]any {
	var out []map[string]any
	plans, _ := n["Plans"].([]any)
	for _, p := range plans {
		if m, ok := p.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// eqpNode is one row of SQLite's EXPLAIN QUERY PLAN.
type eqpNode struct {
	id, parent int
	detail     string
}

var eqpRead = regexp.MustCompile(`^(SCAN|SEARCH) (\S+)(?: AS \S+)?(?: USING (COVERING INDEX|INDEX|INTEGER PRIMARY KEY|PRIMARY KEY)(?: (\S+))?)?`)

// sqlitePlan judges the reads of table in an EXPLAIN QUERY PLAN.
func sqlitePlan(nodes []eqpNode, table, query string) (full, walks []string, summary string) {
	byID := map[int]eqpNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	var reads []string
	for _, n := range nodes {
		m := eqpRead.FindStringSubmatch(n.detail)
		if m == nil || m[2] != table {
			continue
		}
		reads = append(reads, n.detail)
		how, index := m[3], m[4]
		switch {
		case m[1] == "SCAN":
			full = append(full, "a full scan: "+n.detail)
		case how == "COVERING INDEX" || deadIndex(index) || strings.Contains(index, "autoindex") || how == "PRIMARY KEY":
		default:
			// Rows read with a lookup each: only as the one read of a
			// derived table whose LIMIT is the window at most, with no
			// sort in it.
			parent, cut := byID[n.parent], false
			name, isSub := strings.CutPrefix(parent.detail, "CO-ROUTINE ")
			if !isSub {
				name, isSub = strings.CutPrefix(parent.detail, "MATERIALIZE ")
			}
			if isSub {
				cut = true
				for _, s := range nodes {
					if s.parent == parent.id && s.id != n.id {
						cut = false // a sort, or another read, in the derived table
					}
				}
				lim := regexp.MustCompile(`LIMIT (\d+)\) ` + regexp.QuoteMeta(name) + `\b`).FindStringSubmatch(query)
				if lim == nil {
					cut = false
				} else if v, _ := strconv.Atoi(lim[1]); v > ferrystore.PendingWindow {
					cut = false
				}
			}
			if !cut {
				walks = append(walks, "rows read with a lookup each, not cut by a LIMIT in the index's order: "+n.detail)
			}
		}
	}
	return full, walks, strings.Join(reads, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "no index"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func argsText(args []any) string {
	if len(args) == 0 {
		return "no arguments"
	}
	return fmt.Sprintf("arguments %v", args)
}
