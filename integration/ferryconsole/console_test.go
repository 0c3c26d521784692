package ferryconsole_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestNewValidatesTheConfig(t *testing.T) {
	t.Parallel()
	st := testsvc.Store(t, "sqlite")
	a := st.Driver
	outboxes := map[string]ferrystore.Admin{"orders": a}
	auth := ferryconsole.BasicAuth("u", "p")
	for _, c := range []struct {
		name string
		cfg  ferryconsole.Config
		want string
	}{
		{"NoAuthentication", ferryconsole.Config{Outboxes: outboxes}, "Config.Authenticate is required"},
		{"NothingToShow", ferryconsole.Config{Authenticate: auth}, "no Outboxes"},
		{"BadName", ferryconsole.Config{Authenticate: auth, Outboxes: map[string]ferrystore.Admin{"a/b": a}}, `name "a/b"`},
		{"NilStore", ferryconsole.Config{Authenticate: auth, Outboxes: map[string]ferrystore.Admin{"x": nil}}, "is nil"},
		{"ShortSecret", ferryconsole.Config{Authenticate: auth, Outboxes: outboxes, Secret: []byte("short")}, "at least 32"},
		{"PageSize", ferryconsole.Config{Authenticate: auth, Outboxes: outboxes, PageSize: 1000}, "PageSize"},
		{"ReconcileOfNoOutbox", ferryconsole.Config{Authenticate: auth, Outboxes: outboxes,
			Reconcile: map[string]ferryadmin.ReconcileOptions{"other": {}}}, "names no outbox"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := ferryconsole.New(c.cfg)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
			require.Nil(t, h)
		})
	}
	t.Run("InsecureMustBeExplicit", func(t *testing.T) {
		h, err := ferryconsole.New(ferryconsole.Config{Outboxes: outboxes, Insecure: true})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "anonymous")
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	t.Run("Basic", func(t *testing.T) {
		b := setup(t, "sqlite")
		c := b.client(t)
		for _, path := range []string{"", "outbox/orders/dead", "assets/console.css", "no/such/page"} {
			c.user = ""
			p := c.get(path)
			eq(t, http.StatusUnauthorized, p)
			require.Equal(t, `Basic realm="ferry console", charset="UTF-8"`, p.header.Get("WWW-Authenticate"))
			require.NotContains(t, p.body, "orders", "a refused request shows nothing of the console")
			c.user, c.pass = testUser, "wrong"
			eq(t, http.StatusUnauthorized, c.get(path))
			c.user, c.pass = "mallory", testPassword
			eq(t, http.StatusUnauthorized, c.get(path))
			c.user, c.pass = testUser, testPassword
		}
		eq(t, http.StatusOK, c.get(""))
		eq(t, http.StatusOK, c.get("assets/console.css"))
		// A refused POST changes nothing and is refused before its form is read.
		id := b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", ""))[0]
		c.user = ""
		eq(t, http.StatusUnauthorized, c.post("outbox/orders/retry", form("", "id", id)))
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status)
		require.NotEmpty(t, b.logs.Lines("level=WARN", "console request refused", "wrong user or password"))
		require.Empty(t, b.logs.Lines("no basic credentials"), "a request without credentials is no warning")
	})
	t.Run("Bearer", func(t *testing.T) {
		b := setup(t, "sqlite", func(c *ferryconsole.Config) { c.Authenticate = ferryconsole.BearerToken("tok-123") })
		c := b.client(t)
		c.user = ""
		p := c.get("")
		eq(t, http.StatusUnauthorized, p)
		require.Equal(t, `Bearer realm="ferry console"`, p.header.Get("WWW-Authenticate"))
		c.hdr.Set("Authorization", "Bearer tok-999")
		p = c.get("")
		eq(t, http.StatusUnauthorized, p)
		require.Contains(t, p.header.Get("WWW-Authenticate"), `error="invalid_token"`)
		c.hdr.Set("Authorization", "Bearer tok-123")
		p = c.get("")
		eq(t, http.StatusOK, p)
		mustContain(t, p, ">token</span>")
	})
	t.Run("EmptyCredentialsPanic", func(t *testing.T) {
		require.Panics(t, func() { ferryconsole.BasicAuth("u", "") })
		require.Panics(t, func() { ferryconsole.BearerToken("") })
	})
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	c := b.client(t)
	pages := []page{c.get(""), c.get("outbox/orders/dead?page=x"), c.get("nowhere")}
	c.user = ""
	pages = append(pages, c.get(""))
	for _, p := range pages {
		require.Equal(t, "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
			p.header.Get("Content-Security-Policy"), p.url)
		require.Equal(t, "DENY", p.header.Get("X-Frame-Options"))
		require.Equal(t, "nosniff", p.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-referrer", p.header.Get("Referrer-Policy"))
		require.Equal(t, "no-store", p.header.Get("Cache-Control"))
		require.NotContains(t, p.body, "<script>", "no inline script: the CSP forbids it")
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	deadIDs := b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", ""), orderEvent("OrderPaid", "2", ""))
	c := b.client(t)
	tok := c.token("outbox/orders/dead")
	stillDead := func() {
		t.Helper()
		for _, id := range deadIDs {
			require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status)
		}
	}

	t.Run("NoToken", func(t *testing.T) {
		p := c.post("outbox/orders/retry", form("", "id", deadIDs[0]))
		eq(t, http.StatusForbidden, p)
		mustContain(t, p, "security token is missing, expired or not yours")
		stillDead()
	})
	t.Run("ForgedToken", func(t *testing.T) {
		for _, forged := range []string{"x", "123.abc", tok + "x", strings.Replace(tok, ".", ".A", 1), "99999999999." + strings.SplitN(tok, ".", 2)[1]} {
			eq(t, http.StatusForbidden, c.post("outbox/orders/retry", form(forged, "id", deadIDs[0])))
		}
		stillDead()
	})
	t.Run("AnotherOperatorsToken", func(t *testing.T) {
		// Same secret, other operator: the token names its operator.
		secret := []byte(strings.Repeat("k", 32))
		users := map[string]string{"alice": "pw-a", "bob": "pw-b"}
		h, err := ferryconsole.New(ferryconsole.Config{Outboxes: b.cfg.Outboxes, Secret: secret,
			Authenticate: func(r *http.Request) (string, error) {
				u, p, ok := r.BasicAuth()
				if !ok || users[u] != p {
					return "", &ferryconsole.AuthError{Challenge: "Basic", Reason: "no"}
				}
				return u, nil
			}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()
		alice := &client{t: t, b: b, user: "alice", pass: "pw-a", hdr: http.Header{}}
		bob := &client{t: t, b: b, user: "bob", pass: "pw-b", hdr: http.Header{}}
		aliceTok := alice.token(srv.URL + "/outbox/orders/dead")
		eq(t, http.StatusForbidden, bob.post(srv.URL+"/outbox/orders/retry", form(aliceTok, "id", deadIDs[0])))
		stillDead()
	})
	t.Run("CrossOrigin", func(t *testing.T) {
		for _, h := range []http.Header{
			{"Sec-Fetch-Site": {"cross-site"}},
			{"Sec-Fetch-Site": {"same-site"}},
			{"Origin": {"http://evil.example"}},
		} {
			c.hdr = h
			p := c.post("outbox/orders/retry", form(tok, "id", deadIDs[0]))
			eq(t, http.StatusForbidden, p)
			mustContain(t, p, "Cross-origin request refused")
		}
		c.hdr = http.Header{}
		stillDead()
	})
	t.Run("SameOriginWithToken", func(t *testing.T) {
		c.hdr = http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {b.srv.URL}}
		p := c.post("outbox/orders/retry", form(tok, "id", deadIDs[0]))
		c.hdr = http.Header{}
		eq(t, http.StatusOK, p)
		mustContain(t, p, "1 of 1 selected event changed")
		require.Equal(t, ferrytype.StatusNew, b.row(t, b.admin, deadIDs[0]).Status)
	})
	t.Run("ReconcileNeedsATokenToo", func(t *testing.T) {
		eq(t, http.StatusNotFound, c.post("reconcile/orders", form(tok)))
		eq(t, http.StatusForbidden, c.post("reconcile/orders", form("")))
	})
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	secret := []byte(strings.Repeat("s", 32))
	b := setup(t, "sqlite", func(c *ferryconsole.Config) { c.ReadOnly = true; c.Secret = secret })
	ids := b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", ""), orderEvent("OrderPaid", "2", ""))
	id := ids[0]
	_, err := ferryadmin.DiscardDead(b.ctx, b.admin, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids[1:]}}, "x", "y")
	require.NoError(t, err)
	cid := b.conflict(t, "points-award", "order:1:paid")
	c := b.client(t)
	for _, path := range []string{"", "outbox/orders/dead", "outbox/orders/groups", "outbox/orders/discarded",
		"outbox/orders/event?id=" + url.QueryEscape(id), "inbox/points/conflicts/" + itoa(cid)} {
		p := c.get(path)
		eq(t, http.StatusOK, p, b.logs)
		mustContain(t, p, `id="read-only"`)
		for _, s := range []string{`method="post"`, `name="id"`, "formaction", ">Retry<", ">Discard<", "Retry selected",
			"Discard selected", "Retry all", "Discard all", "Restore selected", "Record decision"} {
			require.NotContains(t, p.body, s, "read-only %s shows no action", path)
		}
	}
	// A token valid for this operator and secret (from a writable console
	// with the same secret) does not help.
	w, err := ferryconsole.New(ferryconsole.Config{Outboxes: b.cfg.Outboxes, Authenticate: b.cfg.Authenticate, Secret: secret})
	require.NoError(t, err)
	srv := httptest.NewServer(w)
	defer srv.Close()
	tok := c.token(srv.URL + "/outbox/orders/dead")
	for _, post := range []struct {
		path string
		form url.Values
	}{
		{"outbox/orders/retry", form(tok, "id", id)},
		{"outbox/orders/discard", form(tok, "id", id, "reason", "test")},
		{"outbox/orders/restore", form(tok, "id", ids[1])},
		{"outbox/orders/retry-group", form(tok, "destination", "OrderPaid", "class", "boom")},
		{"outbox/orders/discard-group", form(tok, "destination", "OrderPaid", "class", "boom", "reason", "r")},
		{"tasks/points/retry", form(tok, "id", id)},
		{"inbox/points/conflicts/" + itoa(cid) + "/resolve", form(tok, "decision", "ignored", "note", "x")},
	} {
		p := c.post(post.path, post.form)
		eq(t, http.StatusForbidden, p)
		mustContain(t, p, "This console is read-only")
	}
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status)
	require.Equal(t, ferrytype.StatusDiscarded, b.row(t, b.admin, ids[1]).Status)
	require.Equal(t, "OPEN", b.getConflict(t, cid).Status)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	id := b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", ""))[0]
	cid := b.conflict(t, "points-award", "order:1:paid")
	c := b.client(t)
	tok := c.token("outbox/orders/dead")
	long := strings.Repeat("x", 300)
	for _, g := range []struct{ path, says string }{
		{"outbox/orders/dead?since=yesterday", "want a duration (2h) or an RFC 3339 time"},
		{"outbox/orders/dead?since=-2h", "must be positive"},
		{"outbox/orders/dead?since=2999-01-01T00:00:00Z", "is in the future"},
		{"outbox/orders/dead?since=1h&until=2h", "is after until"},
		{"outbox/orders/dead?aggregate=order42", "want type:id"},
		{"outbox/orders/dead?type=" + long, "type is longer than 64 bytes"},
		{"outbox/orders/dead?destination=a%00b", "control characters"},
		{"outbox/orders/dead?type=%ff", "not valid UTF-8"},
		{"outbox/orders/dead?page=0", "want a number from 1 to 19"},
		{"outbox/orders/dead?page=abc", "want a number from 1 to 19"},
		{"outbox/orders/dead?page=20", "narrow the filter"},
		{"outbox/orders/event", "an event id is required"},
		{"outbox/orders/event?id=" + long, "longer than 64 bytes"},
		{"outbox/orders/event?id=a%0Ab", "control characters"},
		{"inbox/points/conflicts/abc", `Conflict id &#34;abc&#34;: want a positive number`},
		{"inbox/points/conflicts/-4", "want a positive number"},
		{"inbox/points/conflicts/99999999999999999999", "want a positive number"},
		{"inbox/points/conflicts?all=yes", "want 1"},
		{"inbox/points/conflicts?consumer=" + long, "consumer is longer than 64 bytes"},
		{"inbox/points?count=2", "want 1"},
	} {
		p := c.get(g.path)
		eq(t, http.StatusBadRequest, p)
		mustContain(t, p, "Invalid request", g.says)
	}
	for _, g := range []struct{ path, says string }{
		{"outbox/nope/dead", `no outbox named &#34;nope&#34;`},
		{"tasks/nope/dead", `no task table named &#34;nope&#34;`},
		{"outbox/orders/event?id=no-such-event", `has no event &#34;no-such-event&#34;`},
		{"inbox/nope/conflicts", "no consumer database"},
		{"inbox/nope", "no consumer database"},
		{"inbox/points/conflicts/424242", "has no conflict 424242"},
		{"reconcile/orders", "has no page"}, // a POST route
		{"what/ever", "has no page"},
	} {
		p := c.get(g.path)
		eq(t, http.StatusNotFound, p)
		mustContain(t, p, g.says)
	}
	for _, post := range []struct {
		path string
		form url.Values
		says string
	}{
		{"outbox/orders/retry", form(tok), "no event selected"},
		{"outbox/orders/retry", form(tok, "id", ""), "an event id is required"},
		{"outbox/orders/retry", form(tok, "id", long), "longer than 64 bytes"},
		{"outbox/orders/discard", form(tok, "id", id), "a reason is required"},
		{"outbox/orders/discard", form(tok, "id", id, "reason", "   "), "a reason is required"},
		{"outbox/orders/discard", form(tok, "id", id, "reason", "a\x00b"), "control characters"},
		{"outbox/orders/discard", form(tok, "id", id, "reason", strings.Repeat("r", 2001)), "longer than 2000 bytes"},
		{"inbox/points/conflicts/" + itoa(cid) + "/resolve", form(tok, "decision", "apply-incoming", "note", "x"), "want one of keep-stored"},
		{"inbox/points/conflicts/" + itoa(cid) + "/resolve", form(tok, "decision", "ignored"), "A note is required"},
		{"inbox/points/conflicts/x/resolve", form(tok, "decision", "ignored", "note", "n"), "want a positive number"},
	} {
		p := c.post(post.path, post.form)
		eq(t, http.StatusBadRequest, p)
		mustContain(t, p, post.says)
	}
	p := c.post("outbox/orders/retry", url.Values{"csrf": {tok}, "id": ids(ferrystore.MaxListLimit+1, func(i int) string { return "e" + itoa(int64(i)) })})
	eq(t, http.StatusBadRequest, p)
	mustContain(t, p, "1001 events selected, at most 1000")
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status, "nothing changed")
	require.Equal(t, "OPEN", b.getConflict(t, cid).Status)
}

