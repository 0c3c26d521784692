// Command ferry is the ferry daemon and CLI: it migrates outbox tables,
// relays events to the broker, and runs a self-contained demo.
//
//	ferry demo                                   # SQLite + embedded NATS, no setup
//	ferry migrate --database-url mysql://root@127.0.0.1:3306/app
//	ferry relay   --database-url postgres://... --broker-url nats://127.0.0.1:4222
//
// Every flag has an environment variable (FERRY_DATABASE_URL,
// FERRY_BROKER_URL, ...) named in its help.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferrytype"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // bad flags or configuration
	// exitIncomplete: relay --drain ran out of time with events pending.
	exitIncomplete = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "ferry:", ferrytype.RedactURL(err.Error()))
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, ferrytype.ErrInvalidConfig), errors.Is(err, ferrytype.ErrInvalidIdentifier), isUsage(err):
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
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "ferry",
		Short:         "Carry business events from your database to a broker, losing none and applying none twice",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) }
	pf := root.PersistentFlags()
	envString(pf, &g.databaseURL, "database-url", "FERRY_DATABASE_URL", "",
		"database URL: mysql://user:pass@host:3306/db, postgres://user:pass@host:5432/db, sqlite:///path/file.db")
	envString(pf, &g.table, "table", "FERRY_TABLE", "outbox_event", "outbox table name")
	envString(pf, &g.logLevel, "log-level", "FERRY_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	envString(pf, &g.logFormat, "log-format", "FERRY_LOG_FORMAT", "text", "log format: text or json")
	root.AddCommand(newMigrate(g), newRelay(g), newDemo(), newShop())
	return root
}

// envString declares a string flag that the environment variable env sets
// when the flag is not given.
func envString(fs *pflag.FlagSet, p *string, name, env, def, usage string) {
	fs.StringVar(p, name, def, usage)
	bindEnv(fs, name, env)
}

// bindEnv makes env a fallback for flag name: applyEnv sets the flag from
// it when the command line did not.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	f.Usage += " (env " + env + ")"
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations["env"] = []string{env}
}

// applyEnv sets every unset flag of cmd bound to a present environment
// variable.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		envs := f.Annotations["env"]
		if err != nil || f.Changed || len(envs) == 0 {
			return
		}
		if v, ok := os.LookupEnv(envs[0]); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = usageError{fmt.Errorf("%s=%q: %v", envs[0], ferrytype.RedactURL(v), serr)}
			}
		}
	})
	return err
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

// redactAttr removes passwords from every logged string and error.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case string:
		return slog.String(a.Key, ferrytype.RedactURL(v))
	case error:
		return slog.String(a.Key, ferrytype.RedactURL(v.Error()))
	}
	return a
}
