// Command ferry is the ferry daemon and CLI: it migrates outbox tables,
// relays events to the broker, shows the outbox's state, handles dead
// events, lists and resolves inbox conflicts, lists, replays and drops the
// messages a RabbitMQ consumer parked, reconciles business tables and consumers'
// inboxes with the outbox, serves the on-call web console, purges old events
// and markers, and measures itself against the raw database and broker.
//
//	ferry migrate --database-url mysql://root@127.0.0.1:3306/app
//	ferry relay   --database-url postgres://... --broker-url nats://127.0.0.1:4222 --http-addr :9090
//	ferry status  --database-url postgres://...
//	ferry dead summary|list|show|retry|discard|discarded|restore
//	ferry conflicts list|show|resolve --database-url mysql://.../points   # the consumer's database
//	ferry reconcile --config ferry.yaml
//	ferry console --database-url postgres://... --inbox-url points=mysql://.../points   # the on-call web console
//	ferry purge --older-than 168h
//	ferry purge --markers --older-than 720h --database-url mysql://.../points
//	ferry relay   --database-url mysql://... --broker-url amqp://user:pass@127.0.0.1:5672/ --queue orders --routing-key 'orders.#' --declare
//	ferry parked list|replay|drop --broker-url amqp://... --queue points   # a RabbitMQ consumer's parked messages
//	ferry bench   --database-url mysql://... --broker-url amqp://...   # ferry against the raw limits
//	ferry --version                              # or ferry version [--json]
//
// Settings come from the command line, then the environment (every
// configurable flag names its FERRY_* variable in its help), then the
// config file (--config or FERRY_CONFIG; see ferry.example.yaml), then the
// defaults. --print-config shows each setting and where it came from.
//
// The self-contained demo (SQLite and an embedded NATS, each process
// crashed once and restarted, the result checked) is not in this binary,
// which has no crash points: it is the reference shop's, `go run
// ./examples/shop/cmd/shop demo` from a clone of ferry. `ferry demo` says
// so and exits 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // bad flags or configuration
	// exitIncomplete: relay --drain ran out of time with events pending.
	exitIncomplete = 3
	// exitFindings: the command worked and found something a person must
	// look at: reconcile found discrepancies, status --check found DEAD
	// events or a pending event older than --max-pending-age, conflicts
	// list --check found open conflicts.
	exitFindings = 4
	// exitNoMatch: dead show/retry/discard matched no event; conflicts
	// show/resolve named no conflict (resolve: no open one).
	exitNoMatch = 5
	// exitDeadLeft: relay --drain published what it could, but events went
	// DEAD during the run (ferry dead list shows them).
	exitDeadLeft = 6
	// exitSchema: the outbox table is missing or lacks migrations this
	// ferry needs (run ferry migrate); nothing was read or changed.
	exitSchema = 7
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return execute(newRoot(), args, stdout, stderr)
}

// execute runs the command line args on root and returns the exit code.
// SIGINT and SIGTERM end the command's context.
func execute(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return executeContext(ctx, root, args, stdout, stderr)
}

// executeContext runs the command line args on root with ctx and returns
// the exit code.
func executeContext(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errPrinted) {
		return exitOK
	}
	if perr := open.Permanent(err); perr != nil {
		err = perr // a cause no retry mends is a configuration error
	}
	fmt.Fprintln(stderr, "ferry:", strings.TrimPrefix(errorText(ferrytype.RedactURL(err.Error())), "ferry: "))
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, ferrytype.ErrSchemaOutdated):
		return exitSchema
	case errors.Is(err, ferrytype.ErrInvalidConfig), errors.Is(err, ferrytype.ErrInvalidIdentifier), isUsage(err),
		errors.Is(err, ferrystore.ErrLogSetup):
		return exitUsage
	}
	return exitFailed
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

