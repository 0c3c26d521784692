package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// Help shows a bool flag as --flag, as Go's flag package does, never
// --flag[=true|false]; --flag=false still parses.
func TestHelpShowsBoolFlagsPlainly(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"relay", "--help"}, {"dead", "retry", "--help"}, {"--help"}, {"parked", "drop", "--help"}} {
		code, out, errOut := ferryCLI(t, args...)
		require.Equal(t, exitOK, code, errOut)
		require.NotContains(t, out, "[=true|false]", args)
		require.Regexp(t, `(?m)^  -h, --help +help for `, out, args)
	}
	_, out, _ := ferryCLI(t, "relay", "--help")
	require.Regexp(t, `(?m)^      --declare +declare the broker topology`, out)
	require.Regexp(t, `(?m)^      --drain +exit once`, out)
	code, out, errOut := ferryCLI(t, "migrate", "--print", "--inbox=false", "--database-url", "sqlite:///"+t.TempDir()+"/x.db")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "0001_outbox.up.sql", "--inbox=false is the outbox")
}

// An unknown flag or command is a usage error (exit 2) that names the
// nearest flag or command, or the commands that take the flag; a command
// that groups others prints its help alone.
func TestUnknownFlagsAndCommandsSuggest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--broker-ur", "x"}, "ferry: unknown flag --broker-ur for ferry relay; did you mean --broker-url?\n"},
		{[]string{"status", "--databse-url", "x"}, "ferry: unknown flag --databse-url for ferry status; did you mean --database-url?\n"},
		{[]string{"dead", "retry", "--dryrun"}, "ferry: unknown flag --dryrun for ferry dead retry; did you mean --dry-run?\n"},
		{[]string{"status", "--broker-url", "x"}, "ferry: unknown flag --broker-url for ferry status: it is a flag of ferry bench, ferry doctor, " +
			"ferry parked (and its commands), ferry relay\n"},
		{[]string{"status", "--zzz"}, "ferry: unknown flag --zzz for ferry status (ferry status --help lists its flags)\n"},
		{[]string{"stauts"}, "ferry: unknown command \"stauts\" for \"ferry\"; did you mean status?\n"},
		{[]string{"dead", "lst"}, "ferry: unknown command \"lst\" for \"ferry dead\"; did you mean list?\n"},
		{[]string{"parked", "remove"}, "ferry: unknown command \"remove\" for \"ferry parked\" (its commands: drop, list, replay)\n"},
		{[]string{"status", "extra"}, "ferry: unknown command \"extra\" for \"ferry status\"\n"},
	} {
		code, out, errOut := ferryCLI(t, c.args...)
		require.Equal(t, exitUsage, code, "%v\n%s\n%s", c.args, out, errOut)
		require.Equal(t, c.want, errOut, c.args)
		require.Empty(t, out, c.args)
	}
	code, out, errOut := ferryCLI(t, "dead")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "Available Commands:")
	require.Contains(t, out, "Usage:\n  ferry dead [command]\n", "no bare command line for a group")
}