func TestDatabaseErrorsShowNoInternals(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	// An outbox whose table does not exist: every read fails.
	missing := testsvc.Store(t, "sqlite")
	_, err := missing.DB.Exec(`DROP TABLE "` + missing.Driver.Table() + `"`)
	require.NoError(t, err)
	b2 := setup(t, "sqlite", func(c *ferryconsole.Config) {
		c.Outboxes = map[string]ferrystore.Admin{"orders": b.admin, "broken": missing.Driver}
	})
	c := b2.client(t)
	p := c.get("")
	eq(t, http.StatusOK, p)
	mustContain(t, p, "Outbox orders", "The table could not be read")
	require.NotContains(t, p.body, "no such table")
	p = c.get("outbox/broken/dead")
	eq(t, http.StatusInternalServerError, p)
	mustContain(t, p, "the database did not answer as expected", "Reference: <code>")
	require.NotContains(t, p.body, "no such table")
	require.NotContains(t, p.body, missing.Driver.Table())
	ref := regexp.MustCompile(`Reference: <code>([0-9a-f]+)</code>`).FindStringSubmatch(p.body)[1]
	require.NotEmpty(t, b2.logs.Lines("console request failed", "ref="+ref, "no such table"), "the log has the error")
}

func TestMountedUnderAPrefixEveryLinkWorks(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite", func(c *ferryconsole.Config) {
		c.Reconcile = map[string]ferryadmin.ReconcileOptions{"orders": {PendingOlderThan: time.Hour}}
	})
	dead := b.dead(t, b.st, "nats: no stream matches subject", orderEvent("OrderPaid", "1", "orders.paid"),
		orderEvent("OrderPaid", "2", "orders.paid"))
	b.enqueue(t, b.ob, b.st.DB, orderEvent("OrderShipped", "1", "orders.shipped"))
	b.dead(t, b.tasks, "sms gateway: 500", orderEvent("SendSMS", "1", ""))
	b.enqueue(t, b.tob, b.tasks.DB, orderEvent("SendSMS", "2", ""))
	cid := b.conflict(t, "points-award", "order:1:paid")
	h, err := ferryconsole.New(b.cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/console/", http.StripPrefix("/ops/console", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := b.client(t)

	// The prefix without its slash redirects to the root: the mux does
	// when the console is mounted on "/ops/console/", the console itself
	// when it is the server's handler.
	for _, u := range []string{srv.URL + "/ops/console", ""} {
		if u == "" {
			bare := httptest.NewServer(http.StripPrefix("/ops/console", h))
			defer bare.Close()
			u = bare.URL + "/ops/console"
		}
		p := c.get(u)
		require.Contains(t, []int{http.StatusFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect}, p.status)
		loc, err := p.url.Parse(p.header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "/ops/console/", loc.Path)
	}

	// Crawl every link from the root: each stays under the prefix and
	// answers 200.
	hrefRe := regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)
	seen := map[string]bool{}
	queue := []string{srv.URL + "/ops/console/"}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		if seen[u] {
			continue
		}
		seen[u] = true
		p := c.get(u)
		eq(t, http.StatusOK, p)
		for _, m := range hrefRe.FindAllStringSubmatch(p.body, -1) {
			ref, err := p.url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(ref.Path, "/ops/console/"), "%s links to %s, outside the console", u, ref)
			if strings.Contains(m[0], "action=") {
				continue // forms are posted by the other tests
			}
			ref.Fragment = ""
			queue = append(queue, ref.String())
		}
	}
	for _, want := range []string{"/ops/console/outbox/orders/dead", "/ops/console/outbox/orders/event?id=" + url.QueryEscape(dead[0]),
		"/ops/console/tasks/points/dead", "/ops/console/inbox/points", "/ops/console/inbox/points/conflicts/" + itoa(cid),
		"/ops/console/reconcile", "/ops/console/assets/console.css", "/ops/console/assets/console.js"} {
		require.True(t, seen[srv.URL+want], "the crawl reached %s (saw %v)", want, keysOf(seen))
	}

	// An action's redirect to its result, and a group's confirmation
	// form, stay under the prefix too.
	tok := c.token(srv.URL + "/ops/console/outbox/orders/dead")
	raw := c.postRaw(srv.URL+"/ops/console/outbox/orders/retry", form(tok, "id", dead[0]))
	eq(t, http.StatusSeeOther, raw)
	loc, err := raw.url.Parse(raw.header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/ops/console/outbox/orders/result", loc.Path)
	p := c.get(loc.String())
	eq(t, http.StatusOK, p)
	mustContain(t, p, "1 of 1 selected event changed")
	tok = c.token(srv.URL + "/ops/console/outbox/orders/groups")
	p = c.post(srv.URL+"/ops/console/outbox/orders/retry-group", form(tok, "destination", "orders.paid",
		"class", ferryadmin.ErrorClass("nats: no stream matches subject")))
	eq(t, http.StatusOK, p)
	mustContain(t, p, `id="confirm-count">1 event matches now`)
	for _, m := range hrefRe.FindAllStringSubmatch(p.body, -1) {
		ref, err := p.url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(ref.Path, "/ops/console/"), "the confirmation links to %s, outside the console", ref)
	}
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestInboxPageCountsMarkersAndShowsTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.applied(t, "points-award", 3)
	b.applied(t, "sms", 2)
	b.conflict(t, "points-award", "order:1:paid")
	deadTask := b.dead(t, b.tasks, "sms gateway: 503", orderEvent("SendSMS", "1", ""))[0]
	pending := b.enqueue(t, b.tob, b.tasks.DB, orderEvent("SendSMS", "2", ""))[0]
	c := b.client(t)

	p := c.get("inbox/points")
	eq(t, http.StatusOK, p)
	row := func(p page, consumer string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<tr data-consumer="` + consumer + `">(.*?)</tr>`).FindStringSubmatch(p.body)
		require.NotNil(t, m, "a row for %s", consumer)
		return regexp.MustCompile(`\s+`).ReplaceAllString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], " "), " ")
	}
	// Per window: applied, stale; then open conflicts.
	require.Equal(t, " points-award 4 0 4 0 1 ", row(p, "points-award"), "three applied and the conflict's stored operation")
	require.Equal(t, " sms 2 0 2 0 0 ", row(p, "sms"))
	require.NotContains(t, p.body, "Markers now")
	mustContain(t, p, `ferry_inbox_operations_total{outcome="duplicate"}`, "pending-tasks", pending)
	require.NotContains(t, p.body, `id=`+deadTask, "DEAD tasks are not pending")

	p = c.get("inbox/points?count=1")
	eq(t, http.StatusOK, p)
	require.Equal(t, " points-award 4 0 4 0 1 4 ", row(p, "points-award"))
	mustContain(t, p, "Markers of every consumer: <strong>6</strong>")

	// A DEAD task is retried like a DEAD event.
	tok := c.token("tasks/points/dead")
	p = c.post("tasks/points/retry", form(tok, "id", deadTask))
	eq(t, http.StatusOK, p)
	mustContain(t, p, "1 of 1 selected task changed")
	require.Equal(t, ferrytype.StatusNew, b.row(t, b.tasks.Driver, deadTask).Status)
	require.NotEmpty(t, b.logs.Lines("console action", "action=retry", "table_kind=tasks", "table=points", "changed=1"))
}

func TestDeadListPagesAndFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite", func(c *ferryconsole.Config) { c.PageSize = 2 })
	b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", "orders.paid"), orderEvent("OrderPaid", "2", "orders.paid"),
		orderEvent("OrderShipped", "3", "orders.shipped"), orderEvent("OrderPaid", "4", "orders.paid"),
		orderEvent("OrderPaid", "5", "orders.paid"))
	c := b.client(t)
	rows := regexp.MustCompile(`<td>order:(\d+)#1</td>`)
	aggs := func(p page) string {
		var out []string
		for _, m := range rows.FindAllStringSubmatch(p.body, -1) {
			out = append(out, m[1])
		}
		return strings.Join(out, ",")
	}
	p := c.get("outbox/orders/dead")
	eq(t, http.StatusOK, p)
	require.Equal(t, "1,2", aggs(p))
	mustContain(t, p, "Events 1–2, oldest first", `href="dead?page=2" rel="next"`)
	require.NotContains(t, p.body, `rel="prev"`)
	p = c.get("outbox/orders/dead?page=3")
	require.Equal(t, "5", aggs(p))
	mustContain(t, p, "Events 5–5", `href="dead?page=2" rel="prev"`)
	require.NotContains(t, p.body, `rel="next"`)

	p = c.get("outbox/orders/dead?destination=orders.paid")
	require.Equal(t, "1,2", aggs(p))
	mustContain(t, p, `href="dead?destination=orders.paid&amp;page=2" rel="next"`)
	p = c.get("outbox/orders/dead?destination=orders.paid&page=2")
	require.Equal(t, "4,5", aggs(p))
	require.Equal(t, "3", aggs(c.get("outbox/orders/dead?type=OrderShipped")))
	require.Equal(t, "4", aggs(c.get("outbox/orders/dead?aggregate=order:4")))
	require.Equal(t, "1,2", aggs(c.get("outbox/orders/dead?since=1h")))
	p = c.get("outbox/orders/dead?until=1h")
	require.Equal(t, "", aggs(p), "none is an hour old")
	mustContain(t, p, "No DEAD event matches this filter")
}

