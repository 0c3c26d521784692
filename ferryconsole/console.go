package ferryconsole

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Defaults of Config.
const (
	DefaultPageSize      = 50
	MaxPageSize          = 200
	DefaultQueryTimeout  = 30 * time.Second
	DefaultRunTimeout    = 5 * time.Minute
	DefaultTokenLifetime = 12 * time.Hour
)

// Config configures the console. Names (the keys of Outboxes, Inboxes and
// Tasks) appear in the console's URLs and pages; each must match
// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$.
type Config struct {
	// Outboxes are the outbox tables, by the name the console shows. The
	// console never closes them.
	Outboxes map[string]ferrystore.Admin
	// Inboxes are the consumers' inbox stores, by the name of the
	// consumer database that holds them (one store serves every consumer
	// of its database). The console never closes them.
	Inboxes map[string]ferrystore.InboxStore
	// Tasks are task tables (outbox tables a ferry.NewTaskWorker runs),
	// by the name of the consumer database they are in: a name of Inboxes
	// shows them on that database's page, another name on a page of their
	// own. Their DEAD tasks are retried and discarded like DEAD events.
	Tasks map[string]ferrystore.Admin
	// Reconcile holds, by outbox name, the checks the reconcile page runs
	// on that outbox. Outboxes without an entry have none.
	Reconcile map[string]ferryadmin.ReconcileOptions

	// Authenticate names the operator making a request, or returns an
	// error to refuse it with 401 (an error wrapping an *AuthError with a
	// Challenge also sets WWW-Authenticate). It is called on every
	// request. Required unless Insecure. BasicAuth and BearerToken build
	// one.
	Authenticate func(r *http.Request) (operator string, err error)
	// Insecure serves the console without authentication, every operator
	// named "anonymous". It must be set explicitly: without Authenticate
	// and without Insecure, New refuses to build a handler.
	Insecure bool
	// ReadOnly hides every action (retry, discard, restore, resolve) and
	// refuses their requests with 403. Reconcile, which only reads, still
	// runs.
	ReadOnly bool
	// Logger receives a line per action (operator, what, how many changed)
	// and per failed request. Default: slog.Default().
	Logger *slog.Logger

	// Secret keys the forms' anti-CSRF tokens (HMAC-SHA256 over the
	// operator and the time the form was rendered), at least 32 bytes.
	// Default: 32 random bytes per handler, so that forms rendered before
	// a restart, or by another replica, are refused (reload the page).
	// Give every replica behind one address the same Secret.
	Secret []byte
	// TokenLifetime is how long a rendered form may be submitted. Default
	// DefaultTokenLifetime.
	TokenLifetime time.Duration
	// MaxPendingAge is the age of the oldest pending event that needs
	// attention (ferryadmin.StatusOptions). Default
	// ferryadmin.DefaultMaxPendingAge.
	MaxPendingAge time.Duration
	// RelayStaleAfter is how long after its last heartbeat a relay still
	// counts as alive (ferryadmin.Relays). Default
	// ferryadmin.DefaultRelayStaleAfter.
	RelayStaleAfter time.Duration
	// PageSize is the number of DEAD events per page, 1 to MaxPageSize.
	// Default DefaultPageSize.
	PageSize int
	// QueryTimeout bounds the database work of one page or action.
	// Default DefaultQueryTimeout.
	QueryTimeout time.Duration
	// RunTimeout bounds one reconcile run, one summary of DEAD events into
	// groups, and one action on a whole group. Default DefaultRunTimeout.
	RunTimeout time.Duration
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.QueryTimeout == 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = DefaultTokenLifetime
	}
	if o.MaxPendingAge == 0 {
		o.MaxPendingAge = ferryadmin.DefaultMaxPendingAge
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Authenticate == nil && !o.Insecure:
		return o, invalid("Config.Authenticate is required (BasicAuth, BearerToken, or your own); " +
			"set Config.Insecure to serve the console without authentication")
	case len(o.Outboxes)+len(o.Inboxes)+len(o.Tasks) == 0:
		return o, invalid("Config: no Outboxes, Inboxes or Tasks to show")
	case o.PageSize < 1 || o.PageSize > MaxPageSize:
		return o, invalid("Config.PageSize %d must be within 1..%d", o.PageSize, MaxPageSize)
	case o.QueryTimeout < 0 || o.RunTimeout < 0 || o.TokenLifetime < 0 || o.MaxPendingAge < 0 || o.RelayStaleAfter < 0:
		return o, invalid("Config: QueryTimeout, RunTimeout, TokenLifetime, MaxPendingAge and RelayStaleAfter must not be negative")
	case o.Secret != nil && len(o.Secret) < 32:
		return o, invalid("Config.Secret has %d bytes, at least 32 are required", len(o.Secret))
	}
	for what, names := range map[string][]string{"Outboxes": keys(o.Outboxes), "Inboxes": keys(o.Inboxes),
		"Tasks": keys(o.Tasks), "Reconcile": keys(o.Reconcile)} {
		for _, n := range names {
			if !nameRe.MatchString(n) {
				return o, invalid("Config.%s: name %q must match %s", what, n, nameRe)
			}
		}
	}
	for n, a := range o.Outboxes {
		if nilness.Nil(a) {
			return o, invalid("Config.Outboxes[%q] is nil", n)
		}
	}
	for n, a := range o.Tasks {
		if nilness.Nil(a) {
			return o, invalid("Config.Tasks[%q] is nil", n)
		}
	}
	for n, s := range o.Inboxes {
		if nilness.Nil(s) {
			return o, invalid("Config.Inboxes[%q] is nil", n)
		}
	}
	for n := range o.Reconcile {
		if _, ok := o.Outboxes[n]; !ok {
			return o, invalid("Config.Reconcile[%q] names no outbox of Config.Outboxes", n)
		}
	}
	if o.Secret == nil {
		o.Secret = make([]byte, 32)
		if _, err := rand.Read(o.Secret); err != nil {
			return o, fmt.Errorf("ferryconsole: secret: %w", err)
		}
	}
	return o, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: ferryconsole: "+format, append([]any{ferrytype.ErrInvalidConfig}, args...)...)
}

