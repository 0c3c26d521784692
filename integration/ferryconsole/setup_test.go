package ferryconsole_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

const (
	testUser     = "alice"
	testPassword = "s3cret-console-password"
)

// bundle is a console on a real database: an outbox with DEAD and
// pending events, a consumer's inbox with a conflict, a task table.
type bundle struct {
	ctx     context.Context
	kind    string
	st      testsvc.SQLStore
	admin   ferrystore.Admin
	ob      *ferry.Outbox[*sql.Tx]
	tasks   testsvc.SQLStore
	tob     *ferry.Outbox[*sql.Tx]
	inbox   ferrystore.InboxDriver[*sql.Tx]
	inboxDB *sql.DB
	// conflicts names the inbox's conflict table.
	conflicts string
	cfg       ferryconsole.Config
	logs      *testsvc.LogBuffer
	srv       *httptest.Server
	// prefix is where the console is mounted on srv, "" at the root.
	prefix string
}

// setup builds the stores of kind and a console on them, mounted on a
// test server; mod adjusts the config before the handler is built.
func setup(t *testing.T, kind string, mod ...func(*ferryconsole.Config)) *bundle {
	t.Helper()
	b := &bundle{ctx: testsvc.Context(t, 3*time.Minute), kind: kind, st: testsvc.Store(t, kind), tasks: testsvc.Store(t, kind),
		logs: &testsvc.LogBuffer{}}
	b.admin = b.st.Driver
	var err error
	b.ob, err = ferry.NewOutbox(b.st.Driver, nil)
	require.NoError(t, err)
	b.tob, err = ferry.NewOutbox(b.tasks.Driver, nil)
	require.NoError(t, err)
	m, c, v := testsvc.InboxTables()
	b.conflicts = c
	switch kind {
	case "mysql":
		b.inboxDB = testsvc.MySQL(t)
		b.inbox, err = ferrymysql.NewInbox(b.inboxDB, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "postgres":
		b.inboxDB = testsvc.PostgresSQL(t)
		b.inbox, err = ferrypg.NewStdlibInbox(b.inboxDB, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "sqlite":
		b.inboxDB = testsvc.SQLite(t)
		b.inbox, err = ferrysqlite.NewInbox(b.inboxDB, &ferrysqlite.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	}
	require.NoError(t, err)
	testsvc.MigratedInbox(t, b.inbox, func(q string) error { _, err := b.inboxDB.Exec(q); return err }, m, m, c, v)
	b.cfg = ferryconsole.Config{
		Outboxes:     map[string]ferrystore.Admin{"orders": b.admin},
		Inboxes:      map[string]ferrystore.InboxStore{"points": b.inbox},
		Tasks:        map[string]ferrystore.Admin{"points": b.tasks.Driver},
		Authenticate: ferryconsole.BasicAuth(testUser, testPassword),
		Logger:       slog.New(slog.NewTextHandler(b.logs, nil)),
	}
	for _, f := range mod {
		f(&b.cfg)
	}
	h, err := ferryconsole.New(b.cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", h)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// url is the address of the console page at path ("outbox/orders/dead").
func (b *bundle) url(path string) string { return b.srv.URL + b.prefix + "/" + path }

// enqueue writes events to the outbox, one transaction.
func (b *bundle) enqueue(t *testing.T, ob *ferry.Outbox[*sql.Tx], db *sql.DB, events ...ferry.Event) []string {
	t.Helper()
	tx, err := db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	ids, err := ob.EnqueueTx(b.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return ids
}

// dead enqueues events and makes them DEAD with lastError, as a relay
// that gave up does. Call it before enqueueing pending events: it claims
// the oldest NEW ones.
func (b *bundle) dead(t *testing.T, s testsvc.SQLStore, lastError string, events ...ferry.Event) []string {
	t.Helper()
	ob := b.ob
	if s.Driver != b.st.Driver {
		ob = b.tob
	}
	ids := b.enqueue(t, ob, s.DB, events...)
	tok := testsvc.Name("tok-")
	msgs, err := s.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: len(ids), Token: tok, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, len(ids), "the DEAD events are the oldest NEW ones")
	fails := make([]ferrystore.Failure, len(msgs))
	for i, m := range msgs {
		fails[i] = ferrystore.Failure{ID: m.ID, Token: tok, Dead: true, Error: lastError}
	}
	_, err = s.Driver.MarkFailed(b.ctx, fails)
	require.NoError(t, err)
	return ids
}

// redead makes id, a NEW event and the oldest pending one, DEAD again.
func (b *bundle) redead(t *testing.T, s testsvc.SQLStore, id, lastError string) {
	t.Helper()
	tok := testsvc.Name("tok-")
	msgs, err := s.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: tok, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, id, msgs[0].ID)
	_, err = s.Driver.MarkFailed(b.ctx, []ferrystore.Failure{{ID: id, Token: tok, Dead: true, Error: lastError}})
	require.NoError(t, err)
}

func orderEvent(typ, agg, dest string) ferry.Event {
	return ferry.Event{AggregateType: "order", AggregateID: agg, Type: typ, Destination: dest,
		Headers: map[string]string{"tenant": "acme"}, Payload: json.RawMessage(`{"order_id":` + agg + `,"amount":10}`)}
}

// status reads an event's row.
func (b *bundle) row(t *testing.T, a ferrystore.Admin, id string) ferrystore.Row {
	t.Helper()
	r, err := a.Get(b.ctx, id)
	require.NoError(t, err)
	return r
}

type award struct {
	UserID int64 `json:"user_id"`
	Amount int64 `json:"amount"`
}

// conflict makes consumer record a conflict on key: applied with amount
// 10, delivered again with amount 99. It returns the conflict's id.
func (b *bundle) conflict(t *testing.T, consumer, key string) int64 {
	t.Helper()
	in, err := ferry.NewInbox(b.inbox, &ferry.InboxConfig{Consumer: consumer})
	require.NoError(t, err)
	nothing := func(context.Context, *sql.Tx) error { return nil }
	_, err = in.Process(b.ctx, ferry.Operation{Key: key, EventID: key + "-1", Fields: award{7, 10}}, nothing)
	require.NoError(t, err)
	res, err := in.Process(b.ctx, ferry.Operation{Key: key, EventID: key + "-2", Fields: award{7, 99}}, nothing)
	require.ErrorIs(t, err, ferry.ErrConflict)
	require.Positive(t, res.ConflictID)
	return res.ConflictID
}

// applied records n applied markers of consumer.
func (b *bundle) applied(t *testing.T, consumer string, n int) {
	t.Helper()
	in, err := ferry.NewInbox(b.inbox, &ferry.InboxConfig{Consumer: consumer})
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		k := testsvc.Name(consumer + ":")
		_, err := in.Process(b.ctx, ferry.Operation{Key: k, EventID: k, Fields: award{1, 1}},
			func(context.Context, *sql.Tx) error { return nil })
		require.NoError(t, err)
	}
}

// getConflict reads a conflict.
func (b *bundle) getConflict(t *testing.T, id int64) ferryadmin.Conflict {
	t.Helper()
	found, err := ferryadmin.GetConflicts(b.ctx, b.inbox, []int64{id})
	require.NoError(t, err)
	require.Len(t, found.Conflicts, 1)
	return found.Conflicts[0]
}

// client sends requests to the console.
type client struct {
	t          *testing.T
	b          *bundle
	user, pass string
	hdr        http.Header
}

func (b *bundle) client(t *testing.T) *client {
	return &client{t: t, b: b, user: testUser, pass: testPassword, hdr: http.Header{}}
}

// page is a response read in full.
type page struct {
	status int
	header http.Header
	body   string
	url    *url.URL
}

func (c *client) do(method, path string, form url.Values) page {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	u := path
	if !strings.HasPrefix(u, "http") {
		u = c.b.url(path)
	}
	req, err := http.NewRequestWithContext(c.b.ctx, method, u, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := cl.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return page{status: res.StatusCode, header: res.Header, body: string(raw), url: req.URL}
}

func (c *client) get(path string) page { c.t.Helper(); return c.do("GET", path, nil) }

// post sends a form and, as a browser does, follows a 303 See Other (an
// action's redirect to its result) with a GET.
func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	p := c.do("POST", path, form)
	if p.status != http.StatusSeeOther {
		return p
	}
	loc, err := url.Parse(p.header.Get("Location"))
	require.NoError(c.t, err)
	return c.get(p.url.ResolveReference(loc).String())
}

// postRaw sends a form and returns the answer as it is.
func (c *client) postRaw(path string, form url.Values) page {
	c.t.Helper()
	return c.do("POST", path, form)
}

var (
	confirmMaxRe    = regexp.MustCompile(`name="max" value="([0-9]+)"`)
	confirmDiedByRe = regexp.MustCompile(`name="died_by" value="([^"]+)"`)
)

// group acts on a group of the groups page as an operator does: the
// action's first POST shows the count and a sample, the confirmation's
// POST (with that page's token and count) runs it. It returns the
// confirmation page and the result.
func (c *client) group(action string, f url.Values) (confirm, result page) {
	c.t.Helper()
	f = cloneValues(f)
	f.Set("csrf", c.token("outbox/orders/groups"))
	confirm = c.post("outbox/orders/"+action+"-group", f)
	require.Equal(c.t, http.StatusOK, confirm.status, confirm.body)
	m := confirmMaxRe.FindStringSubmatch(confirm.body)
	require.NotNil(c.t, m, "the confirmation page has the count to confirm: %s", snippet(confirm.body))
	tok := tokenRe.FindStringSubmatch(confirm.body)
	require.NotNil(c.t, tok)
	f.Set("csrf", tok[1])
	f.Set("confirm", "1")
	f.Set("max", m[1])
	f.Set("died_by", confirmDiedByRe.FindStringSubmatch(confirm.body)[1])
	return confirm, c.post("outbox/orders/"+action+"-group", f)
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

var tokenRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token returns the anti-CSRF token of the page at path's forms.
func (c *client) token(path string) string {
	c.t.Helper()
	p := c.get(path)
	require.Equal(c.t, http.StatusOK, p.status, p.body)
	m := tokenRe.FindStringSubmatch(p.body)
	require.NotNil(c.t, m, "the page %s has a form with a token", path)
	return m[1]
}

// form builds a form with the token and pairs of names and values.
func form(token string, kv ...string) url.Values {
	v := url.Values{}
	if token != "" {
		v.Set("csrf", token)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func mustContain(t *testing.T, p page, parts ...string) {
	t.Helper()
	for _, s := range parts {
		require.Contains(t, p.body, s, "status %d", p.status)
	}
}

// eq checks p's status; logs, when given, are shown on a failure.
func eq(t *testing.T, want int, p page, logs ...*testsvc.LogBuffer) {
	t.Helper()
	var logged []string
	for _, l := range logs {
		logged = append(logged, l.Lines()...)
	}
	require.Equal(t, want, p.status, "body: %s\nlog: %s", snippet(p.body), strings.Join(logged, "\n"))
}

// snippet is the text of the page's <main>, for failure messages.
func snippet(body string) string {
	if i := strings.Index(body, "<main>"); i >= 0 {
		body = body[i:]
	}
	if len(body) > 1500 {
		body = body[:1500]
	}
	return body
}

func ids(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

var _ = fmt.Sprint
