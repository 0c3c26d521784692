package tlsfiles_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/internal/tlsfiles"
)

var names = tlsfiles.Names{CA: "tls_ca", Cert: "tls_cert", Key: "tls_key"}

func write(t *testing.T, name string, b []byte) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func TestApply(t *testing.T) {
	certs := testenv.NewCerts(t)
	ca, cert, key := write(t, "ca.pem", certs.CAPEM), write(t, "cert.pem", certs.CertPEM), write(t, "key.pem", certs.KeyPEM)

	var c tls.Config
	require.NoError(t, tlsfiles.Apply(&c, ca, cert, key, names))
	require.NotNil(t, c.RootCAs)
	require.Len(t, c.Certificates, 1)

	require.NoError(t, tlsfiles.Apply(&tls.Config{}, "", "", "", names), "nothing named, nothing to do")
	require.ErrorContains(t, tlsfiles.Apply(&tls.Config{}, "/nonexistent/ca.pem", "", "", names), "tls_ca: open /nonexistent/ca.pem")
	require.ErrorContains(t, tlsfiles.Apply(&tls.Config{}, key, "", "", names), "tls_ca "+key+" holds no PEM certificate")
	require.ErrorContains(t, tlsfiles.Apply(&tls.Config{}, "", cert, "", names), "tls_cert and tls_key go together")
	require.ErrorContains(t, tlsfiles.Apply(&tls.Config{}, "", cert, ca, names), "tls_cert/tls_key:")
}
