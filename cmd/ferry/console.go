package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// The console's credentials, from the environment only.
const (
	envConsoleUser     = "FERRY_CONSOLE_USER"
	envConsolePassword = "FERRY_CONSOLE_PASSWORD"
	envConsoleToken    = "FERRY_CONSOLE_TOKEN"
	envConsoleSecret   = "FERRY_CONSOLE_SECRET"
)

type consoleFlags struct {
	databaseURLs  []string
	inboxURLs     []string
	taskTables    []string
	httpAddr      string
	tlsCert       string
	tlsKey        string
	usersFile     string
	authHeader    string
	proxies       []string
	readOnly      bool
	insecure      bool
	maxPendingAge time.Duration
	staleAfter    time.Duration
	tables        inboxTables
}

func newConsole(g *globals) *cobra.Command {
	f := &consoleFlags{}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the on-call console: outbox state, DEAD events, conflicts, inboxes and tasks, reconcile, in a browser",
		Long: `Serves the web console of the ferryconsole package on --http-addr
(127.0.0.1:8080 by default): the state of each outbox and the relays alive on
it, its DEAD events (filter, group by error, inspect, retry or discard one, a
selection or a whole group; the discarded ones, restored), the conflicts of
each consumer database (both versions side by side, resolve with a note), the
inboxes' recent markers and their task tables, and the reconcile checks of
the config file, run on a button.

  --database-url [name=]URL   an outbox (repeat for more; the table is --table);
                              the name is what the console shows, default the table
  --inbox-url name=URL        a consumer's database, holding its inbox tables
                              (--marker-table, --conflict-table...; repeat for more)
  --task-table name=TABLE     a task table in the consumer database name

Authentication is required: basic, with FERRY_CONSOLE_USER and
FERRY_CONSOLE_PASSWORD, or from --users-file (name:bcrypt-hash lines, as
htpasswd -nB prints them: each user an operator of their own name in the
audit), or a bearer token, with FERRY_CONSOLE_TOKEN. Behind an
authenticating proxy, --auth-header X-Forwarded-User --trusted-proxy
10.0.0.0/24 takes the operator from the header on requests from those
addresses only (others need the credentials above, if any are set).
Without any, the console does not start, unless --insecure-no-auth is
given and --http-addr is a loopback address. Every action (retry, discard, resolve) is
a POST checked against cross-origin requests and for the form's token, and
logged with the operator's name. --read-only hides and refuses every action.
Forms carry a token signed with a key made at start: set FERRY_CONSOLE_SECRET
(at least 32 bytes) to the same value on every replica behind one address.

--tls-cert and --tls-key serve HTTPS (TLS 1.2 or later). Without them, on an
address other than loopback, the credentials travel in clear: the console
says so at start, at WARN; serve it with TLS, or bind it to loopback or a
private interface behind a proxy that terminates TLS.

The reconcile page runs the config file's reconcile.checks and
reconcile.effects, with its reconcile.* settings, on the first outbox.

SIGTERM or SIGINT stops the server, letting requests in progress finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConsole(cmd, g, f) },
	}
	fl := cmd.Flags()
	// Shadows the global --database-url: repeatable here, and read from
	// FERRY_DATABASE_URL or the config file's database_url when not given.
	fl.StringArrayVar(&f.databaseURLs, "database-url", nil, "an outbox's database, [name=]URL (repeat for more)")
	bindEnv(fl, "database-url", "FERRY_DATABASE_URL")
	fl.StringArrayVar(&f.inboxURLs, "inbox-url", nil, "a consumer's database holding its inbox tables, name=URL (repeat for more)")
	fl.StringArrayVar(&f.taskTables, "task-table", nil, "a task table in the consumer database name, name=TABLE (repeat for more)")
	envString(fl, &f.httpAddr, "http-addr", "FERRY_CONSOLE_HTTP_ADDR", "127.0.0.1:8080", "address to serve the console on")
	envString(fl, &f.tlsCert, "tls-cert", "FERRY_CONSOLE_TLS_CERT", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	envString(fl, &f.tlsKey, "tls-key", "FERRY_CONSOLE_TLS_KEY", "", "the private key of --tls-cert (PEM)")
	envString(fl, &f.usersFile, "users-file", "FERRY_CONSOLE_USERS_FILE", "",
		"basic authentication from a file of name:bcrypt-hash lines (htpasswd -nB name), each user an operator")
	envString(fl, &f.authHeader, "auth-header", "FERRY_CONSOLE_AUTH_HEADER", "",
		"the header naming the operator on requests from a --trusted-proxy (X-Forwarded-User)")
	fl.StringArrayVar(&f.proxies, "trusted-proxy", nil, "an authenticating proxy's address or network (10.0.0.5, 10.0.0.0/24; repeat for more)")
	fl.BoolVar(&f.readOnly, "read-only", false, "show everything, change nothing: no retry, discard or resolve")
	bindEnv(fl, "read-only", "FERRY_CONSOLE_READ_ONLY")
	fl.BoolVar(&f.insecure, "insecure-no-auth", false, "serve without authentication (only on a loopback --http-addr)")
	fl.DurationVar(&f.maxPendingAge, "max-pending-age", ferryadmin.DefaultMaxPendingAge, "age of the oldest pending event that needs attention")
	bindEnv(fl, "max-pending-age", "FERRY_MAX_PENDING_AGE")
	fl.DurationVar(&f.staleAfter, "relay-stale-after", ferryadmin.DefaultRelayStaleAfter,
		"a relay whose last heartbeat is older is not alive (at least 3 of the relays' --heartbeat)")
	bindEnv(fl, "relay-stale-after", "FERRY_RELAY_STALE_AFTER")
	f.tables.flags(fl, false)
	return cmd
}

// consoleAuth returns the Authenticate function from the flags and the
// environment, or nil with --insecure-no-auth on a loopback address; with
// --auth-header, requests from a --trusted-proxy are the operator the
// header names, the others left to the other method (if any).
func consoleAuth(f *consoleFlags) (func(*http.Request) (string, error), error) {
	if (f.authHeader == "") != (len(f.proxies) == 0) {
		return nil, usageError{errors.New("--auth-header and --trusted-proxy go together: the header is trusted from those addresses only")}
	}
	if f.authHeader == "" {
		return credentialAuth(f, false)
	}
	var proxies []netip.Prefix
	for _, p := range f.proxies {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, usageError{fmt.Errorf("--trusted-proxy %q: want an address (10.0.0.5) or a network (10.0.0.0/24)", p)}
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		proxies = append(proxies, pfx.Masked())
	}
	if f.insecure {
		return nil, usageError{errors.New("--insecure-no-auth with --auth-header: choose one")}
	}
	fallback, err := credentialAuth(f, true)
	if err != nil {
		return nil, err
	}
	auth, err := ferryconsole.TrustedProxy(f.authHeader, proxies, fallback)
	if err != nil {
		return nil, usageError{err}
	}
	return auth, nil
}

// credentialAuth returns the Authenticate function of the credentials
// given (--users-file, or the environment's); with optional, none is nil.
func credentialAuth(f *consoleFlags, optional bool) (func(*http.Request) (string, error), error) {
	user, pass, token := os.Getenv(envConsoleUser), os.Getenv(envConsolePassword), os.Getenv(envConsoleToken)
	switch {
	case f.usersFile != "" && (user != "" || pass != "" || token != "" || f.insecure):
		return nil, usageError{fmt.Errorf("--users-file with %s, %s, %s or --insecure-no-auth: choose one", envConsoleUser,
			envConsolePassword, envConsoleToken)}
	case f.usersFile != "":
		auth, err := ferryconsole.PasswordFile(f.usersFile)
		if err != nil {
			return nil, usageError{err}
		}
		return auth, nil
	case optional && user == "" && pass == "" && token == "":
		return nil, nil
	}
	switch {
	case f.insecure && (user != "" || pass != "" || token != ""):
		return nil, usageError{fmt.Errorf("--insecure-no-auth with %s, %s or %s set: choose one", envConsoleUser,
			envConsolePassword, envConsoleToken)}
	case f.insecure:
		if !loopback(f.httpAddr) {
			return nil, usageError{fmt.Errorf("--insecure-no-auth serves only on a loopback address (127.0.0.1:8080, [::1]:8080, "+
				"localhost:8080), not %q: anyone who reaches it could retry and discard events", f.httpAddr)}
		}
		return nil, nil
	case token != "" && (user != "" || pass != ""):
		return nil, usageError{fmt.Errorf("set either %s or %s and %s, not both", envConsoleToken, envConsoleUser, envConsolePassword)}
	case token != "":
		return ferryconsole.BearerToken(token), nil
	case user != "" && pass != "":
		return ferryconsole.BasicAuth(user, pass), nil
	case user != "" || pass != "":
		return nil, usageError{fmt.Errorf("set both %s and %s", envConsoleUser, envConsolePassword)}
	}
	return nil, usageError{fmt.Errorf("the console needs authentication: set %s and %s (basic) or %s (bearer), "+
		"or give --users-file, or --auth-header and --trusted-proxy behind an authenticating proxy; "+
		"--insecure-no-auth serves without, on a loopback --http-addr only", envConsoleUser, envConsolePassword, envConsoleToken)}
}

// consoleTLS loads --tls-cert and --tls-key; nil without them.
func consoleTLS(f *consoleFlags) (*tls.Config, error) {
	switch {
	case f.tlsCert == "" && f.tlsKey == "":
		return nil, nil
	case f.tlsCert == "" || f.tlsKey == "":
		return nil, usageError{errors.New("--tls-cert and --tls-key go together: give both, or neither to serve plain HTTP")}
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, usageError{fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.tlsCert, f.tlsKey, err)}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// namedURL splits "name=URL"; without a name, def(URL) names it.
func namedURL(flag, v string, def func(string) string) (name, u string, err error) {
	name, u, ok := strings.Cut(v, "=")
	if !ok || strings.Contains(name, "://") || strings.Contains(name, "/") {
		if def == nil {
			return "", "", usageError{fmt.Errorf("--%s %q: want name=URL", flag, ferrytype.RedactURL(v))}
		}
		return def(v), v, nil
	}
	if name == "" || u == "" {
		return "", "", usageError{fmt.Errorf("--%s %q: want name=URL", flag, ferrytype.RedactURL(v))}
	}
	return name, u, nil
}

func runConsole(cmd *cobra.Command, g *globals, f *consoleFlags) error {
	ctx := cmd.Context()
	auth, err := consoleAuth(f)
	if err != nil {
		return err
	}
	var secret []byte
	if s := os.Getenv(envConsoleSecret); s != "" {
		if len(s) < 32 {
			return usageError{fmt.Errorf("%s has %d bytes, at least 32 are needed", envConsoleSecret, len(s))}
		}
		secret = []byte(s)
	}
	if len(f.databaseURLs)+len(f.inboxURLs) == 0 {
		return usageError{fmt.Errorf("nothing to show: give --database-url (an outbox) or --inbox-url (a consumer's database)")}
	}
	if f.maxPendingAge <= 0 || f.staleAfter <= 0 {
		return usageError{fmt.Errorf("--max-pending-age and --relay-stale-after must be positive")}
	}
	tlsCfg, err := consoleTLS(f)
	if err != nil {
		return err
	}
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	cfg := ferryconsole.Config{Outboxes: map[string]ferrystore.Admin{}, Inboxes: map[string]ferrystore.InboxStore{},
		Tasks: map[string]ferrystore.Admin{}, Authenticate: auth, Insecure: auth == nil, ReadOnly: f.readOnly,
		Logger: log, Secret: secret, MaxPendingAge: f.maxPendingAge, RelayStaleAfter: f.staleAfter}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	type named struct{ name, url, table string }
	// Every value is checked before any database is opened.
	var outboxes, inboxes, taskTables []named
	seen := map[string]bool{}
	for _, v := range f.databaseURLs {
		name, u, err := namedURL("database-url", v, func(string) string { return g.table })
		if err != nil {
			return err
		}
		if seen["o"+name] {
			return usageError{fmt.Errorf("--database-url: two outboxes named %q: name them, name=URL", name)}
		}
		if err := open.ValidateDatabaseURL(u); err != nil {
			return fmt.Errorf("--database-url %s: %w", name, err)
		}
		if outboxMax, _, _ := tableLimits(u); len(g.table) > outboxMax {
			return fmt.Errorf("--database-url %s: %w", name, ferrytype.ValidateTableName("--table", g.table, outboxMax))
		}
		seen["o"+name] = true
		outboxes = append(outboxes, named{name, u, g.table})
	}
	inboxURLs := map[string]string{}
	for _, v := range f.inboxURLs {
		name, u, err := namedURL("inbox-url", v, nil)
		if err != nil {
			return err
		}
		if _, dup := inboxURLs[name]; dup {
			return usageError{fmt.Errorf("--inbox-url: two databases named %q", name)}
		}
		if err := open.ValidateDatabaseURL(u); err != nil {
			return fmt.Errorf("--inbox-url %s: %w", name, err)
		}
		_, inboxMax, _ := tableLimits(u)
		for _, t := range []struct{ flag, name string }{{"--marker-table", f.tables.markers},
			{"--conflict-table", f.tables.conflicts}, {"--version-table", f.tables.versions}, {"--key-table", f.tables.keys}} {
			if err := ferrytype.ValidateTableName(t.flag, t.name, inboxMax); err != nil {
				return fmt.Errorf("--inbox-url %s: %w", name, err)
			}
		}
		inboxURLs[name] = u
		inboxes = append(inboxes, named{name, u, ""})
	}
	for _, v := range f.taskTables {
		name, table, ok := strings.Cut(v, "=")
		u, known := inboxURLs[name]
		switch {
		case !ok || table == "":
			return usageError{fmt.Errorf("--task-table %q: want name=TABLE, name an --inbox-url's", v)}
		case !known:
			return usageError{fmt.Errorf("--task-table %q: no --inbox-url is named %q", v, name)}
		case seen["t"+name]:
			return usageError{fmt.Errorf("--task-table: two task tables in %q", name)}
		}
		outboxMax, _, _ := tableLimits(u) // a task table is an outbox table, in the consumer's database
		if err := ferrytype.ValidateTableName("--task-table", table, outboxMax); err != nil {
			return err
		}
		seen["t"+name] = true
		taskTables = append(taskTables, named{name, u, table})
	}
	var reconcile ferryadmin.ReconcileOptions
	hasReconcile := false
	if len(outboxes) > 0 {
		if reconcile, hasReconcile, err = consoleReconcile(g); err != nil {
			return err
		}
	}

	for _, o := range outboxes {
		a, err := openAdmin(ctx, &globals{databaseURL: o.url, table: o.table, stderr: g.stderr})
		if err != nil {
			return fmt.Errorf("outbox %s: %w", o.name, err)
		}
		closers = append(closers, a.Close)
		cfg.Outboxes[o.name] = a
	}
	for _, o := range inboxes {
		s, err := open.InboxStore(ctx, o.url, &open.InboxConfig{MarkerTable: f.tables.markers, ConflictTable: f.tables.conflicts,
			VersionTable: f.tables.versions, KeyTable: f.tables.keys})
		if err != nil {
			return fmt.Errorf("inbox %s: %w", o.name, err)
		}
		closers = append(closers, s.Close)
		cfg.Inboxes[o.name] = s
	}
	for _, o := range taskTables {
		a, err := openAdmin(ctx, &globals{databaseURL: o.url, table: o.table, stderr: g.stderr})
		if err != nil {
			return fmt.Errorf("task table %s in %s: %w", o.table, o.name, err)
		}
		closers = append(closers, a.Close)
		cfg.Tasks[o.name] = a
	}
	if hasReconcile {
		cfg.Reconcile = map[string]ferryadmin.ReconcileOptions{outboxes[0].name: reconcile}
	}
	h, err := ferryconsole.New(cfg)
	if err != nil {
		return usageError{err}
	}
	return serveConsole(ctx, f.httpAddr, h, cfg, tlsCfg, log)
}

// consoleReconcile builds the reconcile options of the config file: its
// checks and effects, with the reconcile.* settings or their defaults.
// ok is false when the file has neither.
func consoleReconcile(g *globals) (o ferryadmin.ReconcileOptions, ok bool, err error) {
	if g.file == nil || len(g.file.checks)+len(g.file.effects) == 0 {
		return o, false, nil
	}
	o = ferryadmin.ReconcileOptions{Checks: g.file.checks, Window: 24 * time.Hour, Grace: time.Minute,
		PendingOlderThan: 15 * time.Minute, Limit: 100, Batch: 500, ScanLimit: 100000, OpenInbox: openInbox}
	durations := []struct {
		key, env string
		p        *time.Duration
	}{{"reconcile.window", "FERRY_RECONCILE_WINDOW", &o.Window}, {"reconcile.grace", "FERRY_RECONCILE_GRACE", &o.Grace},
		{"reconcile.pending_older_than", "FERRY_RECONCILE_PENDING_OLDER_THAN", &o.PendingOlderThan}}
	for _, d := range durations {
		if v := g.fileSetting(d.key, d.env); v != "" {
			if *d.p, err = time.ParseDuration(v); err != nil {
				return o, false, usageError{fmt.Errorf("%s %q: want a duration", d.key, v)}
			}
		}
	}
	ints := []struct {
		key, env string
		p        *int
	}{{"reconcile.limit", "FERRY_RECONCILE_LIMIT", &o.Limit}, {"reconcile.batch", "FERRY_RECONCILE_BATCH", &o.Batch},
		{"reconcile.scan_limit", "FERRY_RECONCILE_SCAN_LIMIT", &o.ScanLimit}}
	for _, n := range ints {
		if v := g.fileSetting(n.key, n.env); v != "" {
			if *n.p, err = strconv.Atoi(v); err != nil {
				return o, false, usageError{fmt.Errorf("%s %q: want a number", n.key, v)}
			}
		}
	}
	if o.ReplayWindow, err = checkEffectWindow(g, g.file.effects, o.Window); err != nil {
		return o, false, err
	}
	if o.Effects, err = resolveInboxURLs(g.file.effects); err != nil {
		return o, false, err
	}
	if v := g.fileSetting("relay.retention", "FERRY_RETENTION"); v != "" && len(o.Checks) > 0 {
		if ret, err := time.ParseDuration(v); err == nil && ret > 0 {
			o.Retention = ret
		}
	}
	return o, true, nil
}

// serveConsole serves h on addr until ctx ends, then lets requests in
// progress finish.
func serveConsole(ctx context.Context, addr string, h http.Handler, cfg ferryconsole.Config, tlsCfg *tls.Config, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	} else if !cfg.Insecure && !loopback(addr) {
		log.Warn("the console serves plain HTTP on an address other than loopback: its credentials and pages travel in clear; "+
			"give --tls-cert and --tls-key, or bind --http-addr to loopback or a private interface behind a proxy that terminates TLS",
			"addr", addr)
	}
	run := cfg.RunTimeout
	if run == 0 {
		run = ferryconsole.DefaultRunTimeout
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: run + 30*time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	auth := "basic or bearer"
	if cfg.Insecure {
		auth = "none (--insecure-no-auth)"
	}
	log.Info("serving the console", "addr", scheme+"://"+ln.Addr().String()+"/", "outboxes", len(cfg.Outboxes),
		"inboxes", len(cfg.Inboxes), "task_tables", len(cfg.Tasks), "read_only", cfg.ReadOnly, "auth", auth)
	select {
	case err := <-done:
		return fmt.Errorf("console server: %w", err)
	case <-ctx.Done():
	}
	log.Info("stopping the console")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