// console is the handler New returns.
type console struct {
	cfg   Config
	pages *pages
	mux   *http.ServeMux
	cop   *http.CrossOriginProtection
	// outboxes and tasks are the tables of the dead pages, by kind.
	tables map[string]map[string]ferrystore.Admin
	// spent are the tokens of forms whose action ran.
	spent spentTokens
	// results are the recent actions' results (results.go).
	results results
}

// Table kinds, the first segment of a table's URLs.
const (
	kindOutbox = "outbox"
	kindTasks  = "tasks"
)

// New returns the console: an http.Handler serving its pages from the
// root of the paths it receives, so that it can be mounted under a prefix
// with http.StripPrefix (every link is relative). It authenticates every
// request (Config.Authenticate), checks every action against cross-origin
// requests (http.CrossOriginProtection) and for a per-form token, and
// sets security headers on every response. It only reads and changes the
// databases through ferryadmin.
func New(cfg Config) (http.Handler, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	h := &console{cfg: c, pages: p, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection(),
		tables: map[string]map[string]ferrystore.Admin{kindOutbox: c.Outboxes, kindTasks: c.Tasks}}
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "Cross-origin request refused",
			"This action was sent from another site. Open the console itself and submit its form.")
	}))
	h.routes()
	return h, nil
}

