package ferryadmin_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A handful of events without a recorded class among many with one, as
// while relays of an older version keep writing deaths after ferry
// migrate: the summary, a selection by class (count, list, dry run) and
// ClassifyErrors find them through the DEAD index's entries without a
// class, one range per destination and type, never by reading every DEAD
// event. Each read of rows without a class is by destination and type,
// and each such statement the store runs uses the DEAD index's range up to
// error_class IS NULL and the type (EXPLAIN); a walk of every DEAD event
// fails both.
func TestUnclassifiedAmongManyClassified(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			n := 20_000
			if kind == "sqlite" {
				n = 5_000
			}
			classified := make([]testsvc.DeadKind, len(deadMix))
			for i, k := range deadMix {
				k.Unclassified = false
				classified[i] = k
			}
			testsvc.InsertDead(t, b.st, n, classified...)
			// row returns the id of the first row at or after at of kind k
			// (deadMix[k]).
			row := func(at, k int) string {
				for at%len(deadMix) != k {
					at++
				}
				return fmt.Sprintf("dead-%06d", at)
			}
			// Events of orders.shipped's quota class discarded, so that the
			// DEAD index holds many DISCARDED rows too.
			res, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{
				Destination: "orders.shipped", ErrorClass: classQuota}}, "test", "ops@test")
			require.NoError(t, err)
			require.Equal(t, int64(n/5), res.Changed)

			want, err := ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			wantCount := map[string]int64{}
			for _, f := range unclassifiedFilters {
				wantCount[f.ErrorClass+" "+f.Destination], err = ferryadmin.CountDead(b.ctx, b.admin, f)
				require.NoError(t, err)
			}

			// The handful: DEAD events of both destinations and of the type
			// without one, and two DISCARDED ones.
			dead := []string{row(n/10, 0), row(n/4, 5), row(n/20, 9), row(n/2, 12), row(3*n/4, 19)}
			gone := []string{row(n/3, 14), row(2*n/3, 16)}
			all := append(append([]string(nil), dead...), gone...)
			for _, id := range all {
				_, err := b.st.DB.ExecContext(b.ctx, "UPDATE "+b.st.Driver.Table()+" SET error_class = NULL WHERE event_id = '"+id+"'")
				require.NoError(t, err)
			}
			for st, ids := range map[ferrytype.Status][]string{ferrytype.StatusDead: dead, ferrytype.StatusDiscarded: gone} {
				rows, err := b.admin.List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{st}, Unclassified: true, Limit: 100})
				require.NoError(t, err)
				require.ElementsMatch(t, ids, idsOfRows(rows), "the handful, %s", st)
			}

			w := watch(t, b)
			got, err := ferryadmin.SummarizeDead(b.ctx, w, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			require.Equal(t, want, got, "the same groups, the handful classified here")
			w.check(t, "the summary", len(dead)+2*len(got.Groups))

			for _, f := range unclassifiedFilters {
				c, err := ferryadmin.CountDead(b.ctx, w, f)
				require.NoError(t, err)
				require.Equal(t, wantCount[f.ErrorClass+" "+f.Destination], c, "%+v", f)
				w.check(t, fmt.Sprintf("a count of %+v", f), len(dead))
				sum, err := ferryadmin.SummarizeDead(b.ctx, w, f)
				require.NoError(t, err)
				require.Equal(t, c, sum.Total, "%+v", f)
				w.check(t, fmt.Sprintf("a summary of %+v", f), len(dead)+2*len(sum.Groups))
			}
			l, err := ferryadmin.ListDead(b.ctx, w, ferryadmin.DeadFilter{ErrorClass: classTimeout}, 1000)
			require.NoError(t, err)
			require.Contains(t, idsOfEvents(l.Events), dead[2], "among the oldest 1000")
			w.check(t, "a list", -1)
			dry, err := ferryadmin.RetryDead(b.ctx, w, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{
				Destination: "OrderRefunded", ErrorClass: classNoStream}, DryRun: true})
			require.NoError(t, err)
			require.Equal(t, int64(n/20), dry.Matched)
			require.Contains(t, dry.IDs, dead[4])
			w.check(t, "a dry run", -1)
			// The store's other statements of a range, explained below too:
			// a count, a walk of ids, a walk of states.
			for st, dest := range map[ferrytype.Status]string{ferrytype.StatusDead: "orders.paid", ferrytype.StatusDiscarded: "orders.shipped"} {
				f := ferrystore.Filter{Statuses: []ferrytype.Status{st}, Destination: dest, Type: "OrderPaid", Unclassified: true}
				c, err := w.Count(b.ctx, f)
				require.NoError(t, err)
				require.Equal(t, map[ferrytype.Status]int64{ferrytype.StatusDead: 4, ferrytype.StatusDiscarded: 2}[st], c, st)
				for _, cols := range []ferrystore.Filter{{KeysOnly: true}, {NoPayload: true}} {
					f.KeysOnly, f.NoPayload, f.Limit = cols.KeysOnly, cols.NoPayload, ferrystore.MaxStateListLimit
					rows, err := w.List(b.ctx, f)
					require.NoError(t, err)
					require.Len(t, rows, int(c), st)
				}
			}
			w.check(t, "the ranges", 12)

			classifiedNow, err := ferryadmin.ClassifyErrors(b.ctx, w)
			require.NoError(t, err)
			require.Equal(t, int64(len(all)), classifiedNow, "DEAD and DISCARDED")
			w.check(t, "ClassifyErrors", len(all))
			for _, id := range all {
				r, err := b.admin.Get(b.ctx, id)
				require.NoError(t, err)
				require.Equal(t, ferryadmin.ErrorClass(r.LastError), r.ErrorClass, id)
			}
			again, err := ferryadmin.ClassifyErrors(b.ctx, w)
			require.NoError(t, err)
			require.Zero(t, again)
			w.check(t, "a second ClassifyErrors", 0)
			got, err = ferryadmin.SummarizeDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
			require.NoError(t, err)
			require.Equal(t, want, got, "now counted by the database")

			w.explain(t)
		})
	}
}