// A group's action acts on every event of the group, however many, and
// the result has the true totals; the discarded events keep who, why and
// when, and come back to DEAD on restore.
func TestGroupsDiscardedAndRestore(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	const many = 1203 // more than a listing, a batch, and the old bulk cap of a run
	events := make([]ferry.Event, many)
	for i := range events {
		events[i] = orderEvent("OrderPaid", strconv.Itoa(i+1), "orders.paid")
	}
	paid := b.dead(t, b.st, `nats: no stream matches subject "orders.paid"`, events...)
	big := b.dead(t, b.st, "payload 1048577 bytes > max 1048576", orderEvent("OrderShipped", "1", "orders.shipped"),
		orderEvent("OrderShipped", "2", "orders.shipped"))
	timeout := b.dead(t, b.st, "nats: timeout after 3s", orderEvent("OrderPaid", "9999", "orders.paid"))[0]
	c := b.client(t)

	p := c.get("outbox/orders/groups")
	eq(t, http.StatusOK, p)
	mustContain(t, p, fmt.Sprintf("%d DEAD events in 3 groups", many+3), `<span class="count">1203</span> to <code>orders.paid</code>`,
		`nats: no stream matches subject &#34;&lt;s&gt;&#34;`)
	p = c.get("outbox/orders/groups?error=payload")
	mustContain(t, p, "2 DEAD events match in 1 group")
	p = c.get("outbox/orders/dead?error=TIMEOUT")
	mustContain(t, p, timeout)
	require.NotContains(t, p.body, paid[0])
	for _, bad := range []struct{ q, says string }{
		{"error=" + strings.Repeat("e", 1001), "error text is longer than 1000 bytes"},
		{"class=attempt+20", "is not an error class"},
		{"error=a%00b", "control characters"},
	} {
		p := c.get("outbox/orders/groups?" + bad.q)
		eq(t, http.StatusBadRequest, p)
		mustContain(t, p, bad.says)
	}

	tok := c.token("outbox/orders/groups")
	class := ferryadmin.ErrorClass(`nats: no stream matches subject "orders.paid"`)
	p = c.post("outbox/orders/retry-group", form(tok, "class", class))
	eq(t, http.StatusBadRequest, p)
	mustContain(t, p, "a destination and an error class are required")
	confirm, p := c.group("retry", form("", "destination", "orders.paid", "class", class))
	mustContain(t, confirm, `id="confirm-count">1203 events match now`, paid[0])
	eq(t, http.StatusOK, p)
	mustContain(t, p, "1203 of 1203 matching events changed: back to NEW", "1203 matched when the run started (1203 confirmed); every one that was DEAD when the count was shown was acted on")
	for _, id := range []string{paid[0], paid[many/2], paid[many-1]} {
		require.Equal(t, ferrytype.StatusNew, b.row(t, b.admin, id).Status)
	}
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, timeout).Status, "same destination, another class")
	n, err := ferryadmin.CountDead(b.ctx, b.admin, ferryadmin.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.NotEmpty(t, b.logs.Lines("console action", `action="retry group"`, "matched=1203", "changed=1203", "operator=alice"))

	p = c.post("outbox/orders/discard-group", form(tok, "destination", "orders.shipped",
		"class", ferryadmin.ErrorClass("payload 1048577 bytes > max 1048576")))
	eq(t, http.StatusBadRequest, p)
	mustContain(t, p, "a reason is required")
	confirm, p = c.group("discard", form("", "destination", "orders.shipped",
		"class", ferryadmin.ErrorClass("payload 1048577 bytes > max 1048576"), "reason", "too big to ever pass, INC-5"))
	mustContain(t, confirm, `id="confirm-count">2 events match now`, "too big to ever pass, INC-5")
	eq(t, http.StatusOK, p)
	mustContain(t, p, "2 of 2 matching events changed: DISCARDED")

	p = c.get("outbox/orders/discarded")
	eq(t, http.StatusOK, p)
	mustContain(t, p, big[0], big[1], "too big to ever pass, INC-5 (by alice at ")
	tok = c.token("outbox/orders/discarded")
	p = c.post("outbox/orders/restore", form(tok, "id", big[0], "id", timeout))
	eq(t, http.StatusOK, p)
	mustContain(t, p, "1 of 2 selected events changed: back to DEAD", "1 selected was not DISCARDED any more")
	r := b.row(t, b.admin, big[0])
	require.Equal(t, ferrytype.StatusDead, r.Status)
	require.Contains(t, r.DiscardReason, "too big to ever pass, INC-5 (by alice at ")
	require.Contains(t, r.DiscardReason, "restored by alice at ")
	require.Equal(t, ferrytype.StatusDiscarded, b.row(t, b.admin, big[1]).Status)
	require.NotEmpty(t, b.logs.Lines("console action", "action=restore", "selected=2", "changed=1"))
}

