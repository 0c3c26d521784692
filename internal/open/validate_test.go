package open_test

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// Every malformed URL is a configuration error that says what is wrong,
// found without connecting; well-formed ones pass.
func TestValidateURLs(t *testing.T) {
	t.Parallel()
	bad := []struct{ url, want string }{
		{"mysql://root@127.0.0.1:99999/test", `port "99999" is not a number within 1-65535`},
		{"mysql://root@127.0.0.1:0/test", `port "0" is not a number within 1-65535`},
		{"postgres://postgres@127.0.0.1:abc/test", `port "abc"`},
		{"postgres://127.0.0.1:5432,h2:99999/test", `port "99999"`},
		{"mysql://:3306/test", "has no host"},
		{"postgres:///test", "has no host"},
		{"oracle://u@h/x", `unknown scheme "oracle"`},
		{"127.0.0.1:5432/test", "has no scheme"},
		{"localhost:5432/test", "has no scheme (localhost is read as the host)"},
		{"host=127.0.0.1 user=postgres password=s3cr3tpw dbname=test", "is a keyword connection string"},
		{"root:s3cr3tpw@tcp(127.0.0.1:3306)/test", "is a go-sql-driver DSN"},
		{"postgres://u:s3cr3tpw%zz@127.0.0.1/test", "bad percent-encoding"},
		{"postgres://127.0.0.1/te%zzst", "bad percent-encoding"},
		{"postgres://u:s3cr@3tpw@127.0.0.1/test", "unencoded @: write it as %40"},
		{"postgres://u:s3cr 3tpw@127.0.0.1/test", "holds a space: write it as %20"},
		{"postgres://127.0.0.1/test?connect_timeout=zz", "cannot parse"},
		{"mysql://root@127.0.0.1/test?timeout=zz", "invalid config"},
		{" postgres://127.0.0.1/test", "leading or trailing spaces"},
		{"sqlite:", "has no file path"},
	}
	for _, c := range bad {
		err := open.ValidateDatabaseURL(c.url)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, c.url)
		require.ErrorContains(t, err, c.want, c.url)
		require.NotContains(t, err.Error(), "3tpw", c.url)
	}
	badBroker := []struct{ url, want string }{
		{"nats://127.0.0.1:abc", `port "abc"`},
		{"nats://127.0.0.1:99999", `port "99999"`},
		{"nats://127.0.0.1:4222,nats://h2:0", `port "0"`},
		{"amqp://guest:s3cr3tpw@127.0.0.1:99999/", `port "99999"`},
		{"amqp://guest:s3cr3tpw@127.0.0.1:abc/", `port "abc"`},
		{"amqp://guest:s3cr3tpw@:5672/", "has no host"},
		{"nats://s3cr3tpw@:4222", "has no host"},
		{"mqtt://h:1883", `unknown scheme "mqtt" (want nats, tls, amqp, amqps, kafka, kafkas, redis or rediss)`},
		{"kafka://h:99999", `port "99999"`},
		{"kafka://relay:s3cr3tpw@h:9092", "no sasl= mechanism"},
		{"kafka://relay:s3cr3tpw@h:9092?sasl=plain", "insecure_sasl"},
		{"kafka://h:9092?acks=0", `unknown option "acks"`},
		{"localhost:4222", "has no scheme"},
		{"amqp://gu%est@127.0.0.1/", "bad percent-encoding"},
		{"redis://:s3cr3tpw@h:6379?tls_ca=/etc/ca.pem", "need rediss://"},
		{"redis://:s3cr3tpw@h:6379?pool=zz", "unexpected option"},
		{"rediss://h:6379?tls_cert=/etc/c.pem", "tls_cert and tls_key go together"},
		{"rediss://h:6379?tls_ca=/nonexistent/ca.pem", "tls_ca"},
	}
	for _, c := range badBroker {
		err := open.ValidateBrokerURL(c.url)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, c.url)
		require.ErrorContains(t, err, c.want, c.url)
		require.NotContains(t, err.Error(), "3tpw", c.url)
	}
	for _, ok := range []string{"mysql://root:p%40ss@127.0.0.1:3306/test?timeout=2s", "mariadb://root@db/app",
		"mysql://root@/app?socket=/run/mysqld/mysqld.sock", "postgres://u:p%20w@127.0.0.1:5432/test?sslmode=disable",
		"postgresql://h1:5432,h2:5433/app", "postgres:///app?host=/var/run/postgresql", "postgres://[::1]:5432/app",
		"sqlite:///tmp/x.db", "sqlite::memory:"} {
		require.NoError(t, open.ValidateDatabaseURL(ok), ok)
	}
	for _, ok := range []string{"nats://127.0.0.1:4222", "nats://tok3n@h:4222", "tls://h:4222,nats://h2", "NATS://h",
		"amqp://guest:guest@127.0.0.1:5672/", "amqps://u:p%2Fw@mq/vhost",
		"kafka://b1:9092,b2", "KAFKAS://relay:p%2Fw@b1:9093?sasl=scram-sha-512"} {
		require.NoError(t, open.ValidateBrokerURL(ok), ok)
	}
}