type usageError struct{ error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// globals are the flags every command takes.
type globals struct {
	databaseURL string
	table       string
	logLevel    string
	logFormat   string
	configPath  string
	printConfig bool

	stderr   io.Writer   // the command's error output, for warnings
	file     *configFile // the config file, nil when none
	settings []setting   // the command's settings and their sources

	// faultPoint, when not nil, is the relay's and its publisher's fault
	// point function. The binary never sets it: no flag, variable or
	// config key reaches it. This package's tests set it to crash a relay
	// process at a named point.
	faultPoint func(ctx context.Context, point string) error
}

func newRoot() *cobra.Command { return newRootWith(&globals{}) }

func newRootWith(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Carry business events from your database to a broker, losing none and applying none twice",
		Long: `Carry business events from your database to a broker, losing none and applying none twice.

Exit codes:
  0  success
  1  the command failed (database or broker unreachable, a query failed)
  2  bad flags or configuration, or a cause no retry mends (unknown database,
     login refused, a missing exchange, queue, stream or topic)
  3  relay --drain timed out with events still pending
  4  something needs a person: reconcile found discrepancies, status --check
     found DEAD events or an old backlog, conflicts list --check found conflicts
  5  dead show/retry/discard/restore, conflicts show/resolve or parked
     replay/drop matched nothing
  6  relay --drain finished, but events went DEAD during the run
  7  the outbox table is missing or lacks migrations: run ferry migrate`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildInfo().String(),
	}
	root.SetVersionTemplate("ferry {{.Version}}\n")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		g.stderr = cmd.ErrOrStderr()
		if err := resolve(cmd, g); err != nil {
			return err
		}
		return checkSettings(cmd)
	}
	pf := root.PersistentFlags()
	envString(pf, &g.configPath, "config", envConfig, "", "YAML config file (see ferry.example.yaml); flags and FERRY_* variables override it")
	pf.BoolVar(&g.printConfig, "print-config", false, "print the command's settings, each with where it came from, and exit")
	envString(pf, &g.databaseURL, "database-url", "FERRY_DATABASE_URL", "",
		"database URL: mysql://user:pass@host:3306/db, postgres://user:pass@host:5432/db, sqlite:///path/file.db")
	envString(pf, &g.table, "table", "FERRY_TABLE", "outbox_event",
		"outbox table name: letters, digits and underscores, at most 49 bytes (57 on MySQL)")
	envString(pf, &g.logLevel, "log-level", "FERRY_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	envString(pf, &g.logFormat, "log-format", "FERRY_LOG_FORMAT", "text", "log format: text or json")
	root.AddCommand(newMigrate(g), newRelay(g), newStatus(g), newDead(g), newReconcile(g), newPurge(g), newConflicts(g), newParked(g),
		newConsole(g), newBench(g), newDoctor(g), newDemo(), newVersion())
	finish(root)
	return root
}

// envString declares a string flag that the environment variable env sets
// when the flag is not given.
func envString(fs *pflag.FlagSet, p *string, name, env, def, usage string) {
	fs.StringVar(p, name, def, usage)
	bindEnv(fs, name, env)
}

// bindEnv makes env a fallback for flag name, and the flag a config file
// setting: resolve sets the flag from them when the command line did not.
// Further names (older spellings) are read when env is unset.
func bindEnv(fs *pflag.FlagSet, name, env string, older ...string) {
	f := fs.Lookup(name)
	f.Usage += " (env " + env + ")"
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations["env"] = append([]string{env}, older...)
}

// bindShared is bindEnv for a setting several commands share: its config
// file key is key (inbox.marker_table) whichever command reads it.
func bindShared(fs *pflag.FlagSet, name, env, key string) {
	bindEnv(fs, name, env)
	fs.Lookup(name).Annotations["key"] = []string{key}
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redactAttr}
	switch strings.ToLower(g.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", g.logFormat)}
}

// oneLine joins a multi-line error message (pgx lists each host it tried
// on a line of its own, "\n\t"-indented) into one line, which a log line
// shows as it is rather than with \n and \t escapes. A line said before
// is left out: pgx tries each host twice with sslmode=prefer (with TLS,
// then without), and a host that cannot be reached fails the same way
// both times.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	var b strings.Builder
	var seen []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || slices.Contains(seen, l) {
			continue
		}
		seen = append(seen, l)
		switch {
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteString(" ") // "failed to connect to ...:" and its causes
		default:
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// redactAttr removes passwords from every logged string, error and
// stringer (the message included), whatever the library or the driver put
// in them.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, ferrytype.RedactURL(a.Value.String()))
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case *url.URL:
			if v != nil {
				return slog.String(a.Key, ferrytype.RedactURL(v.String()))
			}
		case error:
			return slog.String(a.Key, errorText(ferrytype.RedactURL(v.Error())))
		case fmt.Stringer:
			return slog.String(a.Key, ferrytype.RedactURL(v.String()))
		}
	}
	return a
}

// demoMoved is what `ferry demo` says: where the demo is now.
const demoMoved = "the demo now lives in the reference shop's binary, which carries the crash points the demo needs " +
	"and ferry's own binary does not; run it, with the same flags, with " +
	"`go run ./examples/shop/cmd/shop demo` in a clone of ferry " +
	"(or `go run github.com/ferrydev/ferry/examples/shop/cmd/shop@VERSION demo` with a released VERSION)"

// newDemo is `ferry demo`, hidden: the demo moved to the shop's binary
// (examples/shop/cmd/shop), and the command is a usage error that says
// where, whatever its arguments.
func newDemo() *cobra.Command {
	return &cobra.Command{
		Use:                "demo",
		Short:              "Moved: go run ./examples/shop/cmd/shop demo, in a clone of ferry",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New(demoMoved)}
		},
	}
}
