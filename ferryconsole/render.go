package ferryconsole

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrytype"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// assetServer serves the embedded stylesheet and script.
func assetServer() http.Handler {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // embedded at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		files.ServeHTTP(w, r)
	})
}

// pages are the parsed templates, one per page, each with the layout.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"overview", "dead", "groups", "discarded", "event", "result", "conflicts", "conflict_list",
	"conflict", "resolved", "inbox", "reconcile", "reconcile_run", "error", "confirm"}

var funcs = template.FuncMap{
	"age": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return ferryadmin.FormatAge(time.Since(t))
	},
	"seconds": func(s float64) string {
		if s <= 0 {
			return "-"
		}
		return ferryadmin.FormatAge(time.Duration(s * float64(time.Second)))
	},
	"duration": func(d time.Duration) string { return d.String() },
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "-"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "-"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "-"
	},
	"oneline": func(n int, s string) string { return ferryadmin.OneLine(s, n) },
	"pretty":  prettyJSON,
	"add":     func(a, b int) int { return a + b },
	"plural": func(n any, noun string) string {
		switch v := n.(type) {
		case *int:
			if v != nil {
				return ferryadmin.Plural(*v, noun)
			}
		case int:
			return ferryadmin.Plural(v, noun)
		case int64:
			return ferryadmin.Plural(v, noun)
		}
		return fmt.Sprint(n) + " " + noun
	},
	// verb is the verb of a count of n: "matches" for one, "match"
	// otherwise (verb n "matches" "match").
	"verb": func(n any, one, many string) string {
		if fmt.Sprint(n) == "1" {
			return one
		}
		return many
	},
	"orDash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
	"redact":    ferrytype.RedactURL,
	"aggregate": func(e ferryadmin.Event) string { return e.Aggregate() },
	"deref":     func(t *time.Time) time.Time { return *t },
	"tabsOf":    func(active string, f filterForm) tabsView { return tabsView{Active: active, Filter: f} },
	"summaryOf": func(base string, s tableSummary) summaryView {
		return summaryView{Base: base, Summary: s}
	},
}

// tabsView is what the dead-tabs template receives.
type tabsView struct {
	Active string
	Filter filterForm
}

// summaryView is what the table-summary template receives.
type summaryView struct {
	Base    string
	Summary tableSummary
}

// prettyJSON indents a JSON document; anything else is returned as is.
func prettyJSON(b json.RawMessage) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

func loadPages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html",
			"templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("ferryconsole: template %s: %w", n, err)
		}
		p.byName[n] = t
	}
	return p, nil
}

// view is what every page's template receives.
type view struct {
	// Base is the relative path from the page to the console's root.
	Base     string
	Operator string
	ReadOnly bool
	// Token is the anti-CSRF token of the page's forms.
	Token string
	Title string
	Nav   navigation
	// Page is the page's own data.
	Page any
}

// navigation lists what the console shows, for the menu.
type navigation struct {
	Outboxes, Inboxes, Tasks []string
	Reconcile                bool
	Active                   string
}

// base returns the relative path from the page at path to the root.
func base(path string) string {
	n := strings.Count(path, "/") - 1
	if n <= 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

func (h *console) nav(active string) navigation {
	seen := map[string]bool{}
	var dbs []string
	for _, n := range append(keys(h.cfg.Inboxes), keys(h.cfg.Tasks)...) {
		if !seen[n] {
			seen[n] = true
			dbs = append(dbs, n)
		}
	}
	return navigation{Outboxes: keys(h.cfg.Outboxes), Inboxes: dbs, Tasks: keys(h.cfg.Tasks),
		Reconcile: len(h.cfg.Reconcile) > 0, Active: active}
}

// render writes the page name with data, status and the common view.
// withNav false leaves the menu out (401 pages).
func (h *console) render(w http.ResponseWriter, r *http.Request, status int, name string, data any, withNav bool) {
	t := h.pages.byName[name]
	title := ""
	if tp, ok := data.(interface{ title() string }); ok {
		title = tp.title()
	}
	v := view{Base: base(r.URL.Path), ReadOnly: h.cfg.ReadOnly, Title: title, Page: data}
	if withNav {
		v.Operator = operator(r)
		v.Token = h.token(v.Operator, time.Now())
		v.Nav = h.nav(name)
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		h.cfg.Logger.Error("console page failed", "page", name, "error", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (h *console) page(w http.ResponseWriter, r *http.Request, name string, data any) {
	h.render(w, r, http.StatusOK, name, data, true)
}

// errorPage is the page of a refused or failed request.
type errorPage struct {
	Status  int
	Title   string
	Message string
	// Ref identifies the failure in the console's log.
	Ref string
}

func (e errorPage) title() string { return e.Title }

// fail answers with an error page.
func (h *console) fail(w http.ResponseWriter, r *http.Request, status int, title, message string) {
	h.render(w, r, status, "error", errorPage{Status: status, Title: title, Message: message}, operator(r) != "")
}

// badInput answers 400 with what was wrong with the request.
func (h *console) badInput(w http.ResponseWriter, r *http.Request, format string, args ...any) {
	h.fail(w, r, http.StatusBadRequest, "Invalid request", fmt.Sprintf(format, args...))
}

// failed answers an error of the databases or of ferryadmin: an invalid
// selection (ferrytype.ErrInvalidConfig) is the request's fault, 400
// with its message; anything else is logged with a reference and answered
// 500 without the error's text.
func (h *console) failed(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, ferrytype.ErrInvalidConfig), errors.Is(err, ferrytype.ErrInvalidIdentifier):
		msg := err.Error()
		for _, p := range []string{ferrytype.ErrInvalidConfig.Error() + ": ", ferrytype.ErrInvalidIdentifier.Error() + ": "} {
			msg = strings.ReplaceAll(msg, p, "")
		}
		h.badInput(w, r, "%s: %s", what, ferrytype.RedactURL(msg))
		return
	case errors.Is(err, context.DeadlineExceeded):
		h.cfg.Logger.Error("console request timed out", "what", what, "operator", operator(r), "error", err)
		h.fail(w, r, http.StatusGatewayTimeout, "Timed out",
			what+" took longer than the console allows; narrow the selection or try again.")
		return
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return // the client went away
	}
	ref := newRef()
	h.cfg.Logger.Error("console request failed", "ref", ref, "what", what, "operator", operator(r),
		"path", r.URL.Path, "error", ferrytype.RedactURL(err.Error()))
	h.render(w, r, http.StatusInternalServerError, "error", errorPage{Status: 500, Title: "Database error",
		Message: what + " failed: the database did not answer as expected. The console's log has the error.",
		Ref:     ref}, true)
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
