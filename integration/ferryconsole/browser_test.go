package ferryconsole_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// chromiumPath is Debian's Chromium, which the browser tests drive.
const chromiumPath = "/usr/bin/chromium"

// envScreenshots names a directory where TestBrowser writes PNG
// screenshots of the main pages (docs/console/ holds them).
const envScreenshots = "FERRY_CONSOLE_SCREENSHOTS"

// browser is one headless Chromium for the whole test binary; each test
// opens tabs in it.
var browser struct {
	once    sync.Once
	ctx     context.Context
	cancel  func()
	dataDir string
	err     error
	// tls is the certificate the browser trusts, and no other: its key's
	// hash is pinned at start (--ignore-certificate-errors-spki-list).
	tls tls.Certificate
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	if browser.dataDir != "" {
		os.RemoveAll(browser.dataDir)
	}
	os.Exit(code)
}

func startBrowser(t *testing.T) {
	browser.tls = testsvc.NewCerts(t).Server
	leaf, err := x509.ParseCertificate(browser.tls.Certificate[0])
	require.NoError(t, err)
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	if _, err := os.Stat(chromiumPath); err != nil {
		browser.err = fmt.Errorf("%s is missing (apt-get install chromium, or scripts/services.sh): %w", chromiumPath, err)
		return
	}
	dir, err := os.MkdirTemp("", "ferryconsole-chromium-")
	if err != nil {
		browser.err = err
		return
	}
	browser.dataDir = dir
	// Without the background-networking flags Chromium dials out at start,
	// and on a closed network its connections are refused.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 800),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no timeout
		cancelCtx()
		cancelAlloc()
		browser.err = fmt.Errorf("start %s: %w", chromiumPath, err)
		return
	}
	browser.ctx = ctx
	browser.cancel = func() { cancelCtx(); cancelAlloc() }
}

// tab opens a tab of the shared browser, closed when t ends; its actions
// are bounded by two minutes. With user set, every request of the tab
// carries basic credentials.
func tab(t *testing.T, user, password string) context.Context {
	t.Helper()
	browser.once.Do(func() { startBrowser(t) })
	if browser.err != nil {
		msg := "browser tests need Chromium: " + browser.err.Error()
		if testsvc.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx)) // opens the tab
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(tcancel)
	require.NoError(t, chromedp.Do(tctx, chromedp.EmulateViewport(1280, 800)))
	_, err := chromedp.Call(tctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	if user != "" {
		auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
		_, err = chromedp.Call(tctx, network.SetExtraHTTPHeaders,
			network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		require.NoError(t, err)
	}
	return tctx
}

// open navigates to u and returns the response's status.
func open(t *testing.T, ctx context.Context, u string) int64 {
	t.Helper()
	res, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
	require.NoError(t, err, "open %s", u)
	return res.Status
}

// openRefused navigates to u, which the browser does not show (it ends
// the load of a page that asks for credentials it cannot give), and
// returns the status the console answered.
func openRefused(t *testing.T, ctx context.Context, u string) int64 {
	t.Helper()
	responses := chromedp.Events(ctx, network.ResponseReceived)
	_, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
	require.ErrorContains(t, err, "ERR_INVALID_AUTH_CREDENTIALS", "open %s", u)
	for ev, err := range responses {
		require.NoError(t, err)
		if ev.Type == network.ResourceTypeDocument && ev.Response.URL == u {
			return ev.Response.Status
		}
	}
	t.Fatalf("no response to %s", u)
	return 0
}

// submit clicks the element sel (a submit button) and returns the status
// of the page it loads.
func submit(t *testing.T, ctx context.Context, sel string) int64 {
	t.Helper()
	res, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	require.NoError(t, err, "click %s", sel)
	return res.Status
}

// js evaluates expr in the page.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// text returns the text of the first element matching the CSS selector,
// "" when there is none.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	q, _ := json.Marshal(sel)
	return js[string](t, ctx, `(document.querySelector(`+string(q)+`) || {textContent: ""}).textContent.trim()`)
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	q, _ := json.Marshal(sel)
	return js[int](t, ctx, `document.querySelectorAll(`+string(q)+`).length`)
}

// screenshot writes the viewport as name.png to the screenshot directory,
// when one is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644))
}