// unclassifiedFilters are the selections by class that
// TestUnclassifiedAmongManyClassified counts and summarizes.
var unclassifiedFilters = []ferryadmin.DeadFilter{
	{ErrorClass: classNoStream},
	{ErrorClass: classTimeout, Destination: "orders.paid"},
	{ErrorClass: classNoStream, Destination: "OrderRefunded"},
	{ErrorClass: classQuota},
}

func idsOfRows(rows []ferrystore.Row) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

func idsOfEvents(events []ferryadmin.Event) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// watched is a second store on b's table whose connections record the
// statements they run, seen through an Admin that records what
// ferryadmin asks of it.
type watched struct {
	ferrystore.Admin
	b   *bundle
	rec *recorder

	mu     sync.Mutex
	listed int                 // rows List returned
	whole  []ferrystore.Filter // reads of rows without a class not by destination and type
}

func watch(t *testing.T, b *bundle) *watched {
	t.Helper()
	rec := &recorder{drv: b.st.DB.Driver()}
	var err error
	switch b.kind {
	case "mysql":
		cfg, err := ferrymysql.ParseURL(testsvc.URL(testsvc.EnvMySQL))
		require.NoError(t, err)
		rec.dsn = cfg.FormatDSN()
	case "postgres":
		rec.dsn = testsvc.URL(testsvc.EnvPostgres)
	case "sqlite":
		var file string
		require.NoError(t, b.st.DB.QueryRowContext(b.ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file))
		rec.dsn, _, err = ferrysqlite.DSN("sqlite://" + file)
		require.NoError(t, err)
	}
	db := sql.OpenDB(rec)
	t.Cleanup(func() { db.Close() })
	table := b.st.Driver.Table()
	var a ferrystore.Admin
	switch b.kind {
	case "mysql":
		a, err = ferrymysql.New(db, &ferrymysql.Config{Table: table})
	case "postgres":
		a, err = ferrypg.NewStdlib(db, &ferrypg.Config{Table: table})
	case "sqlite":
		a, err = ferrysqlite.New(db, &ferrysqlite.Config{Table: table})
	}
	require.NoError(t, err)
	return &watched{Admin: a, b: b, rec: rec}
}

func (w *watched) List(ctx context.Context, f ferrystore.Filter) ([]ferrystore.Row, error) {
	rows, err := w.Admin.List(ctx, f)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listed += len(rows)
	w.seen(f)
	return rows, err
}

func (w *watched) Count(ctx context.Context, f ferrystore.Filter) (int64, error) {
	w.mu.Lock()
	w.seen(f)
	w.mu.Unlock()
	return w.Admin.Count(ctx, f)
}

func (w *watched) GroupErrors(ctx context.Context, f ferrystore.Filter) ([]ferrystore.ErrorGroup, error) {
	w.mu.Lock()
	w.seen(f)
	w.mu.Unlock()
	return w.Admin.GroupErrors(ctx, f)
}

func (w *watched) seen(f ferrystore.Filter) {
	if f.Unclassified && (f.Destination == "" || f.Type == "") {
		w.whole = append(w.whole, f)
	}
}

// check checks what the calls since the last check read: no rows without
// a class but by destination and type, and at most most rows listed
// (unless -1), then starts again.
func (w *watched) check(t *testing.T, what string, most int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.whole, "%s: rows without a class read other than by destination and type", what)
	if most >= 0 {
		require.LessOrEqual(t, w.listed, most, "%s: rows listed", what)
	}
	w.listed, w.whole = 0, nil
}

