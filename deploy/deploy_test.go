package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

const (
	rulesFile     = "prometheus/ferry-alerts.yml"
	rulesTestFile = "prometheus/ferry-alerts.test.yml"
	dashboardFile = "grafana/ferry-dashboard.json"
	runbookFile   = "../docs/operations.md"
	// runbookBase is where every runbook_url points: docs/operations.md's
	// headings.
	runbookBase = "https://github.com/ferrydev/ferry/blob/main/docs/operations.md#"
)

// exported builds every ferryprom collector on a fresh registry, drives
// each once so that every series exists, and returns the names a scrape
// shows: a histogram's name with _bucket, _sum and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ctx := testsvc.Context(t, time.Minute)
	reg := prometheus.NewRegistry()

	relay, err := ferryprom.New(reg, nil)
	require.NoError(t, err)
	relay.OnClaim("outbox_event", 1, time.Millisecond)
	relay.OnPublish("outbox_event", []ferrytype.Message{{ID: "e1", Attempt: 1, CreatedAt: time.Now()}},
		[]ferrytype.PublishResult{ferrytype.Confirmed()}, time.Millisecond)
	relay.OnFenced("outbox_event", 1)
	relay.OnSweep("outbox_event", 1)
	relay.OnSettleDestinations("outbox_event", []ferry.DestinationSettled{{Destination: "orders.paid", Sent: 1, Retried: 1, Dead: 1}})
	relay.OnHeartbeat("outbox_event", errors.New("no table"))
	relay.OnRelease("outbox_event", 1)
	relay.OnLog("outbox_event", ferry.LogStats{Reading: true, Events: 1, Checkpoints: 1, Takeovers: 1, Gaps: 1,
		StreamErrors: 1, LastEvent: time.Now(), RetainedBytes: 10})

	// The outbox and conflict collectors read real (SQLite) tables.
	st := testsvc.Store(t, "sqlite")
	ob, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	tx, err := st.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = ob.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "1", Type: "OrderPaid",
		Destination: "orders.paid", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	outbox, err := ferryprom.NewOutboxCollector(reg, []ferrystore.Store{st.Driver}, &ferryprom.OutboxConfig{Destinations: 10})
	require.NoError(t, err)
	require.NoError(t, outbox.Poll(ctx))

	mt, ct, vt := testsvc.InboxTables()
	inbox, err := ferrysqlite.NewInbox(st.DB, &ferrysqlite.InboxConfig{MarkerTable: mt, ConflictTable: ct, VersionTable: vt})
	require.NoError(t, err)
	testsvc.MigratedInbox(t, inbox, func(q string) error { _, err := st.DB.Exec(q); return err }, mt, mt, ct, vt)
	conflicts, err := ferryprom.NewConflictCollector(reg, inbox, &ferryprom.ConflictConfig{Consumers: []string{"points-award"}})
	require.NoError(t, err)
	require.NoError(t, conflicts.Poll(ctx))

	require.NoError(t, ferryprom.RegisterBrokerConnected(reg, "rabbitmq", func() bool { return true }, nil))

	consumers, err := ferryprom.NewConsumerMetrics(reg, nil)
	require.NoError(t, err)
	consumers.Consumer("points-award")
	consumers.OnInbox("points-award", ferry.InboxApplied, time.Millisecond)
	d := &ferrybroker.Delivery{MessageID: "e1"}
	consumers.OnDelivered("points-award", d)
	hctx := consumers.OnHandleStart(ctx, "points-award", d)
	consumers.OnHandled(hctx, "points-award", d, nil, time.Millisecond)
	consumers.OnSettled("points-award", d, ferrybroker.Settlement{Action: ferrybroker.ActionAcked})
	require.NoError(t, consumers.Task("SendSMS", func(context.Context, ferry.Task) error { return nil })(ctx, ferry.Task{}))

	require.NoError(t, ferryprom.RegisterBuildInfo(reg, ferryprom.BuildInfo{}))

	idem, err := ferryprom.NewIdempotencyMetrics(reg, nil)
	require.NoError(t, err)
	idem.OnIdempotency("POST /orders", ferryhttp.Executed, time.Millisecond)

	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// metricRef finds ferry metric names in PromQL. A name ending in _ is a
// prefix in a regular expression ({__name__=~"ferry_relay_.+"}).
var metricRef = regexp.MustCompile(`\bferry_[a-z0-9_]+`)

