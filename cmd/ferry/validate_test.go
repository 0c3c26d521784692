package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testsvc"
)

const pw = "s3cr3tpw"

// quick bounds a command that must fail before connecting: far below the
// --connect-timeout the relay is given. Relays run with --drain, so that
// one that wrongly connects ends instead of running on.
const quick = 20 * time.Second

// runQuick runs the CLI and checks that it did not wait for a server.
func runQuick(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	start := time.Now()
	code, out, errOut := ferryCLI(t, args...)
	require.Less(t, time.Since(start), quick, "%v waited for a server: %s", args, errOut)
	return code, out, errOut
}

// A malformed database or broker URL is a configuration error found before
// connecting: exit 2 at once, a message that says what is wrong, no
// "retrying", no password.
func TestBadURLsExitTwoBeforeConnecting(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	sqlite := "sqlite:///" + t.TempDir() + "/x.db"
	nats := "nats://127.0.0.1:4222"
	for _, c := range []struct {
		name, db, broker, want string
	}{
		{"MySQLPortOutOfRange", "mysql://root:" + pw + "@127.0.0.1:99999/test", nats, `port "99999" is not a number within 1-65535`},
		{"PostgresPortNotANumber", "postgres://postgres:" + pw + "@127.0.0.1:abc/test", nats, `port "abc"`},
		{"NATSPortNotANumber", sqlite, "nats://127.0.0.1:abc", `broker URL "nats://127.0.0.1:abc": port "abc"`},
		{"NATSPortOutOfRange", sqlite, "nats://" + pw + "@127.0.0.1:99999", `port "99999"`},
		{"AMQPPortOutOfRange", sqlite, "amqp://guest:" + pw + "@127.0.0.1:99999/", `port "99999"`},
		{"AMQPPortNotANumber", sqlite, "amqp://guest:" + pw + "@127.0.0.1:abc/", `port "abc"`},
		{"MySQLNoHost", "mysql://root:" + pw + "@:3306/test", nats, "has no host"},
		{"PostgresNoHost", "postgres:///test", nats, "has no host"},
		{"AMQPNoHost", sqlite, "amqp://guest:" + pw + "@/", "has no host"},
		{"KafkaPortOutOfRange", sqlite, "kafka://127.0.0.1:99999,h2", `port "99999"`},
		{"KafkaPasswordWithoutSASL", sqlite, "kafka://relay:" + pw + "@127.0.0.1:9092", "no sasl= mechanism"},
		{"KafkaUnknownOption", sqlite, "kafkas://127.0.0.1:9093?acks=0", `unknown option "acks"`},
		{"UnknownScheme", "oracle://app:" + pw + "@db/app", nats, `unknown scheme "oracle"`},
		{"BrokerUnknownScheme", sqlite, "mqtt://app:" + pw + "@broker:1883", `unknown scheme "mqtt"`},
		{"NoScheme", "127.0.0.1:5432/test", nats, `database URL "127.0.0.1:5432/test" has no scheme: want mysql://`},
		{"BrokerNoScheme", sqlite, "localhost:4222", `broker URL "localhost:4222" has no scheme`},
		{"KeywordDSN", "host=127.0.0.1 user=postgres password=" + pw + " dbname=test", nats,
			`database URL "host=127.0.0.1 user=postgres password=xxxxx dbname=test" is a keyword connection string`},
		{"MySQLDriverDSN", "root:" + pw + "@tcp(127.0.0.1:3306)/test", nats, "is a go-sql-driver DSN"},
		{"BadPercentEncoding", "postgres://postgres:" + pw + "%zz@127.0.0.1/test", nats, "bad percent-encoding"},
		{"UnencodedAt", "postgres://postgres:s3cr@3tpw@127.0.0.1/test", nats, "unencoded @: write it as %40"},
		{"UnencodedSpace", "postgres://postgres:s3cr 3tpw@127.0.0.1/test", nats, "holds a space: write it as %20"},
		{"UnencodedAtBroker", sqlite, "amqp://guest:s3cr@3tpw@127.0.0.1/", "unencoded @"},
		{"DriverRefusesParameter", "postgres://postgres:" + pw + "@127.0.0.1/test?connect_timeout=soon", nats, "cannot parse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runQuick(t, "relay", "--database-url", c.db, "--broker-url", c.broker, "--connect-timeout", "2m",
				"--drain", "--drain-timeout", "1s")
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "retrying")
			require.NotContains(t, out+errOut, "3tpw")
			if c.db != sqlite {
				code, out, errOut = runQuick(t, "status", "--database-url", c.db)
				require.Equal(t, exitUsage, code, errOut)
				require.Contains(t, errOut, c.want)
				require.NotContains(t, out+errOut, "3tpw")
				t.Setenv(envConsoleToken, "tok")
				for _, flag := range []string{"--database-url", "--inbox-url"} {
					code, out, errOut = runQuick(t, "console", flag, "db="+c.db)
					require.Equal(t, exitUsage, code, errOut)
					require.Contains(t, errOut, c.want)
					require.NotContains(t, out+errOut, "3tpw")
				}
			}
		})
	}
}

