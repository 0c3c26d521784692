package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type stringer string

func (s stringer) String() string { return string(s) }

// Whatever carries a URL into a log line (the message, a string, an
// error, a *url.URL, any Stringer, inside a group or not), the password
// does not reach the output, in either format.
func TestLogsRedactPasswords(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("postgres://app:s3cr3tpw@db:5432/app")
	require.NoError(t, err)
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		g := &globals{logLevel: "debug", logFormat: format}
		log, err := g.logger(&buf)
		require.NoError(t, err)
		log.Info("connecting to mysql://root:s3cr3tpw@127.0.0.1:3306/app",
			"url", "nats://ferry:s3cr3tpw@127.0.0.1:4222",
			"error", fmt.Errorf("open %s: %w", "amqp://guest:s3cr3tpw@mq:5672/", errors.New("refused")),
			"parsed", u,
			"stringer", stringer("redis://:s3cr3tpw@cache:6379/0"),
			slog.Group("db", "dsn", "root:s3cr3tpw@tcp(127.0.0.1:3306)/app"),
			"retry_in", 1500000000)
		out := buf.String()
		require.NotContains(t, out, "s3cr3tpw", out)
		require.Contains(t, out, "db:5432", "the rest of the URL stays")
		require.Contains(t, out, "xxxxx")
	}
}

// A user name that is the password (guest:guest) reads xxxxx:xxxxx in
// every place a URL reaches a log line: one form, never guest:xxxxx.
func TestLogsRedactUserEqualToPasswordOneWay(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("amqp://guest:guest@mq:5672/")
	require.NoError(t, err)
	var buf bytes.Buffer
	g := &globals{logLevel: "debug", logFormat: "text"}
	log, err := g.logger(&buf)
	require.NoError(t, err)
	log.Info("dial amqp://guest:guest@mq:5672/", "url", "amqp://guest:guest@mq:5672/", "parsed", u,
		"error", fmt.Errorf("dial %s: %w", "amqp://guest:guest@mq:5672/", errors.New("refused")))
	out := buf.String()
	require.NotContains(t, out, "guest", out)
	require.Equal(t, 4, strings.Count(out, "amqp://xxxxx:xxxxx@mq:5672/"), out)
}

// The commands that talk to the database fail on an unreachable one with
// an error that names it, without its password.
func TestCommandErrorsRedactPasswords(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres:s3cr3tpw@127.0.0.1:1/test?connect_timeout=2"
	for _, args := range [][]string{
		{"status"}, {"dead", "list"}, {"dead", "retry", "--all"}, {"dead", "show", "x"}, {"purge", "--older-than", "1h"},
		{"reconcile", "--pending-older-than", "1m"}, {"migrate"},
	} {
		code, out, errOut := ferryCLI(t, append(args, "--database-url", url)...)
		require.Equal(t, exitFailed, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "127.0.0.1:1", args)
		require.NotContains(t, out+errOut, "s3cr3tpw", args)
	}
}