// An error names the flag the user wrote, never the library's field.
func TestErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	db := "sqlite:///" + t.TempDir() + "/x.db"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--lease", "1ms"},
			"--publish-timeout 10s must be shorter than --lease 1ms"},
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--declare"}, "--declare with NATS needs --stream and --subjects"},
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--declare", "--stream", "S"}, "--declare with NATS needs --subjects"},
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--batch-size", "20000"}, "--batch-size 20000: at most 10000"},
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--poll-interval", "10µs"}, "--poll-interval 10µs: at least 1ms"},
		{[]string{"--broker-url", "nats://127.0.0.1:4222", "--heartbeat", "9h"}, "--heartbeat 9h0m0s: at most 8h0m0s"},
	} {
		code, _, errOut := ferryCLI(t, append([]string{"relay", "--drain", "--database-url", db}, c.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
		require.NotRegexp(t, `Config\.|RelayConfig|\bDeclare\b`, errOut, c.args)
	}
	code, _, errOut := ferryCLI(t, "reconcile", "--database-url", db, "--window", "-1h")
	require.Equal(t, exitUsage, code, errOut)
	require.Equal(t, "ferry: --window must be positive\n", errOut)

	// A library's hint names the field and the flag; the command line
	// keeps the flag.
	require.Equal(t, "queue q does not exist: declare it, or let ferry declare it (--declare)",
		errorText("queue q does not exist: declare it, or let ferry declare it (Declare, --declare)"))
	require.Equal(t, "x (--declare)", errorText("x (Config.Topology.Declare, --declare)"))
}

// A database that cannot be reached is said once, on one line, without
// the password: pgx tries the host twice (TLS, then plain, with
// sslmode=prefer) and lists both failures, which are the same.
func TestConnectErrorIsSaidOnce(t *testing.T) {
	t.Parallel()
	code, out, errOut := ferryCLI(t, "status", "--database-url", "postgres://ferry:s3cret@127.0.0.1:1/app")
	require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
	require.NotContains(t, errOut, "s3cret")
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	require.Equal(t, 1, strings.Count(errOut, "127.0.0.1:1 (127.0.0.1): dial error"), "said once: %q", errOut)
	require.Contains(t, errOut, "failed to connect to `user=ferry database=app`: 127.0.0.1:1 (127.0.0.1): dial error")

	require.Equal(t, "failed to connect to `user=u database=d`: h:1 (h): refused; h:1 (::1): refused",
		oneLine("failed to connect to `user=u database=d`:\n\th:1 (h): refused\n\th:1 (h): refused\n\th:1 (::1): refused"))
}

// The limit of a table name is the database's, said at the first check
// (before connecting), with why, and the same in the store.
func TestTableNameLimitIsSaidOnce(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("t", n) }
	sqlite := "sqlite:///" + t.TempDir() + "/x.db"
	for _, c := range []struct {
		url   string
		n     int
		limit int
	}{
		{sqlite, 50, 49}, {sqlite, 63, 49}, {"postgres://u@127.0.0.1:1/db", 53, 49}, {"mysql://root@127.0.0.1:1/db", 58, 57},
	} {
		code, out, errOut := ferryCLI(t, "status", "--database-url", c.url, "--table", long(c.n))
		require.Equal(t, exitUsage, code, "%s\n%s", out, errOut)
		require.Equal(t, fmt.Sprintf("ferry: invalid identifier: --table %q is %d bytes: at most %d "+
			"(ferry names indexes and tables after it, and their names must fit in 63 bytes)\n", long(c.n), c.n, c.limit), errOut)
	}
	code, _, errOut := ferryCLI(t, "status", "--database-url", sqlite, "--table", long(64))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "is 64 bytes: at most 49", "one limit, whatever the pattern says")
	code, _, errOut = ferryCLI(t, "status", "--database-url", sqlite, "--table", "a-b")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--table "a-b": want letters, digits and underscores, not starting with a digit, at most 49 bytes`)
	code, _, errOut = ferryCLI(t, "migrate", "--database-url", sqlite, "--table", long(49))
	require.Equal(t, exitOK, code, "49 bytes is allowed on SQLite: %s", errOut)
}

// ferry migrate prints one line per store, that says what it did.
func TestMigrateSaysOneLine(t *testing.T) {
	t.Parallel()
	db := "sqlite:///" + t.TempDir() + "/x.db"
	code, out, errOut := ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "outbox table outbox_event (sqlite): applied 0001_outbox, 0002_discard, 0003_relay, 0004_dead, 0005_log, 0006_lease\n", out)
	code, out, errOut = ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "outbox table outbox_event (sqlite): up to date, nothing to apply\n", out)
}

// ferry dead show takes --id and the filters of ferry dead list: by id,
// events of any status; by filter, the DEAD events that match.
func TestDeadShowTakesTheFilters(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	testsvc.InsertDead(t, b.st, 3, cliMix[0], cliMix[5], cliMix[8])
	code, out, errOut := b.cli(t, "dead", "show", "--id", "dead-000001")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "event dead-000001\n")
	require.NotContains(t, out, "dead-000000")
	code, out, errOut = b.cli(t, "dead", "show", "dead-000000", "--id", "dead-000002")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "event dead-000000\n")
	require.Contains(t, out, "event dead-000002\n")
	code, out, errOut = b.cli(t, "dead", "show", "--destination", "orders.shipped")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "event dead-000002\n")
	require.Equal(t, 1, strings.Count(out, "event dead-"), out)
	code, out, errOut = b.cli(t, "dead", "show", "--error-contains", "i/o timeout", "--json")
	require.Equal(t, exitOK, code, errOut)
	var shown []ferryadmin.EventDetail
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Len(t, shown, 1)
	require.Equal(t, "dead-000001", shown[0].ID)

	code, out, errOut = b.cli(t, "dead", "show", "--type", "NoSuchType")
	require.Equal(t, exitNoMatch, code)
	require.Empty(t, out)
	require.Equal(t, "ferry: no DEAD event matches --type NoSuchType: nothing to show\n", errOut)
	code, _, errOut = b.cli(t, "dead", "show", "--id", "missing")
	require.Equal(t, exitNoMatch, code)
	require.Equal(t, "ferry: no event with id missing\n", errOut)
	code, _, errOut = b.cli(t, "dead", "show")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "name the events")
}

// A bulk action that matches nothing says so once, on stderr, with exit
// code 5, and prints no totals; counts of one are singular.
func TestDeadActOnNothingSaysSoOnce(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	testsvc.InsertDead(t, b.st, 2, cliMix[0], cliMix[8])
	for _, dry := range []bool{false, true} {
		args := []string{"dead", "retry", "--destination", "nowhere"}
		if dry {
			args = append(args, "--dry-run")
		}
		code, out, errOut := b.cli(t, args...)
		require.Equal(t, exitNoMatch, code, errOut)
		require.Empty(t, out)
		require.Equal(t, "ferry: no DEAD event matches --destination nowhere: nothing to retry\n", errOut)
	}
	code, out, errOut := b.cli(t, "dead", "discard", "--error-class", "attempt <n>: nope", "--reason", "x")
	require.Equal(t, exitNoMatch, code, errOut)
	require.Empty(t, out)
	require.Equal(t, "ferry: no DEAD event matches --error-class 'attempt <n>: nope': nothing to discard\n", errOut)

	code, out, errOut = b.cli(t, "dead", "summary", "--destination", "orders.paid")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "1 DEAD event in 1 group, largest first:")
	code, out, errOut = b.cli(t, "dead", "retry", "--id", "dead-000000")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "retried 1 of 1 matching DEAD event in 1 batch: NEW again")
	code, out, errOut = b.cli(t, "dead", "retry", "--all")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "retried 1 of 1 matching DEAD event in 1 batch")
	code, out, errOut = b.cli(t, "dead", "retry", "--all")
	require.Equal(t, exitNoMatch, code)
	require.Empty(t, out)
	require.Equal(t, "ferry: no event is DEAD: nothing to retry\n", errOut)
}

// A relay in a program that died without Stop keeps its heartbeat row:
// ferry status shows it silent, its broker's state unknown (not
// "connected"), and, once it is older than --relay-forget-after, counts
// it without listing it. A library relay records its broker's address,
// not the publisher's Go type.
func TestStatusShowsASilentRelay(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	srv, err := natsembed.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	pub, err := ferrynats.Dial(b.ctx, srv.ClientURL(), &ferrynats.DialConfig{Config: ferrynats.Config{Stream: "EDGES",
		Subjects: []string{"edges.>"}, Declare: true}})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close() })
	r, err := ferry.NewRelay(b.st.Driver, pub, &ferry.RelayConfig{Heartbeat: ferry.HeartbeatConfig{Interval: 20 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	status := func() ferryadmin.StatusReport {
		t.Helper()
		code, out, errOut := b.cli(t, "status", "--json")
		require.Equal(t, exitOK, code, errOut)
		var rep ferryadmin.StatusReport
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		return rep
	}
	var rep ferryadmin.StatusReport
	testsvc.WaitFor(t, 30*time.Second, func() bool { rep = status(); return len(rep.Relays) == 1 && rep.Relays[0].BrokerConnected },
		func() string { return fmt.Sprintf("the relay beats: %+v", rep.Relays) })
	beat := rep.Relays[0].RelayBeat
	require.Equal(t, r.ID(), beat.ID)
	require.Equal(t, srv.ClientURL(), beat.Broker, "the broker's address, not *ferrynats.Publisher")
	require.NoError(t, r.Stop(b.ctx))

	// The same relay, killed: its last row stays and ages.
	require.NoError(t, b.st.Driver.Beat(b.ctx, beat))
	age := func(ago string) {
		t.Helper()
		_, err := b.st.DB.ExecContext(b.ctx, "UPDATE "+b.st.Driver.Table()+"_relay SET last_seen = "+
			"strftime('%Y-%m-%d %H:%M:%f', 'now', '"+ago+"') WHERE relay_id = ?", beat.ID)
		require.NoError(t, err)
	}
	age("-2 minutes")
	b.enqueue(t, orderPaid("1", "edges.paid"))
	code, out, errOut := b.cli(t, "status")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "relays: 0 alive of 1 recorded\n")
	require.Regexp(t, beat.ID+` +NO +.*`+srv.ClientURL()+` unknown \(the relay is silent\)`, out)
	require.NotContains(t, out, " connected")
	require.Contains(t, out, "no relay alive: 1 event pending")
	rep = status()
	require.Len(t, rep.Relays, 1)
	require.False(t, rep.Relays[0].Alive)
	require.False(t, rep.Relays[0].BrokerConnected, "what a silent relay last said of its broker is not known now")

	age("-25 hours")
	code, out, errOut = b.cli(t, "status")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "relays: none alive; 1 relay silent for more than 24h0m0s, not listed\n")
	require.NotContains(t, out, beat.ID)
	require.Contains(t, out, "(1 relay recorded, the last more than 24h0m0s ago: start ferry relay)")
	rep = status()
	require.Empty(t, rep.Relays)
	require.Equal(t, 1, rep.RelaysForgotten)
	code, out, errOut = b.cli(t, "status", "--relay-forget-after", "48h")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "relays: 0 alive of 1 recorded\n", "listed again within a longer --relay-forget-after")
}

// The RabbitMQ publisher describes its broker by address, without the
// password: the URL it dialled, or the peer of the connection it was given.
func TestAMQPPublisherSaysItsAddress(t *testing.T) {
	t.Parallel()
	conn := testsvc.RabbitMQ(t)
	ctx := testsvc.Context(t, time.Minute)
	raw := testsvc.URL(testsvc.EnvAMQP)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	p, err := ferryamqp.New(ctx, conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.Equal(t, "amqp://"+conn.RemoteAddr().String()+"/", p.String())
	d, err := ferryamqp.Dial(ctx, raw, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.Equal(t, ferrytype.RedactURL(raw), d.String())
	if pw, ok := u.User.Password(); ok {
		require.NotContains(t, d.String(), ":"+pw+"@")
	}
}