// businessTable creates a table of paid orders 1 to n, paid five minutes
// ago, dropped when t ends.
func (b *bundle) businessTable(t *testing.T, n int) string {
	t.Helper()
	name := testsvc.Name("paid_")
	var create, ago string
	switch b.kind {
	case "mysql":
		create, ago = "CREATE TABLE "+name+" (order_id BIGINT PRIMARY KEY, paid_at DATETIME(6) NOT NULL)", "NOW(6) - INTERVAL 5 MINUTE"
	case "postgres":
		create, ago = "CREATE TABLE "+name+" (order_id BIGINT PRIMARY KEY, paid_at timestamptz NOT NULL)", "now() - interval '5 minutes'"
	default:
		create, ago = "CREATE TABLE "+name+" (order_id INTEGER PRIMARY KEY, paid_at TEXT NOT NULL)",
			"strftime('%Y-%m-%d %H:%M:%f', 'now', '-5 minutes')"
	}
	_, err := b.st.DB.Exec(create)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.st.DB.Exec("DROP TABLE " + name) })
	for i := 1; i <= n; i++ {
		_, err := b.st.DB.Exec(fmt.Sprintf("INSERT INTO %s VALUES (%d, %s)", name, i, ago))
		require.NoError(t, err)
	}
	return name
}

// TestBrowser drives the console in Chromium against MariaDB and
// PostgreSQL: every page loads, actions change the database, and what must
// be refused is.
func TestBrowser(t *testing.T) {
	testsvc.Slow(t, "a browser test")
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) { testBrowser(t, kind) })
	}
}