// The overview lists the relays of each outbox from their heartbeats.
func TestOverviewShowsTheRelays(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite", func(c *ferryconsole.Config) { c.RelayStaleAfter = time.Hour })
	c := b.client(t)
	p := c.get("")
	eq(t, http.StatusOK, p)
	mustContain(t, p, "No relay has recorded itself on this table")
	reg := b.admin
	require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "relay-a", Host: "relay-host", PID: 7, Version: "v1.4.0",
		Lanes: 2, InFlight: 18, BrokerConnected: true, Broker: "nats://mq:4222", Sent: 90210, SentLastMinute: 3021}))
	require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "relay-b", Host: "other", PID: 8, Version: "v1.4.0",
		Lanes: 1, BrokerError: "dial tcp: connection refused", SentLastMinute: 500}))
	p = c.get("")
	eq(t, http.StatusOK, p)
	row := regexp.MustCompile(`(?s)<tr data-relay="relay-a">(.*?)</tr>`).FindStringSubmatch(p.body)
	require.NotNil(t, row)
	mustContain(t, p, "3521 events sent in about the last minute by the relays alive")
	for _, s := range []string{"alive", "relay-host", "pid 7", "v1.4.0", ">2<", ">18<", ">3021<", "90210 since it started", "nats://mq:4222", "connected"} {
		require.Contains(t, row[1], s)
	}
	row = regexp.MustCompile(`(?s)<tr data-relay="relay-b">(.*?)</tr>`).FindStringSubmatch(p.body)
	require.NotNil(t, row)
	require.Contains(t, row[1], "not connected")
}

