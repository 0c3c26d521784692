package ferrytype_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
)

// Every form a password takes in a URL or a DSN is redacted, the URL as a
// whole or inside a message.
func TestRedactURLEveryForm(t *testing.T) {
	const pw = "s3cr3tpw"
	cases := map[string]string{
		"postgres://app:" + pw + "@db:5432/app":                            "postgres://app:xxxxx@db:5432/app",
		"postgres://db:5432/app?password=" + pw:                            "postgres://db:5432/app?password=xxxxx",
		"postgres://db:5432/app?sslmode=require&sslpassword=" + pw:         "postgres://db:5432/app?sslmode=require&sslpassword=xxxxx",
		"mysql://root@db/app?pass=" + pw + "&timeout=2s":                   "mysql://root@db/app?pass=xxxxx&timeout=2s",
		"postgres://app:s3cr@3tpw@db:5432/app":                             "postgres://app:xxxxx@db:5432/app",
		"postgres://app:s3cr 3tpw@db:5432/app":                             "postgres://app:xxxxx@db:5432/app",
		"postgres://app:s3:cr3tpw@db:5432/app":                             "postgres://app:xxxxx@db:5432/app",
		"host=db user=app password=" + pw + " dbname=app":                  "host=db user=app password=xxxxx dbname=app",
		"host=db user=app password='s3cr 3tpw' dbname=app":                 "host=db user=app password='xxxxx' dbname=app",
		`host=db password = "s3cr\"3tpw" dbname=app`:                       `host=db password = "xxxxx" dbname=app`,
		"root:s3cr@3:tpw@tcp(127.0.0.1:3306)/app":                          "root:xxxxx@tcp(127.0.0.1:3306)/app",
		"nats://" + pw + "@127.0.0.1:4222":                                 "nats://xxxxx@127.0.0.1:4222",
		"nats://u:" + pw + "@h1:4222,nats://" + pw + "@h2:4222":            "nats://u:xxxxx@h1:4222,nats://xxxxx@h2:4222",
		"amqps://guest:" + pw + "@mq:5671/vh":                              "amqps://guest:xxxxx@mq:5671/vh",
		"database URL postgres://db/app?password=" + pw + ": cannot parse": "database URL postgres://db/app?password=xxxxx: cannot parse",
		"amqp://guest@mq:5672/":                                            "amqp://guest@mq:5672/",
	}
	for in, want := range cases {
		got := ferrytype.RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "3tpw", in)
	}
}

// A driver's error that quotes a piece of the URL (what follows an
// unencoded @ in the password) loses it too; the error chain stays.
func TestRedactErrorRemovesPiecesOfThePassword(t *testing.T) {
	raw := "postgres://app:pass@word1234@127.0.0.1:5432/app"
	base := errors.New("hostname resolving error: lookup word1234@127.0.0.1: no such host")
	err := ferrytype.RedactError(fmt.Errorf("open: %w", base), raw)
	require.NotContains(t, err.Error(), "word1234")
	require.ErrorIs(t, err, base)
	require.Nil(t, ferrytype.RedactError(nil, raw))
}

// fuzzTemplate holds the fixed text FuzzRedactURL puts around a
// password: a password found in it proves nothing.
const fuzzTemplate = "postgres:// /app?sslmode=disable&password= sslpassword= mysql:// ?timeout=2s host= user= password='' dbname=app" +
	" nats:// @tcp( amqp:// /vhost open : dial tcp: connection refused driver said: and xxxxx"