// The drivers' codes for what no retry mends are configuration errors;
// everything else is transient.
func TestPermanent(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return errors.Join(errors.New("open h"), err) }
	for name, err := range map[string]error{
		"PostgresNoDatabase": wrap(&pgconn.PgError{Code: "3D000"}),
		"PostgresAuth":       wrap(&pgconn.PgError{Code: "28P01"}),
		"PostgresNoRole":     wrap(&pgconn.PgError{Code: "28000"}),
		"MySQLNoDatabase":    wrap(&mysql.MySQLError{Number: 1049}),
		"MySQLAccessDenied":  wrap(&mysql.MySQLError{Number: 1045}),
		"AMQPNotFound":       wrap(&amqp.Error{Code: amqp.NotFound}),
		"AMQPCredentials":    wrap(amqp.ErrCredentials),
		"NATSNoStream":       wrap(jetstream.ErrStreamNotFound),
		"KafkaNoTopic":       wrap(kerr.UnknownTopicOrPartition),
		"KafkaSASL":          wrap(kerr.SaslAuthenticationFailed),
		"KafkaTopicACL":      wrap(kerr.TopicAuthorizationFailed),
	} {
		p := open.Permanent(err)
		require.ErrorIs(t, p, ferrytype.ErrInvalidConfig, name)
		require.Equal(t, p, open.Permanent(p), "%s: classing twice changes nothing", name)
	}
	for name, err := range map[string]error{
		"Nil":              nil,
		"Refused":          errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
		"PostgresShutdown": wrap(&pgconn.PgError{Code: "57P01"}),
		"MySQLTooMany":     wrap(&mysql.MySQLError{Number: 1040}),
		"AMQPClosed":       wrap(amqp.ErrClosed),
		"KafkaNoLeader":    wrap(kerr.LeaderNotAvailable),
		"DNS":              &url.Error{Op: "dial", Err: errors.New("lookup db: temporary failure")},
	} {
		require.NoError(t, open.Permanent(err), name)
	}
}

// FuzzValidateURL: validating any database or broker URL never panics,
// and its error never holds the URL's password.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{"mysql://root:s3cr3tpw@127.0.0.1:3306/test", "postgres://u:pw@h1:5432,h2/db?sslmode=disable",
		"nats://tok3n@h:4222,tls://h2", "amqp://guest:guest@127.0.0.1:abc/", "sqlite:///tmp/x.db", "host=h password='a b'",
		"root:pw@tcp(h:3306)/db", "postgres://[::1", "mysql://%zz@h", "postgres://u:p@ss@h/db", "amqp://u:p ss@h/"} {
		f.Add(s, "s3cr3tpw")
	}
	f.Fuzz(func(t *testing.T, raw, pw string) {
		_ = open.ValidateDatabaseURL(raw)
		_ = open.ValidateBrokerURL(raw)
		// The errors name a scheme lowercased: a password found in the
		// URL in any case is no password to look for.
		if len(pw) < 4 || strings.ContainsAny(pw, "?#\\\"'\r\n\t ") || strings.Contains(strings.ToLower(raw), strings.ToLower(pw)) ||
			!strings.Contains(raw, "://") || strconv.Quote(raw+pw) != `"`+raw+pw+`"` {
			return // no password to insert, or one an error's %q would garble
		}
		for _, u := range []string{
			strings.Replace(raw, "://", "://user:"+pw+"@", 1),
			strings.Replace(raw, "://", "://user:"+url.PathEscape(pw)+"@", 1),
		} {
			for _, err := range []error{open.ValidateDatabaseURL(u), open.ValidateBrokerURL(u)} {
				if err != nil && strings.Contains(err.Error(), pw) {
					t.Fatalf("the error for %q holds the password %q: %v", u, pw, err)
				}
			}
		}
	})
}