// An outbox whose report has something for a person (here: publishing
// fails, though nothing is DEAD or old yet) is never badged healthy.
func TestOverviewNeverCallsATableWithAttentionLinesHealthy(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	c := b.client(t)
	p := c.get("")
	eq(t, http.StatusOK, p)
	mustContain(t, p, `<span class="badge ok">healthy</span>`)

	ids := b.enqueue(t, b.ob, b.st.DB, orderEvent("OrderPaid", "42", "orders.paid"))
	tok := testsvc.Name("tok-")
	msgs, err := b.st.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 1, Token: tok, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, err = b.admin.MarkFailed(b.ctx, []ferrystore.Failure{{ID: ids[0], Token: tok, Delay: time.Hour,
		Error: "attempt 1: returned: unroutable: no JetStream stream is bound to subject \"orders.paid\""}})
	require.NoError(t, err)
	p = c.get("")
	eq(t, http.StatusOK, p)
	section := regexp.MustCompile(`(?s)<section class="card" id="outbox-orders">(.*?)</section>`).FindStringSubmatch(p.body)
	require.NotNil(t, section, snippet(p.body))
	require.Contains(t, section[1], "publishing fails")
	require.Contains(t, section[1], "needs attention")
	require.NotContains(t, section[1], ">healthy<")
}

