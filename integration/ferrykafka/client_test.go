package ferrykafka_test

import (
	"crypto/tls"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// ParseURL reads the CA file tls_ca (or tls-ca) names into the TLS config.
func TestParseURLTLSFiles(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, testsvc.NewCerts(t).CAPEM, 0o600))
	for _, q := range []string{"tls_ca=" + url.QueryEscape(ca), "tls-ca=" + url.QueryEscape(ca)} {
		c, err := ferrykafka.ParseURL("kafkas://b1:9093?" + q + "&tls_insecure_skip_verify=false")
		require.NoError(t, err, q)
		require.NotNil(t, c.TLS.RootCAs)
		require.False(t, c.TLS.InsecureSkipVerify)
	}
}

// SASL against a kfake cluster that requires it: the right password
// publishes, a wrong one fails to connect without showing it.
func TestDialSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{ferrykafka.SASLPlain, ferrykafka.SASLScramSHA256, ferrykafka.SASLScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			k := testsvc.NewKafka(t, kfake.EnableSASL(), kfake.Superuser(strings.ToUpper(mech), "relay", "c0rrect-horse"))
			ctx := testsvc.Context(t, 30*time.Second)
			base := "kafka://relay:%s@" + strings.Join(k.Seeds, ",") + "?sasl=" + mech + "&insecure_sasl=true"
			p, err := ferrykafka.Dial(ctx, strings.Replace(base, "%s", "c0rrect-horse", 1), &ferrykafka.Config{Declare: true,
				Topics: []string{"orders"}})
			require.NoError(t, err)
			r := p.Publish(ctx, msgs("orders", 1, 1))[0]
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
			// What a heartbeat row records as the relay's broker: the
			// address, without the password.
			require.Contains(t, p.String(), k.Seeds[0])
			require.NotContains(t, p.String(), "c0rrect-horse")
			require.NoError(t, p.Close())
			_, err = ferrykafka.Dial(ctx, strings.Replace(base, "%s", "wr0ng-battery", 1), nil)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "wr0ng-battery")
		})
	}
}

// kafkas:// against a kfake cluster serving TLS with a certificate for
// 127.0.0.1 signed by the CA of tls_ca: franz-go checks it against each
// broker's host, since ParseURL leaves ServerName empty.
func TestDialTLS(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	k := testsvc.NewKafka(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{certs.Server}, MinVersion: tls.VersionTLS12}))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, certs.CAPEM, 0o600))
	ctx := testsvc.Context(t, 30*time.Second)
	p, err := ferrykafka.Dial(ctx, "kafkas://"+strings.Join(k.Seeds, ",")+"?tls_ca="+url.QueryEscape(ca),
		&ferrykafka.Config{Declare: true, Topics: []string{"orders"}})
	require.NoError(t, err)
	defer p.Close()
	r := p.Publish(ctx, msgs("orders", 1, 1))[0]
	require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
	require.True(t, strings.HasPrefix(p.String(), "kafkas://"+strings.Join(k.Seeds, ",")), "the address a heartbeat row records: %s", p)
}

// A publisher on the caller's client says its seed brokers, with kafkas://
// when the client dials TLS.
func TestPublisherOnAClientSaysItsAddress(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	p, err := ferrykafka.New(testsvc.Context(t, 30*time.Second), cl, nil)
	require.NoError(t, err)
	require.Equal(t, "kafka://"+strings.Join(k.Seeds, ","), p.String())
}

func TestDialRedactsPassword(t *testing.T) {
	t.Parallel()
	_, err := ferrykafka.Dial(testsvc.Context(t, 10*time.Second), "kafka://user:s3cretpw@127.0.0.1:1?sasl=plain&insecure_sasl=true", nil)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
}