// explain checks that each SELECT of rows without a class that the store
// ran reads the DEAD index's range by status, destination, error_class
// IS NULL and type, as its plan says.
func (w *watched) explain(t *testing.T) {
	t.Helper()
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	explained := 0
	for _, s := range w.rec.log {
		if !strings.HasPrefix(s.query, "SELECT") || !strings.Contains(s.query, "error_class IS NULL") {
			continue
		}
		explained++
		plan := w.plan(t, s)
		switch w.b.kind {
		case "mysql":
			// MariaDB: the table's access in EXPLAIN FORMAT=JSON.
			access := objectsOf(t, plan, "table_name")
			require.Len(t, access, 1, "%s\n%s", s.query, plan)
			require.Equal(t, "idx_dead", access[0]["key"], "%s\n%s", s.query, plan)
			require.Subset(t, access[0]["used_key_parts"], []any{"settled_status", "route", "error_class", "event_type"},
				"%s\n%s", s.query, plan)
		case "postgres":
			// The plan's nodes in EXPLAIN (FORMAT JSON): one reads the
			// table, through the DEAD index, by the type after IS NULL.
			var scans []map[string]any
			for _, node := range objectsOf(t, plan, "Node Type") {
				if node["Relation Name"] != nil {
					scans = append(scans, node)
				}
			}
			require.Len(t, scans, 1, "%s\n%s", s.query, plan)
			require.Equal(t, w.b.st.Driver.Table()+"_dead_idx", scans[0]["Index Name"], "%s\n%s", s.query, plan)
			require.Regexp(t, `error_class IS NULL.*event_type`, scans[0]["Index Cond"], "%s\n%s", s.query, plan)
		case "sqlite":
			require.Contains(t, plan, "USING INDEX "+w.b.st.Driver.Table()+"_dead_idx (status=? AND <expr>=? AND error_class=? AND event_type=?",
				"%s\n%s", s.query, plan)
		}
	}
	require.Positive(t, explained, "the statements of rows without a class")
	t.Logf("%s: %d statements of rows without a class explained", w.b.kind, explained)
}

// plan returns the plan of s on b's database: MariaDB's EXPLAIN
// FORMAT=JSON, PostgreSQL's EXPLAIN (FORMAT JSON), SQLite's EXPLAIN QUERY
// PLAN, one line a step.
func (w *watched) plan(t *testing.T, s statement) string {
	t.Helper()
	prefix := map[string]string{"mysql": "EXPLAIN FORMAT=JSON ", "postgres": "EXPLAIN (FORMAT JSON) ", "sqlite": "EXPLAIN QUERY PLAN "}[w.b.kind]
	rows, err := w.b.st.DB.QueryContext(w.b.ctx, prefix+s.query, s.args...)
	require.NoError(t, err, s.query)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		switch v := vals[len(vals)-1].(type) { // the plan, or SQLite's detail
		case []byte:
			out = append(out, string(v))
		case string:
			out = append(out, v)
		default: // a JSON document the driver decoded
			b, err := json.Marshal(v)
			require.NoError(t, err)
			out = append(out, string(b))
		}
	}
	require.NoError(t, rows.Err())
	return strings.Join(out, "\n")
}

// objectsOf returns the objects of the JSON plan that have key: MariaDB's
// tables ("table_name"), PostgreSQL's nodes ("Node Type").
func objectsOf(t *testing.T, plan, key string) []map[string]any {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(plan), &doc), plan)
	var out []map[string]any
	var walk func(any)
	walk = func(doc any) {
		switch v := doc.(type) {
		case map[string]any:
			if _, ok := v[key]; ok {
				out = append(out, v)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// statement is a statement a recorder's connection ran, with its
// arguments.
type statement struct {
	query string
	args  []any
}

// recorder is a database/sql connector that opens drv's connections to
// dsn and records the statements they run.
type recorder struct {
	drv driver.Driver
	dsn string

	mu  sync.Mutex
	log []statement
}

func (r *recorder) Connect(context.Context) (driver.Conn, error) {
	c, err := r.drv.Open(r.dsn)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, r: r}, nil
}

func (r *recorder) Driver() driver.Driver { return r.drv }

func (r *recorder) add(query string, args []driver.NamedValue) {
	s := statement{query: query}
	for _, a := range args {
		s.args = append(s.args, a.Value)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

// recordingConn records the statements queried and executed directly; the
// three drivers run them so (MySQL's with interpolateParams, ferry's
// default).
type recordingConn struct {
	driver.Conn
	r *recorder
}

func (c *recordingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.r.add(query, args)
	}
	return rows, err
}

func (c *recordingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := e.ExecContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.r.add(query, args)
	}
	return res, err
}

func (c *recordingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *recordingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the driver has nothing else
}

func (c *recordingConn) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *recordingConn) ResetSession(ctx context.Context) error {
	if s, ok := c.Conn.(driver.SessionResetter); ok {
		return s.ResetSession(ctx)
	}
	return nil
}

func (c *recordingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