// The overview's DEAD-by-destination column is the database's count,
// exact past the 999 events a listing reads (it used to count the oldest
// 999 only: 697 shown where 70,009 were DEAD).
func TestOverviewCountsEveryDeadEventByDestination(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			testsvc.InsertDead(t, b.st, 3001, testsvc.DeadKind{Destination: "orders.paid", Error: "unroutable {n}"},
				testsvc.DeadKind{Destination: "orders.shipped", Error: "rejected {n}"}, testsvc.DeadKind{Destination: "orders.paid", Error: "x"})
			p := b.client(t).get("")
			eq(t, http.StatusOK, p)
			for dest, want := range map[string]string{"orders.paid": "2001", "orders.shipped": "1000"} {
				row := regexp.MustCompile(`(?s)<tr><td><code>` + regexp.QuoteMeta(dest) + `</code></td>(.*?)</tr>`).FindStringSubmatch(p.body)
				require.NotNil(t, row, "%s: %s", dest, snippet(p.body))
				require.Contains(t, row[1], ">"+want+"</a>", "%s's DEAD count", dest)
			}
			require.NotContains(t, p.body, "DEAD by destination", "the counts are exact: no note")
		})
	}
}

// An action's POST is answered with a redirect to its result, and its form
// acts once: reloading the result shows it again and acts on nothing, and
// submitting the form again (the browser's "resend") is refused, even when
// new events died in the meantime. A group action acts only once
// confirmed, and on at most the count its confirmation page showed.
func TestActionsActOnceAndGroupsAreConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	c := b.client(t)
	first := b.dead(t, b.st, "boom 1", orderEvent("OrderPaid", "1", "orders.paid"))

	tok := c.token("outbox/orders/dead")
	raw := c.postRaw("outbox/orders/retry", form(tok, "id", first[0]))
	eq(t, http.StatusSeeOther, raw)
	loc := raw.header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "result?id="), loc)
	require.Equal(t, ferrytype.StatusNew, b.row(t, b.admin, first[0]).Status)
	for range 2 { // the result, and its reload
		p := c.get("outbox/orders/" + loc)
		eq(t, http.StatusOK, p)
		mustContain(t, p, "1 of 1 selected event changed: back to NEW")
	}
	other := &client{t: t, b: b, user: testUser, pass: testPassword, hdr: http.Header{}}
	eq(t, http.StatusOK, other.get("outbox/orders/"+loc)) // the same operator on another client sees it
	eq(t, http.StatusNotFound, c.get("outbox/orders/result?id=0123456789abcdef01234567"))
	eq(t, http.StatusNotFound, c.get("tasks/points/"+loc)) // a result shows under its own table only

	// The event dies again; the old form is sent again: refused, and the
	// event stays DEAD.
	b.redead(t, b.st, first[0], "boom 2")
	p := c.post("outbox/orders/retry", form(tok, "id", first[0]))
	eq(t, http.StatusConflict, p)
	mustContain(t, p, "This form was submitted already")
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, first[0]).Status)
	require.NotEmpty(t, b.logs.Lines("console action refused: its form was submitted already", "operator=alice"))

	// A bad input does not spend the form: fixed, it acts.
	tok = c.token("outbox/orders/dead")
	eq(t, http.StatusBadRequest, c.post("outbox/orders/discard", form(tok, "id", first[0])))
	p = c.post("outbox/orders/discard", form(tok, "id", first[0], "reason", "INC-7"))
	eq(t, http.StatusOK, p)
	mustContain(t, p, "1 of 1 selected event changed: DISCARDED")

	// A group: the first POST changes nothing and shows the count; the
	// confirmation acts on the events of the group that were DEAD when
	// that page was shown. An event that dies after it is left for
	// another look, even one older than all of them: it was pending
	// when the group was counted.
	const timeout = "nats: timeout after 3s"
	late := b.enqueue(t, b.ob, b.st.DB, orderEvent("OrderPaid", "9", "orders.paid"))[0]
	group := b.enqueue(t, b.ob, b.st.DB, orderEvent("OrderPaid", "10", "orders.paid"),
		orderEvent("OrderPaid", "11", "orders.paid"), orderEvent("OrderPaid", "12", "orders.paid"))
	claimTok := testsvc.Name("tok-")
	claimed, err := b.st.Driver.Claim(b.ctx, ferrystore.ClaimParams{Limit: 4, Token: claimTok, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	var fails []ferrystore.Failure
	for _, id := range group {
		fails = append(fails, ferrystore.Failure{ID: id, Token: claimTok, Dead: true, Error: timeout})
	}
	_, err = b.st.Driver.MarkFailed(b.ctx, fails)
	require.NoError(t, err)
	_, err = b.st.Driver.Release(b.ctx, claimTok, []string{late}) // pending again
	require.NoError(t, err)

	f := form(c.token("outbox/orders/groups"), "destination", "orders.paid", "class", ferryadmin.ErrorClass(timeout),
		"reason", "broker gone, INC-8")
	confirm := c.post("outbox/orders/discard-group", f)
	eq(t, http.StatusOK, confirm)
	mustContain(t, confirm, `id="confirm-count">3 events match now`, group[0], "broker gone, INC-8", "Discard these 3",
		"were DEAD when this page was shown")
	for _, id := range group {
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status, "the preview changes nothing")
	}
	shown, err := time.Parse(time.RFC3339Nano, confirmDiedByRe.FindStringSubmatch(confirm.body)[1])
	require.NoError(t, err, "the confirmation carries the instant it counted at")
	for { // the database clock passes that instant; then the oldest dies
		now, err := b.admin.Now(b.ctx)
		require.NoError(t, err)
		if now.After(shown) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.redead(t, b.st, late, timeout)
	f.Set("csrf", tokenRe.FindStringSubmatch(confirm.body)[1])
	f.Set("confirm", "1")
	f.Set("max", confirmMaxRe.FindStringSubmatch(confirm.body)[1])
	f.Set("died_by", confirmDiedByRe.FindStringSubmatch(confirm.body)[1])
	p = c.post("outbox/orders/discard-group", f)
	eq(t, http.StatusOK, p)
	mustContain(t, p, "3 of 4 matching events changed: DISCARDED", "(3 confirmed)",
		"every one that was DEAD when the count was shown was acted on", `id="later">1 died after the count was shown`)
	for _, id := range group {
		require.Equal(t, ferrytype.StatusDiscarded, b.row(t, b.admin, id).Status)
	}
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, late).Status, "died after the preview: left alone")
	eq(t, http.StatusConflict, c.post("outbox/orders/discard-group", f)) // the confirmation acts once
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, late).Status)
	f.Set("csrf", c.token("outbox/orders/groups"))
	f.Set("max", "0")
	eq(t, http.StatusBadRequest, c.post("outbox/orders/discard-group", f)) // a confirmation without its count
	f.Set("max", "3")
	f.Del("died_by")
	eq(t, http.StatusBadRequest, c.post("outbox/orders/discard-group", f)) // or without its instant
	require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, late).Status)
}