func testBrowser(t *testing.T, kind string) {
	secret := []byte(strings.Repeat("b", 32))
	b := setup(t, kind, func(c *ferryconsole.Config) { c.Secret = secret; c.RelayStaleAfter = time.Hour })
	// The outbox: three OrderPaid events a missing stream killed, an
	// oversized OrderShipped, then events still pending, one of them held
	// back behind a DEAD event of its order.
	paid := b.dead(t, b.st, "nats: no stream matches subject \"orders.paid\"\nafter 20 attempts",
		orderEvent("OrderPaid", "1", "orders.paid"), orderEvent("OrderPaid", "2", "orders.paid"),
		orderEvent("OrderPaid", "3", "orders.paid"))
	big := b.dead(t, b.st, "nats: maximum payload exceeded (1048576 bytes)", orderEvent("OrderShipped", "4", "orders.shipped"))[0]
	// Four refunds a timeout killed, each after its own delay: one group.
	var refunds []string
	for i := 1; i <= 4; i++ {
		refunds = append(refunds, b.dead(t, b.st, fmt.Sprintf("nats: timeout after %dms waiting for the stream's ack", 250*i),
			orderEvent("OrderRefunded", strconv.Itoa(10+i), "orders.refunded"))...)
	}
	b.enqueue(t, b.ob, b.st.DB, orderEvent("OrderShipped", "1", "orders.shipped"), orderEvent("OrderPaid", "5", "orders.paid"),
		orderEvent("OrderPaid", "6", "orders.paid"))
	// Tasks: an SMS the gateway refused, one pending.
	b.dead(t, b.tasks, "sms gateway: 503 Service Unavailable", orderEvent("SendSMS", "1", ""))
	b.enqueue(t, b.tob, b.tasks.DB, orderEvent("SendSMS", "5", ""))
	// The inbox: markers of two consumers, a conflict.
	b.applied(t, "points-award", 3)
	b.applied(t, "sms", 2)
	cid := b.conflict(t, "points-award", "order:1:paid")
	// Two relays beat: one alive, one whose broker is down.
	reg := b.admin
	require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "relay-a-7-3f9c0e1d", Host: "relay-a", PID: 7, Version: "v1.4.0",
		Lanes: 2, InFlight: 18, BrokerConnected: true, Broker: "nats://mq:4222", Sent: 1284730, SentLastMinute: 3120}))
	require.NoError(t, reg.Beat(b.ctx, ferrystore.RelayBeat{ID: "relay-b-9-0b81d2aa", Host: "relay-b", PID: 9, Version: "v1.4.0",
		Lanes: 2, Broker: "nats://mq:4222", BrokerError: "nats: no servers available for connection", Sent: 3950, SentLastMinute: 0}))
	// Reconcile: orders 1 to 7 paid; 4 and 7 have no OrderPaid event.
	table := b.businessTable(t, 7)
	h, err := ferryconsole.New(withReconcile(b.cfg, ferryadmin.ReconcileOptions{
		Checks: []ferryadmin.Check{{Name: "orders-paid", Table: table, KeyColumn: "order_id", TimeColumn: "paid_at",
			AggregateType: "order", EventType: "OrderPaid"}},
		Window: time.Hour, Grace: time.Minute}))
	require.NoError(t, err)
	srv := httptest.NewServer(http.StripPrefix("/console", h))
	defer srv.Close()
	base := srv.URL + "/console/"
	shots := kind == "postgres"
	shot := func(ctx context.Context, name string) {
		if shots {
			screenshot(t, ctx, name)
		}
	}

	t.Run("EveryPageLoads", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base))
		require.Equal(t, "8", text(t, ctx, `#outbox-orders [data-stat="dead"]`))
		require.Equal(t, "3", text(t, ctx, `#outbox-orders [data-stat="pending"]`))
		require.Contains(t, text(t, ctx, "#outbox-orders .attention"), "8 DEAD events wait for a decision")
		require.Contains(t, text(t, ctx, `tr[data-relay="relay-a-7-3f9c0e1d"]`), "alive")
		require.Contains(t, text(t, ctx, `tr[data-relay="relay-a-7-3f9c0e1d"]`), "v1.4.0")
		require.Contains(t, text(t, ctx, `tr[data-relay="relay-b-9-0b81d2aa"]`), "not connected")
		require.Equal(t, "1", text(t, ctx, `#tasks-points [data-stat="dead"]`))
		require.Contains(t, text(t, ctx, "#inboxes"), "points-award: 1")
		shot(ctx, "overview")

		// The menu's links, followed in the browser.
		require.EqualValues(t, 200, submit(t, ctx, `header nav a[href$="outbox/orders/dead"]`))
		require.Equal(t, 8, count(t, ctx, "#dead-events tbody tr"))
		shot(ctx, "dead")
		require.EqualValues(t, 200, submit(t, ctx, "#tab-groups"))
		require.Equal(t, "8 DEAD events in 3 groups.", text(t, ctx, "#total"))
		require.Equal(t, "4", text(t, ctx, `section[data-destination="orders.refunded"] .count`))
		shot(ctx, "groups")
		require.EqualValues(t, 200, submit(t, ctx, "#tab-events"))
		require.EqualValues(t, 200, submit(t, ctx, `#dead-events a[href*="`+paid[0]+`"]`))
		require.Equal(t, "DEAD", text(t, ctx, "#event-status"))
		require.Contains(t, text(t, ctx, "#payload"), `"order_id": 1`)
		require.Contains(t, text(t, ctx, "#last-error"), "after 20 attempts", "the full last error, not one line")
		require.Equal(t, 1, count(t, ctx, "#held-back tbody tr"), "order 1's OrderShipped waits behind it")
		shot(ctx, "event")
		require.EqualValues(t, 200, submit(t, ctx, `header nav a[href$="inbox/points"]`))
		require.Equal(t, "4", text(t, ctx, `tr[data-consumer="points-award"] td[data-applied="1h"]`),
			"three applied, and the operation the conflict's stored version is")
		require.Equal(t, "2", text(t, ctx, `tr[data-consumer="sms"] td[data-applied="24h"]`))
		require.Equal(t, 1, count(t, ctx, "#pending-tasks tbody tr"))
		shot(ctx, "inbox")
		require.EqualValues(t, 200, submit(t, ctx, `header nav a[href$="conflicts"]`))
		require.EqualValues(t, 200, submit(t, ctx, `#conflict-dbs a[href$="inbox/points/conflicts"]`))
		require.Equal(t, 1, count(t, ctx, "#conflicts tbody tr"))
		require.EqualValues(t, 200, submit(t, ctx, fmt.Sprintf(`#conflicts a[href$="conflicts/%d"]`, cid)))
		require.Equal(t, "OPEN", text(t, ctx, "#conflict-status"))
		require.Contains(t, text(t, ctx, "#compare tr.differs"), "amount")
		require.Contains(t, text(t, ctx, "#marker"), "the stored version stands")
		shot(ctx, "conflict")
		require.EqualValues(t, 200, submit(t, ctx, `header nav a[href$="reconcile"]`))
		require.EqualValues(t, 200, submit(t, ctx, "#run-orders"))
		require.Contains(t, text(t, ctx, "#result"), "2 findings")
		require.Equal(t, "4 7", js[string](t, ctx, `[...document.querySelectorAll("#check-orders-paid tbody td:first-child")].map(e => e.textContent).join(" ")`),
			"order 4 has an OrderShipped event only, order 7 none")
		shot(ctx, "reconcile")
	})

	t.Run("RetryASelection", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/dead"))
		// Filter in the form, as a person does.
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#filter input[name="destination"]`), "orders.paid")))
		require.EqualValues(t, 200, submit(t, ctx, `#filter button[type="submit"]`))
		require.Equal(t, 3, count(t, ctx, "#dead-events tbody tr"))
		// The page's script selects all; CSP lets it run.
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".select-all"))))
		require.Equal(t, 3, count(t, ctx, `input[name="id"]:checked`))
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".select-all"))))
		require.Equal(t, 0, count(t, ctx, `input[name="id"]:checked`))
		for _, id := range paid[:2] {
			require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`input[name="id"][value="`+id+`"]`))))
		}
		require.EqualValues(t, 200, submit(t, ctx, "#retry-selected"))
		require.Equal(t, "2 of 2 selected events changed: back to NEW, published again on the relay's next poll.",
			text(t, ctx, "#result"))
		for _, id := range paid[:2] {
			r := b.row(t, b.admin, id)
			require.Equal(t, ferrytype.StatusNew, r.Status)
			require.Zero(t, r.Attempt, "a retry resets the attempts")
		}
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, paid[2]).Status, "not selected, left alone")
		require.NotEmpty(t, b.logs.Lines("console action", "operator="+testUser, "action=retry", "selected=2", "changed=2"))
	})

	t.Run("DiscardWithAReason", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/dead?destination=orders.paid"))
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`input[name="id"][value="`+paid[2]+`"]`))))
		// Without a reason the browser does not send the form.
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#discard-selected"))))
		require.True(t, js[bool](t, ctx, `!document.querySelector("#discard-reason").validity.valid`))
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, paid[2]).Status)
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#discard-reason"), "test order, INC-7")))
		require.EqualValues(t, 200, submit(t, ctx, "#discard-selected"))
		require.Equal(t, "1 of 1 selected event changed: DISCARDED, never published.", text(t, ctx, "#result"))
		r := b.row(t, b.admin, paid[2])
		require.Equal(t, ferrytype.StatusDiscarded, r.Status)
		require.True(t, strings.HasPrefix(r.DiscardReason, "test order, INC-7 (by "+testUser+" at "), r.DiscardReason)
		require.NotEmpty(t, b.logs.Lines("console action", "operator="+testUser, "action=discard", "changed=1"))
		// The event's page shows the audit.
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/event?id="+url.QueryEscape(paid[2])))
		require.Equal(t, "DISCARDED", text(t, ctx, "#event-status"))
		require.Contains(t, text(t, ctx, "#discard-reason-text"), "test order, INC-7")
	})

	t.Run("ResolveAConflict", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, fmt.Sprintf("%sinbox/points/conflicts/%d", base, cid)))
		require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`select[name="decision"]`), "keep-stored"),
			chromedp.SendKeys(chromedp.CSS(`input[name="note"]`), "producer bug, INC-9")))
		require.EqualValues(t, 200, submit(t, ctx, "#resolve-submit"))
		require.Contains(t, text(t, ctx, "#result"), "Resolved 1 conflict: keep-stored by "+testUser)
		c := b.getConflict(t, cid)
		require.Equal(t, "RESOLVED", c.Status)
		require.Equal(t, &ferrystore.Resolution{Decision: "keep-stored", By: testUser, Note: "producer bug, INC-9",
			ResolvedAt: c.Resolution.ResolvedAt}, c.Resolution)
		require.True(t, c.Marker.Found && c.Marker.EventID == c.Stored.EventID, "resolving changes no marker")
		require.NotEmpty(t, b.logs.Lines("console action", "action=resolve", "decision=keep-stored", "changed=1"))
		require.EqualValues(t, 200, submit(t, ctx, `a[href="../`+fmt.Sprint(cid)+`"]`))
		require.Equal(t, "RESOLVED", text(t, ctx, "#conflict-status"))
		require.Equal(t, 0, count(t, ctx, "#resolve"), "no form on a resolved conflict")
	})

	t.Run("RetryAGroup", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/groups"))
		// The group's events, through its link.
		require.EqualValues(t, 200, submit(t, ctx, `section[data-destination="orders.refunded"] a[href^="dead?"]`))
		require.Equal(t, 4, count(t, ctx, "#dead-events tbody tr"))
		require.NotEmpty(t, js[string](t, ctx, `document.querySelector('#filter input[name="class"]').value`))
		require.EqualValues(t, 200, submit(t, ctx, "#tab-groups"))
		// The button asks first: the count and a sample, nothing changed.
		require.EqualValues(t, 200, submit(t, ctx, `section[data-destination="orders.refunded"] .retry-group`))
		require.Contains(t, text(t, ctx, "#confirm-count"), "4 events match now")
		require.Equal(t, 4, count(t, ctx, "#confirm-sample li"))
		shot(ctx, "confirm")
		for _, id := range refunds {
			require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, id).Status, "the confirmation page changes nothing")
		}
		sent := js[string](t, ctx, `new URLSearchParams(new FormData(document.querySelector('#confirm-form'))).toString()`)
		require.EqualValues(t, 200, submit(t, ctx, "#confirm-form .confirm"))
		require.Equal(t, "4 of 4 matching events changed: back to NEW, published again on the relay's next poll.",
			text(t, ctx, "#result"))
		require.Contains(t, text(t, ctx, "#totals"), "4 matched when the run started (4 confirmed); every one that was DEAD when the count was shown was acted on")
		require.True(t, strings.Contains(js[string](t, ctx, `location.pathname + location.search`), "/result?id="),
			"the action answered with a redirect to its result")
		for _, id := range refunds {
			require.Equal(t, ferrytype.StatusNew, b.row(t, b.admin, id).Status)
		}
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, big).Status, "another group, left alone")
		// Reloading the result shows it again and does nothing; sending
		// the confirmation again is refused.
		res, err := chromedp.RunResponse(ctx, chromedp.Reload())
		require.NoError(t, err)
		require.EqualValues(t, 200, res.Status)
		require.Contains(t, text(t, ctx, "#result"), "4 of 4 matching events changed")
		status := js[int](t, ctx, fmt.Sprintf(`fetch("retry-group", {method: "POST", body: new URLSearchParams(%q)}).then(r => r.status)`, sent))
		require.Equal(t, http.StatusConflict, status)
		require.Len(t, b.logs.Lines("console action", `action="retry group"`, "matched=4", "changed=4"), 1, "the group was retried once")
	})

	t.Run("RestoreADiscardedEvent", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/discarded"))
		require.Contains(t, text(t, ctx, "#discarded-events"), "test order, INC-7 (by "+testUser+" at ")
		shot(ctx, "discarded")
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`input[name="id"][value="`+paid[2]+`"]`))))
		require.EqualValues(t, 200, submit(t, ctx, "#restore-selected"))
		require.Equal(t, "1 of 1 selected event changed: back to DEAD, for someone to retry or discard.", text(t, ctx, "#result"))
		r := b.row(t, b.admin, paid[2])
		require.Equal(t, ferrytype.StatusDead, r.Status)
		require.Contains(t, r.DiscardReason, "test order, INC-7 (by "+testUser+" at ", "the discard's record stays")
		require.Contains(t, r.DiscardReason, "restored by "+testUser+" at ")
		require.NotEmpty(t, b.logs.Lines("console action", "action=restore", "changed=1"))
	})

	t.Run("ServedOverHTTPS", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword) // starts the browser, which makes browser.tls
		tlsSrv := httptest.NewUnstartedServer(http.StripPrefix("/console", h))
		tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{browser.tls}, MinVersion: tls.VersionTLS12}
		tlsSrv.StartTLS()
		defer tlsSrv.Close()
		secure := tlsSrv.URL + "/console/"
		require.True(t, strings.HasPrefix(secure, "https://"))
		require.EqualValues(t, 200, open(t, ctx, secure))
		require.Equal(t, "https:", js[string](t, ctx, "location.protocol"))
		// An action, and the redirect to its result, stay on HTTPS.
		require.EqualValues(t, 200, open(t, ctx, secure+"outbox/orders/event?id="+url.QueryEscape(paid[2])))
		require.EqualValues(t, 200, submit(t, ctx, "#retry-one"))
		require.Contains(t, text(t, ctx, "#result"), "1 of 1 selected event changed: back to NEW")
		require.Equal(t, "https:", js[string](t, ctx, "location.protocol"))
		require.Contains(t, js[string](t, ctx, "location.pathname + location.search"), "/result?id=")
		require.Equal(t, ferrytype.StatusNew, b.row(t, b.admin, paid[2]).Status)
		require.NotEmpty(t, b.logs.Lines("console action", "operator="+testUser, "action=retry", "changed=1"))
	})

	t.Run("PostWithoutTokenIsRefused", func(t *testing.T) {
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, base+"outbox/orders/event?id="+url.QueryEscape(big)))
		require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](
			`document.querySelectorAll('input[name="csrf"]').forEach(e => e.remove())`)))
		require.EqualValues(t, http.StatusForbidden, submit(t, ctx, "#retry-one"))
		require.Contains(t, text(t, ctx, "#error-message"), "security token is missing")
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, big).Status)
	})

	t.Run("CrossOriginPostIsRefused", func(t *testing.T) {
		// Another site's page posts a complete form, token included (as if
		// it had leaked), to the console; the browser sends the operator's
		// credentials along.
		tok := (&client{t: t, b: b, user: testUser, pass: testPassword, hdr: http.Header{}}).token(base + "outbox/orders/dead")
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<form method="post" action="%s"><input type="hidden" name="csrf" value="%s">`+
				`<input type="hidden" name="id" value="%s"><button id="go" type="submit">win a prize</button></form>`,
				base+"outbox/orders/retry", tok, big)
		}))
		defer evil.Close()
		ctx := tab(t, testUser, testPassword)
		require.EqualValues(t, 200, open(t, ctx, evil.URL))
		require.EqualValues(t, http.StatusForbidden, submit(t, ctx, "#go"))
		require.Contains(t, text(t, ctx, "#error-message"), "sent from another site")
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, big).Status)
	})

	t.Run("CredentialsAreRequired", func(t *testing.T) {
		for _, c := range []struct{ user, pass string }{{"", ""}, {testUser, "wrong"}, {"mallory", testPassword}} {
			ctx := tab(t, c.user, c.pass)
			require.EqualValues(t, http.StatusUnauthorized, openRefused(t, ctx, base), "user %q", c.user)
			require.NotContains(t, text(t, ctx, "body"), "orders")
			require.EqualValues(t, http.StatusUnauthorized, openRefused(t, ctx, base+"outbox/orders/dead"))
		}
	})

	t.Run("ReadOnlyShowsNoActionsAndRefusesThem", func(t *testing.T) {
		cfg := b.cfg
		cfg.ReadOnly = true
		ro, err := ferryconsole.New(cfg)
		require.NoError(t, err)
		rsrv := httptest.NewServer(ro)
		defer rsrv.Close()
		ctx := tab(t, testUser, testPassword)
		for _, path := range []string{"/", "/outbox/orders/dead", "/outbox/orders/groups", "/outbox/orders/discarded",
			"/outbox/orders/event?id=" + url.QueryEscape(big), "/tasks/points/dead", fmt.Sprintf("/inbox/points/conflicts/%d", cid)} {
			require.EqualValues(t, 200, open(t, ctx, rsrv.URL+path))
			require.Equal(t, "read-only", text(t, ctx, "#read-only"))
			require.Zero(t, count(t, ctx, `form[method="post"], button[formaction], input[name="id"], #resolve`),
				"no action on %s", path)
		}
		// A same-origin POST with a valid token (same secret, from the
		// writable console) is refused all the same.
		tok := (&client{t: t, b: b, user: testUser, pass: testPassword, hdr: http.Header{}}).token(base + "outbox/orders/dead")
		require.EqualValues(t, 200, open(t, ctx, rsrv.URL+"/outbox/orders/dead"))
		status := js[int](t, ctx, fmt.Sprintf(`fetch("retry", {method: "POST", body: new URLSearchParams({csrf: %q, id: %q})}).then(r => r.status)`,
			tok, big))
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, ferrytype.StatusDead, b.row(t, b.admin, big).Status)
	})
}

// withReconcile returns cfg with reconcile checks on its outbox "orders".
func withReconcile(cfg ferryconsole.Config, o ferryadmin.ReconcileOptions) ferryconsole.Config {
	cfg.Reconcile = map[string]ferryadmin.ReconcileOptions{"orders": o}
	return cfg
}