// checkNames reports every name in expr that ferryprom does not export.
func checkNames(t *testing.T, names map[string]bool, where, expr string) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	for _, ref := range refs {
		if strings.HasSuffix(ref, "_") {
			found := false
			for n := range names {
				found = found || strings.HasPrefix(n, ref)
			}
			require.True(t, found, "%s: no exported metric starts with %s", where, ref)
			continue
		}
		require.True(t, names[ref], "%s: %s is not a metric ferryprom exports\n%s", where, ref, expr)
	}
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc))
	var out []rule
	for _, g := range doc.Groups {
		require.NotEmpty(t, g.Rules, "group %s", g.Name)
		out = append(out, g.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Panels     []panel         `json:"panels"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// Every ferry_* metric the alert rules and the dashboard query is one
// ferryprom exports: a renamed or removed metric fails here, not at 3 a.m.
func TestQueriedMetricsExist(t *testing.T) {
	t.Parallel()
	names := exported(t)
	used := map[string]bool{}
	for _, r := range loadRules(t) {
		checkNames(t, names, rulesFile+": "+r.Alert+r.Record, r.Expr)
		for _, ref := range metricRef.FindAllString(r.Expr, -1) {
			used[ref] = true
		}
	}
	d := loadDashboard(t)
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				checkNames(t, names, dashboardFile+": "+p.Title, tg.Expr)
				for _, ref := range metricRef.FindAllString(tg.Expr, -1) {
					used[ref] = true
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		checkNames(t, names, dashboardFile+": variable "+v.Name, string(v.Query))
	}
	// Every metric appears on the dashboard or in an alert.
	var unused []string
	for n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "ferry_") && !used[n] && !used[base] && !used[base+"_bucket"] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	require.Empty(t, unused, "exported metrics neither on the dashboard nor in an alert")
}

// Every alert says how urgent it is, what it means and where the runbook
// is, and every runbook is a heading of docs/operations.md.
func TestAlertsHaveSeveritySummaryAndRunbook(t *testing.T) {
	t.Parallel()
	anchors := markdownAnchors(t, runbookFile)
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		require.False(t, seen[r.Alert], "alert %s defined twice", r.Alert)
		seen[r.Alert] = true
		require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		u := r.Annotations["runbook_url"]
		require.True(t, strings.HasPrefix(u, runbookBase), "%s: runbook_url %q must point at docs/operations.md", r.Alert, u)
		_, err := url.Parse(u)
		require.NoError(t, err)
		anchor := strings.TrimPrefix(u, runbookBase)
		require.True(t, anchors[anchor], "%s: runbook_url anchor #%s is no heading of docs/operations.md", r.Alert, anchor)
		if r.For != "" {
			_, err := time.ParseDuration(r.For)
			require.NoError(t, err, "%s: for", r.Alert)
		}
	}
	require.NotEmpty(t, seen)
	// docs/operations.md lists every alert.
	runbooks, err := os.ReadFile(runbookFile)
	require.NoError(t, err)
	for a := range seen {
		require.Contains(t, string(runbooks), "`"+a+"`", "docs/operations.md names alert %s", a)
	}
	// The promtool tests exercise every alert.
	tests, err := os.ReadFile(rulesTestFile)
	require.NoError(t, err)
	for a := range seen {
		require.Contains(t, string(tests), "alertname: "+a, "%s tests alert %s", rulesTestFile, a)
	}
}

// The dashboard is one a current Grafana loads: a Prometheus data source
// variable every query uses, and job and instance variables.
func TestDashboardShape(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	require.NotEmpty(t, d.UID)
	require.GreaterOrEqual(t, d.SchemaVersion, 36, "schemaVersion of Grafana 9 or later")
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	require.Equal(t, "datasource", vars["datasource"])
	require.Equal(t, "query", vars["job"])
	require.Equal(t, "query", vars["instance"])
	ids := map[int]bool{}
	var rows []string
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			require.False(t, ids[p.ID], "panel id %d twice", p.ID)
			ids[p.ID] = true
			if p.Type == "row" {
				rows = append(rows, p.Title)
				walk(p.Panels)
				continue
			}
			require.NotEmpty(t, p.Targets, "panel %q", p.Title)
			require.JSONEq(t, `{"type":"prometheus","uid":"${datasource}"}`, string(p.Datasource), "panel %q", p.Title)
			for _, tg := range p.Targets {
				require.Contains(t, tg.Expr, `job=~"$job"`, "panel %q filters by job", p.Title)
				require.Contains(t, tg.Expr, `instance=~"$instance"`, "panel %q filters by instance", p.Title)
			}
		}
	}
	walk(d.Panels)
	for _, r := range []string{"Relay", "Outbox", "Inbox", "Conflicts", "Idempotency", "Consumers"} {
		require.True(t, slices.Contains(rows, r), "row %s", r)
	}
}

// With promtool on the PATH, its own checks run too (CI runs them in
// .ci/run as well).
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); CI runs it")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
		require.NoError(t, err)
	}
}

// markdownAnchors returns the anchors GitHub gives the headings of the
// Markdown file at path.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	anchors := map[string]bool{}
	counts := map[string]int{}
	fence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		slug := githubSlug(strings.TrimSpace(text))
		if n := counts[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		counts[slug]++
	}
	require.NoError(t, sc.Err())
	return anchors
}

// githubSlug is the anchor GitHub gives a heading: lower case, letters,
// digits, spaces, hyphens and underscores kept, every space a hyphen.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Dead events: the runbook":          "dead-events-the-runbook",
		"`ferry status`":                    "ferry-status",
		"Commit → confirm":                  "commit--confirm",
		"Idempotent HTTP APIs: `ferryhttp`": "idempotent-http-apis-ferryhttp",
	} {
		require.Equal(t, want, githubSlug(in))
	}
}