// With a users file, each operator acts under their own name: the audit
// line and a discard's record say who.
func TestEachOperatorOfAUsersFileIsNamed(t *testing.T) {
	t.Parallel()
	var lines string
	for _, u := range []string{"alice", "bob"} {
		h, err := bcrypt.GenerateFromPassword([]byte("pw-"+u), bcrypt.MinCost)
		require.NoError(t, err)
		lines += u + ":" + string(h) + "\n"
	}
	path := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(path, []byte(lines), 0o600))
	auth, err := ferryconsole.PasswordFile(path)
	require.NoError(t, err)
	b := setup(t, "sqlite", func(c *ferryconsole.Config) { c.Authenticate = auth })
	ids := b.dead(t, b.st, "boom", orderEvent("OrderPaid", "1", ""), orderEvent("OrderPaid", "2", ""))
	for i, u := range []string{"alice", "bob"} {
		c := &client{t: t, b: b, user: u, pass: "pw-" + u, hdr: http.Header{}}
		p := c.post("outbox/orders/discard", form(c.token("outbox/orders/dead"), "id", ids[i], "reason", "INC-"+u))
		eq(t, http.StatusOK, p)
		require.NotEmpty(t, b.logs.Lines("console action", "operator="+u, "action=discard", "changed=1"))
		require.Contains(t, b.row(t, b.admin, ids[i]).DiscardReason, "INC-"+u+" (by "+u+" at ")
	}
	eq(t, http.StatusUnauthorized, (&client{t: t, b: b, user: "bob", pass: "pw-alice", hdr: http.Header{}}).get(""))
}