// FuzzRedactURL: for URLs and DSNs of every form holding a known password,
// the redacted text never holds the password, alone or in a message, and
// RedactURL never panics on any input.
func FuzzRedactURL(f *testing.F) {
	f.Add("pass", "app", "db:5432", uint8(0))
	f.Add("p@ss w:rd", "root", "127.0.0.1:3306", uint8(1))
	f.Add("s3cr'et\\", "u", "h", uint8(4))
	f.Add("tok3n", "", "nats.local:4222", uint8(6))
	f.Add("a b@c:d/e", "guest", "[::1]:5672", uint8(7))
	f.Fuzz(func(t *testing.T, pw, user, host string, form uint8) {
		_ = ferrytype.RedactURL(pw + user + host) // never panics
		if len(pw) < 4 || strings.ContainsAny(pw, "?#") || strings.ContainsFunc(pw, unicode.IsControl) || strings.TrimSpace(pw) != pw ||
			strings.Contains(user+host, pw) || strings.ContainsAny(user+host, "@:/?#= \t\r\n'\"&()\\") ||
			strings.Contains(fuzzTemplate, pw) {
			return
		}
		// mk writes the URL or DSN of form with password p.
		mk := func(p string) string {
			switch form % 9 {
			case 0: // userinfo, as written by hand (unencoded)
				if strings.Contains(pw, "/") {
					return "" // ends the authority: must be encoded (the URL checks refuse it)
				}
				return "postgres://" + user + ":" + p + "@" + host + "/app"
			case 1: // userinfo, percent-encoded
				return "mysql://" + url.UserPassword(user, p).String() + "@" + host + "/app?timeout=2s"
			case 2: // a query parameter
				if strings.ContainsAny(pw, "& ") {
					return ""
				}
				return "postgres://" + host + "/app?sslmode=disable&password=" + p
			case 3:
				return "postgres://" + host + "/app?sslpassword=" + url.QueryEscape(p)
			case 4: // keyword DSN, quoted
				esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p)
				return "host=" + host + " user=" + user + " password='" + esc + "' dbname=app"
			case 5: // keyword DSN, unquoted
				if strings.ContainsAny(pw, " '\"") {
					return ""
				}
				return "host=" + host + " password=" + p + " dbname=app"
			case 6: // a NATS token
				if strings.ContainsAny(pw, ":@/") {
					return ""
				}
				return "nats://" + p + "@" + host
			case 7: // go-sql-driver/mysql DSN
				if strings.Contains(pw, " ") && strings.ContainsAny(pw, "=@/") {
					return "" // reads as a keyword DSN, a URL, or ends early: ambiguous
				}
				return user + ":" + p + "@tcp(" + host + ")/app"
			case 8:
				return "amqp://" + user + ":" + url.PathEscape(p) + "@" + host + "/vhost"
			}
			return ""
		}
		// A password the text around it holds already proves nothing.
		if strings.Contains(mk("\x01"), pw) {
			return
		}
		in := mk(pw)
		if in == "" {
			return
		}
		texts := []string{in}
		// An unencoded / or @ and a space in a URL's password (which the URL
		// checks refuse) leave free text ambiguous: where the URL ends.
		ambiguous := form%9 == 0 && strings.Contains(pw, " ") && strings.ContainsAny(pw, "/@")
		if !ambiguous && !strings.Contains(pw, ": ") && !strings.ContainsAny(pw, "\n\r") && (form%9 != 7 || !strings.Contains(pw, " ")) {
			// In free text a password with a space is told from the
			// message around it by the @ after it, and by no ": " (in a
			// URL; in a go-sql-driver DSN not at all).
			texts = append(texts, "open "+in+": dial tcp: connection refused")
		}
		for _, s := range texts {
			got := ferrytype.RedactURL(s)
			if strings.Contains(got, pw) {
				t.Fatalf("RedactURL(%q) = %q holds the password %q", s, got, pw)
			}
			if enc := url.QueryEscape(pw); strings.Contains(got, enc) {
				t.Fatalf("RedactURL(%q) = %q holds the encoded password %q", s, got, enc)
			}
		}
		if got := ferrytype.RedactSecrets("driver said: "+pw+" and "+in, in); strings.Contains(got, pw) {
			t.Fatalf("RedactSecrets(..., %q) = %q holds the password", in, got)
		}
	})
}

// FuzzValidateIdentifier: a name ValidateIdentifier accepts is safe to
// quote in each dialect's way (PostgreSQL and SQLite "name", MySQL
// `name`): the quoted identifier holds one identifier, the name itself,
// and nothing can end the quoting early or follow it.
func FuzzValidateIdentifier(f *testing.F) {
	for _, s := range []string{"outbox_event", "x\"; DROP TABLE y; --", "a`b", "_", "1a", "é", strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ferrytype.ValidateIdentifier("table", name, 63)
		if err != nil {
			if !errors.Is(err, ferrytype.ErrInvalidIdentifier) {
				t.Fatalf("error %v is not ErrInvalidIdentifier", err)
			}
			return
		}
		for _, q := range []string{`"`, "`"} {
			quoted := q + name + q
			inner, ok := unquote(quoted, q[0])
			if !ok || inner != name {
				t.Fatalf("%s does not read back as the identifier %q", quoted, name)
			}
		}
		for _, r := range name {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				t.Fatalf("accepted %q holds %q", name, r)
			}
		}
	})
}

// unquote reads one quoted identifier (quote q, doubled inside to stand
// for itself) that must span all of s, as a SQL lexer does.
func unquote(s string, q byte) (string, bool) {
	if len(s) < 2 || s[0] != q {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != q {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == q {
			b.WriteByte(q)
			i++
			continue
		}
		return b.String(), i == len(s)-1 // the closing quote must end s
	}
	return "", false
}

// A user name that is the password (RabbitMQ's guest:guest) is redacted
// with it, and a URL reads the same whether it was redacted by pattern
// alone or also by its known secrets: one form in every message.
func TestRedactUserEqualToPasswordReadsTheSameEverywhere(t *testing.T) {
	cases := map[string]string{
		"amqp://guest:guest@mq:5672/":                     "amqp://xxxxx:xxxxx@mq:5672/",
		"root:root@tcp(127.0.0.1:3306)/app":               "xxxxx:xxxxx@tcp(127.0.0.1:3306)/app",
		"nats://app:app@h1:4222,nats://app:other@h2:4222": "nats://xxxxx:xxxxx@h1:4222,nats://app:xxxxx@h2:4222",
		"amqp://guest:guest2@mq:5672/":                    "amqp://guest:xxxxx@mq:5672/",
	}
	for in, want := range cases {
		require.Equal(t, want, ferrytype.RedactURL(in), in)
		require.Equal(t, want, ferrytype.RedactSecrets(in, in), in)
		msg := "dial " + in + ": connection refused"
		require.Equal(t, "dial "+want+": connection refused", ferrytype.RedactURL(msg), msg)
		require.Equal(t, "dial "+want+": connection refused", ferrytype.RedactSecrets(msg, in), msg)
	}
}