func (h *console) routes() {
	m := h.mux
	m.Handle("GET /assets/", http.StripPrefix("/assets/", assetServer()))
	m.HandleFunc("GET /{$}", h.overview)
	for _, kind := range []string{kindOutbox, kindTasks} {
		of := func(next http.HandlerFunc) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				r.SetPathValue("kind", kind)
				next(w, r)
			}
		}
		m.HandleFunc("GET /"+kind+"/{name}/dead", of(h.deadList))
		m.HandleFunc("GET /"+kind+"/{name}/event", of(h.eventDetail))
		m.HandleFunc("POST /"+kind+"/{name}/retry", of(h.action(h.retry)))
		m.HandleFunc("POST /"+kind+"/{name}/discard", of(h.action(h.discard)))
		m.HandleFunc("GET /"+kind+"/{name}/groups", of(h.groups))
		m.HandleFunc("POST /"+kind+"/{name}/retry-group", of(h.action(h.groupAction("retry"))))
		m.HandleFunc("POST /"+kind+"/{name}/discard-group", of(h.action(h.groupAction("discard"))))
		m.HandleFunc("GET /"+kind+"/{name}/discarded", of(h.discarded))
		m.HandleFunc("POST /"+kind+"/{name}/restore", of(h.action(h.restore)))
		m.HandleFunc("GET /"+kind+"/{name}/result", of(h.result))
	}
	m.HandleFunc("GET /conflicts", h.conflictsIndex)
	m.HandleFunc("GET /inbox/{db}", h.inbox)
	m.HandleFunc("GET /inbox/{db}/conflicts", h.conflictList)
	m.HandleFunc("GET /inbox/{db}/conflicts/{id}", h.conflictDetail)
	m.HandleFunc("POST /inbox/{db}/conflicts/{id}/resolve", h.action(h.resolve))
	m.HandleFunc("GET /reconcile", h.reconcileIndex)
	m.HandleFunc("POST /reconcile/{name}", h.form(h.reconcileRun))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "Not found", "The console has no page at this address.")
	})
}

type ctxKey int

const operatorKey ctxKey = iota

// operator returns the authenticated operator of r.
func operator(r *http.Request) string {
	s, _ := r.Context().Value(operatorKey).(string)
	return s
}

// ServeHTTP sets the security headers, authenticates, and routes.
func (h *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if health(w, r) { // GET /healthz, unauthenticated: health.go
		return
	}
	if r.URL.Path == "" {
		// Mounted with http.StripPrefix("/console", ...) and asked for
		// "/console": the relative links need the trailing slash.
		p := r.URL.EscapedPath()
		if u := r.RequestURI; u != "" {
			p, _, _ = strings.Cut(u, "?")
		}
		// Set by hand: http.Redirect would resolve it against the
		// stripped path.
		w.Header().Set("Location", lastSegment(p)+"/")
		w.WriteHeader(http.StatusFound)
		return
	}
	op := "anonymous"
	if h.cfg.Authenticate != nil {
		var err error
		op, err = h.cfg.Authenticate(r)
		op = strings.TrimSpace(op)
		if err == nil && op == "" {
			err = &AuthError{Reason: "Authenticate named no operator"}
		}
		if err != nil {
			h.unauthorized(w, r, err)
			return
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), operatorKey, op))
	h.mux.ServeHTTP(w, r)
}

// lastSegment returns the last segment of an URL path, "." for none.
func lastSegment(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndex(p, "/"); i >= 0 {
		p = p[i+1:]
	}
	if p == "" {
		return "."
	}
	return "./" + p
}

// form wraps a POST handler: cross-origin protection, then the form's
// token.
func (h *console) form(next http.HandlerFunc) http.HandlerFunc {
	checked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "Unreadable form", "The form could not be read: send it again from the console.")
			return
		}
		if !h.validToken(operator(r), r.PostForm.Get(tokenField), time.Now()) {
			h.fail(w, r, http.StatusForbidden, "Form expired or forged",
				"The form's security token is missing, expired or not yours. Reload the page and submit it again.")
			return
		}
		next(w, r)
	})
	return h.cop.Handler(checked).ServeHTTP
}

// action wraps a POST handler that changes data: refused in read-only
// mode, then as form.
func (h *console) action(next http.HandlerFunc) http.HandlerFunc {
	f := h.form(next)
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "Read-only console", "This console is read-only: it changes nothing.")
			return
		}
		f(w, r)
	}
}

// ctx returns the request's context bounded by the query timeout.
func (h *console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
}