// The overview shows the table's log relay from its checkpoint row: the
// relay reading, its checkpoint; and "no reader" once the lease is given
// up.
func TestOverviewShowsTheLogRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	c := b.client(t)
	p := c.get("")
	eq(t, http.StatusOK, p, b.logs)
	require.NotContains(t, p.body, `id="log-relay"`, "no log relay ever read this table")

	lc := b.st.Driver
	_, held, err := lc.AcquireLease(b.ctx, ferrystore.LeaseLog, "relay-a", "binlog db-1:3306", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	saved, err := lc.RenewLease(b.ctx, ferrystore.LeaseLog, "relay-a", "binlog.000042:4711", time.Minute)
	require.NoError(t, err)
	require.True(t, saved)
	p = c.get("")
	eq(t, http.StatusOK, p, b.logs)
	mustContain(t, p, `id="log-relay"`)
	mustContain(t, p, "binlog db-1:3306")
	mustContain(t, p, "read by <code>relay-a</code>")
	mustContain(t, p, "binlog.000042:4711")
	mustContain(t, p, "no standby")

	// relay-a reads, relay-b stands by, relay-c polls the table.
	reg := b.st.Driver
	for id, source := range map[string]string{"relay-a": ferrystore.RelaySourceLog, "relay-b": ferrystore.RelaySourceLog,
		"relay-c": ferrystore.RelaySourceTable} {
		require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: id, Source: source}))
	}
	p = c.get("")
	eq(t, http.StatusOK, p, b.logs)
	mustContain(t, p, "standing by: <code>relay-b</code>.")
	require.Regexp(t, `<code>relay-a</code>[^\n]*log reader`, p.body)
	require.Regexp(t, `<code>relay-b</code>[^\n]*log standby`, p.body)
	require.NotRegexp(t, `<code>relay-c</code>[^\n]*log (reader|standby)`, p.body)

	require.NoError(t, lc.ReleaseLease(b.ctx, ferrystore.LeaseLog, "relay-a"))
	p = c.get("")
	mustContain(t, p, "no reader")
}