// Table names are checked before connecting: with the database
// unreachable, every command that takes a table names the bad one.
func TestBadTableNamesBeforeConnecting(t *testing.T) {
	t.Parallel()
	down := "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"
	bad := "outbox_event; DROP TABLE x"
	for _, args := range [][]string{
		{"relay", "--broker-url", "nats://127.0.0.1:1", "--connect-timeout", "2m", "--table", bad},
		{"relay", "--broker-url", "nats://127.0.0.1:1", "--connect-timeout", "2m", "--table", "a-b"},
		{"migrate", "--table", bad},
		{"status", "--table", bad},
		{"dead", "list", "--table", bad},
		{"purge", "--older-than", "1h", "--table", bad},
		{"reconcile", "--pending-older-than", "1m", "--table", bad},
		{"migrate", "--inbox", "--marker-table", bad},
		{"conflicts", "list", "--conflict-table", bad},
		{"purge", "--markers", "--older-than", "720h", "--marker-table", bad},
		{"bench", "--table", bad},
		{"console", "--table", bad},
		{"console", "--marker-table", bad},
	} {
		code, _, errOut := runQuick(t, append(args, "--database-url", down)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "invalid identifier", args)
		require.Contains(t, errOut, "table", args)
		require.NotContains(t, errOut, "127.0.0.1:1", args)
		require.NotContains(t, errOut, "retrying", args)
	}
}

// passwordForms are the ways a password reaches PostgreSQL in a URL; each
// holds pw.
func passwordForms(base string) map[string]string {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	sep := "?"
	if u.RawQuery != "" {
		sep = "&"
	}
	user := u.User.Username()
	withUser := func(info string) string {
		v := *u
		v.User = nil
		return strings.Replace(v.String(), "://", "://"+info+"@", 1)
	}
	return map[string]string{
		"Userinfo":        withUser(user + ":" + pw),
		"UserinfoEncoded": withUser(url.UserPassword(user, "s3cr@3tpw 1:").String()),
		"QueryPassword":   base + sep + "password=" + pw,
		"QuerySSLPass":    base + sep + "sslpassword=" + pw,
	}
}

// Every form of a password is redacted wherever ferry prints a URL:
// --print-config, status's errors, reconcile's text and JSON.
func TestPasswordsRedactedInEveryOutput(t *testing.T) {
	t.Parallel()
	testsvc.Postgres(t)
	ob := setupOps(t, "sqlite")
	ib := setupInbox(t, "postgres")
	for name, u := range passwordForms(ib.url) {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := ferryCLI(t, "status", "--print-config", "--database-url", u)
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "xxxxx")
			require.NotContains(t, out+errOut, "3tpw")

			code, out, errOut = ferryCLI(t, "relay", "--print-config", "--database-url", u, "--broker-url",
				strings.Replace(u, "postgres://", "amqp://", 1))
			require.Equal(t, exitOK, code, errOut)
			require.NotContains(t, out+errOut, "3tpw")

			cfg := writeFile(t, "ferry.yaml", fmt.Sprintf(`
reconcile:
  window: 1h
  effects:
    - {consumer: points-award, inbox_database_url: %q, marker_table: %s,
       event_type: OrderPaid, key: "order:{aggregate_id}:paid", older_than: 1ms}
`, u, ib.markers))
			for _, format := range [][]string{nil, {"--json"}} {
				code, out, errOut = ob.cli(t, append([]string{"reconcile", "--config", cfg, "--pending-older-than", "0"}, format...)...)
				require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
				require.Contains(t, out, "127.0.0.1:5432")
				require.NotContains(t, out+errOut, "3tpw", "%v:\n%s", format, out)
			}
		})
	}
	// A driver that cannot reach the database quotes it: no password.
	for name, u := range passwordForms("postgres://postgres@127.0.0.1:1/test?connect_timeout=5") {
		code, out, errOut := ferryCLI(t, "status", "--database-url", u)
		require.Equal(t, exitFailed, code, "%s: %s", name, errOut)
		require.Contains(t, errOut, "127.0.0.1:1", name)
		require.NotContains(t, out+errOut, "3tpw", name)
	}
}

