package ferrykafka_test

import (
	"crypto/tls"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	t.Run("Hosts", func(t *testing.T) {
		c, err := ferrykafka.ParseURL("kafka://b1:9092,b2,[::1]:19092,10.0.0.7:9093")
		require.NoError(t, err)
		require.Equal(t, []string{"b1:9092", "b2:9092", "[::1]:19092", "10.0.0.7:9093"}, c.Seeds)
		require.Nil(t, c.TLS)
		require.Empty(t, c.SASL)
	})
	t.Run("TLSLeavesServerNameToFranzGo", func(t *testing.T) {
		c, err := ferrykafka.ParseURL("KAFKAS://b1:9093?client_id=orders-relay")
		require.NoError(t, err)
		require.NotNil(t, c.TLS)
		require.Empty(t, c.TLS.ServerName, "franz-go sets it to each broker's host")
		require.Equal(t, uint16(tls.VersionTLS12), c.TLS.MinVersion)
		require.Equal(t, "orders-relay", c.ClientID)
	})
	t.Run("SASL", func(t *testing.T) {
		c, err := ferrykafka.ParseURL("kafkas://relay:p%40ss%3Aw0rd@b1:9093?sasl=SCRAM-SHA-512")
		require.NoError(t, err)
		require.Equal(t, ferrykafka.SASLScramSHA512, c.SASL)
		require.Equal(t, "relay", c.User)
		require.Equal(t, "p@ss:w0rd", c.Password)
		require.NotContains(t, c.String(), "w0rd")
		require.Equal(t, "kafkas://relay:xxxxx@b1:9093?sasl=scram-sha-512", c.String())
		c, err = ferrykafka.ParseURL("kafka://u:pw12@b1?sasl=plain&insecure_sasl=true")
		require.NoError(t, err)
		require.Equal(t, ferrykafka.SASLPlain, c.SASL)
		require.Equal(t, "kafka://u:xxxxx@b1:9092?insecure_sasl=true&sasl=plain", c.String())
	})
}

func TestParseURLRefuses(t *testing.T) {
	t.Parallel()
	const pw = "hunter2secret"
	for name, c := range map[string]struct{ url, want string }{
		"NoScheme":          {"b1:9092", "no scheme"},
		"OtherScheme":       {"nats://b1:4222", `unknown scheme "nats"`},
		"Spaces":            {" kafka://b1", "leading or trailing spaces"},
		"NoHost":            {"kafka://", "no broker host"},
		"EmptyHost":         {"kafka://b1:9092,,b2", "empty host"},
		"BadHostChar":       {"kafka://b 1:9092", "a host name has only"},
		"BadPort":           {"kafka://b1:90x2", `port "90x2"`},
		"PortRange":         {"kafka://b1:70000", `port "70000"`},
		"BareIPv6":          {"kafka://::1:9092", "in brackets"},
		"OpenIPv6":          {"kafka://[::1:9092", "closing ]"},
		"Path":              {"kafka://b1:9092/topic", "no path"},
		"Fragment":          {"kafka://b1#x", "no #fragment"},
		"UnknownOption":     {"kafka://b1?acks=1", `unknown option "acks"`},
		"RepeatedOption":    {"kafka://b1?client_id=a&client_id=b", "given 2 times"},
		"BadClientID":       {"kafka://b1?client_id=a%20b", "client_id"},
		"BadSASL":           {"kafkas://u:" + pw + "@b1?sasl=gssapi", `sasl="gssapi"`},
		"UserWithoutSASL":   {"kafkas://u:" + pw + "@b1", "no sasl= mechanism"},
		"SASLWithoutUser":   {"kafkas://b1?sasl=plain", "needs user:password@"},
		"NoPassword":        {"kafkas://u@b1?sasl=plain", "has no password"},
		"PlainTextPassword": {"kafka://u:" + pw + "@b1?sasl=scram-sha-256", "use kafkas://, or add insecure_sasl=true"},
		"BadInsecureSASL":   {"kafka://u:" + pw + "@b1?sasl=plain&insecure_sasl=yes!", "insecure_sasl"},
		"TLSOptionOnKafka":  {"kafka://b1?tls_ca=/etc/ca.pem", "tls_ca needs kafkas://"},
		"MissingCA":         {"kafkas://u:" + pw + "@b1?sasl=plain&tls_ca=/nonexistent/ca.pem", "tls_ca"},
		"CertWithoutKey":    {"kafkas://b1?tls_cert=/x.pem", "tls_cert and tls_key go together"},
		"BadEscape":         {"kafkas://u:" + pw + "%zz@b1?sasl=plain", "percent-encoding"},
		"BadQuery":          {"kafkas://u:" + pw + "@b1?sasl=plain;x=1", "use &"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ferrykafka.ParseURL(c.url)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
			require.NotContains(t, err.Error(), pw)
			require.NotContains(t, err.Error(), pw[:8])
		})
	}
}

// FuzzParseURL: ParseURL never panics; an accepted URL's hosts read back
// the same from a URL of its seeds and from its String; the password
// never appears in an error.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"kafka://b1:9092,b2", "kafkas://u:pw@b1:9093?sasl=plain", "kafka://[::1]:9092",
		"kafka://u:s3cret@b1?sasl=scram-sha-256&insecure_sasl=true&client_id=x", "kafka://b1/x", "kafka://[::1",
		"kafkas://u:p%zz@h?sasl=plain", "kafka://h:0", "kafka://h?a=%", "kafka://u:p@ss@h/db?sasl=plain"} {
		f.Add(s, "s3cr3tpw")
	}
	f.Fuzz(func(t *testing.T, raw, pw string) {
		c, err := ferrykafka.ParseURL(raw)
		if err == nil {
			for _, again := range []string{"kafka://" + strings.Join(c.Seeds, ","), c.String()} {
				c2, err := ferrykafka.ParseURL(again)
				require.NoError(t, err, "%q read back as %q", raw, again)
				require.Equal(t, c.Seeds, c2.Seeds, "%q read back as %q", raw, again)
			}
		}
		// strconv.Quote(raw): an error quotes the scheme it refuses, and
		// the quoted form's escapes (\x00) hold digits raw does not.
		if len(pw) < 4 || strings.ContainsAny(pw, "?#\\\"' \t\r\n%") || strings.Contains(strconv.Quote(raw), pw) ||
			!strings.Contains(raw, "://") || strings.ToValidUTF8(pw, "") != pw {
			return // no password to insert, or one an error's %q would garble
		}
		if _, err := ferrykafka.ParseURL(raw); err != nil && strings.Contains(err.Error(), pw) {
			return // the error says it without any password ("0000000: unknown scheme" holds "000:")
		}
		for _, u := range []string{
			strings.Replace(raw, "://", "://user:"+pw+"@", 1),
			strings.Replace(raw, "://", "://user:"+url.PathEscape(pw)+"@", 1),
		} {
			if _, err := ferrykafka.ParseURL(u); err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("the error for %q holds the password %q: %v", u, pw, err)
			}
		}
	})
}