// Causes no retry mends are configuration errors: exit 2 at once, naming
// the cause and the fix, instead of retrying for --connect-timeout.
func TestPermanentConnectFailuresExitTwo(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:///" + t.TempDir() + "/x.db"
	var cases []struct{ name, db, broker, want string }
	add := func(name, db, broker, want string) {
		cases = append(cases, struct{ name, db, broker, want string }{name, db, broker, want})
	}
	if testsvc.Postgres(t) != nil {
		pg, err := url.Parse(testsvc.URL(testsvc.EnvPostgres))
		require.NoError(t, err)
		noDB := *pg
		noDB.Path = "/ferry_no_such_database"
		add("PostgresUnknownDatabase", noDB.String(), "nats://127.0.0.1:1", "the database does not exist (PostgreSQL 3D000)")
		noRole := *pg
		noRole.User = url.UserPassword("ferry_no_such_role", pw)
		add("PostgresUnknownRole", noRole.String(), "nats://127.0.0.1:1", "PostgreSQL refused the login (28000)")
	}
	if testsvc.MySQL(t) != nil {
		my, err := url.Parse(testsvc.URL(testsvc.EnvMySQL))
		require.NoError(t, err)
		noDB := *my
		noDB.Path = "/ferry_no_such_database"
		add("MySQLUnknownDatabase", noDB.String(), "nats://127.0.0.1:1", "the database does not exist (MySQL 1049)")
		badPW := *my
		badPW.User = url.UserPassword(my.User.Username(), pw)
		add("MySQLAccessDenied", badPW.String(), "nats://127.0.0.1:1", "MySQL denied access")
	}
	testsvc.NATS(t)
	// Migrated: the relay checks its table before the broker.
	code, _, errOut := runQuick(t, "migrate", "--database-url", sqlite)
	require.Equal(t, exitOK, code, errOut)
	add("NATSMissingStream", sqlite, testsvc.URL(testsvc.EnvNATS), "stream FERRY_NO_SUCH_STREAM does not exist")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"relay", "--database-url", c.db, "--broker-url", c.broker, "--connect-timeout", "2m",
				"--drain", "--drain-timeout", "1s"}
			if c.name == "NATSMissingStream" {
				args = append(args, "--stream", "FERRY_NO_SUCH_STREAM")
			}
			code, out, errOut := runQuick(t, args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "retrying")
			require.NotContains(t, out+errOut, pw)
			if c.db != sqlite {
				code, _, errOut = runQuick(t, "status", "--database-url", c.db)
				require.Equal(t, exitUsage, code, errOut)
				require.Contains(t, errOut, c.want)
			}
		})
	}
}

// A missing RabbitMQ exchange or queue the relay was told to check ends
// the relay at once with exit 2 and the fix.
func TestRelayMissingRabbitMQTopologyExitsTwo(t *testing.T) {
	t.Parallel()
	testsvc.RabbitMQ(t)
	db := "sqlite:///" + filepath.Join(t.TempDir(), "x.db")
	// Migrated: the relay checks its table before the broker.
	code, _, errOut := runQuick(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	for _, c := range []struct{ name, flag, value, want string }{
		{"MissingExchange", "--exchange", "ferry_no_such_exchange",
			"exchange ferry_no_such_exchange does not exist: declare it, or let ferry declare it (--declare)"},
		{"MissingQueue", "--queue", "ferry_no_such_queue", "queue ferry_no_such_queue does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runQuick(t, "relay", "--database-url", db, "--broker-url", testsvc.URL(testsvc.EnvAMQP),
				c.flag, c.value, "--connect-timeout", "2m", "--drain", "--drain-timeout", "1s")
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "retrying")
		})
	}
}
