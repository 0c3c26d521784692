package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// selfSigned writes a server certificate for 127.0.0.1 and its key, and
// returns their files and a pool that trusts the certificate's CA.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c := testsvc.NewCerts(t)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, c.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, c.KeyPEM, 0o600))
	return certFile, keyFile, c.Pool()
}

// migratedSQLite returns the URL of a migrated SQLite outbox.
func migratedSQLite(t *testing.T) string {
	t.Helper()
	db := "sqlite://" + t.TempDir() + "/x.db"
	code, out, errOut := ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	return db
}

// --tls-cert and --tls-key serve the console over HTTPS only; half of the
// pair, or files that are not one, are a usage error (exit 2).
func TestConsoleServesHTTPS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	db := migratedSQLite(t)
	addr := freePort(t)
	cmd, out := child(t, []string{envConsoleUser + "=alice", envConsolePassword + "=pw-alice"},
		"console", "--database-url", db, "--http-addr", addr, "--tls-cert", certFile, "--tls-key", keyFile)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(user string) (int, error) {
		req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
		req.SetBasicAuth(user, "pw-alice")
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get("alice"); return code == http.StatusOK },
		func() string {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return "the console answers over HTTPS:\n" + out.String()
		})
	code, err := get("mallory")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/")
	if err == nil {
		res.Body.Close()
		require.NotEqual(t, http.StatusOK, res.StatusCode, "plain HTTP is not served")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "addr=https://"+addr+"/")
	require.NotContains(t, out.String(), "plain HTTP on an address other than loopback")
}

func TestConsoleRefusesHalfATLSPair(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	t.Setenv(envConsoleToken, "tok")
	certFile, keyFile, _ := selfSigned(t)
	db := migratedSQLite(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", keyFile, "--tls-key", certFile}, "--tls-cert " + keyFile},
		{[]string{"--tls-cert", certFile, "--tls-key", filepath.Join(t.TempDir(), "missing.pem")}, "no such file"},
	} {
		code, _, errOut := ferryCLI(t, append([]string{"console", "--database-url", db}, c.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.says)
	}
}

// Plain HTTP with credentials on an address other than loopback is said
// at start, at WARN.
func TestConsoleWarnsOfCredentialsInClear(t *testing.T) {
	t.Parallel()
	db := migratedSQLite(t)
	addr := strings.Replace(freePort(t), "127.0.0.1", "0.0.0.0", 1)
	cmd, out := child(t, []string{envConsoleUser + "=alice", envConsolePassword + "=pw-alice"},
		"console", "--database-url", db, "--http-addr", addr)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	local := strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)
	testsvc.WaitFor(t, 30*time.Second, func() bool { code, _ := get(t, "http://"+local+"/"); return code == http.StatusUnauthorized },
		func() string { _ = cmd.Process.Kill(); _ = cmd.Wait(); return "the console answers:\n" + out.String() })
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "level=WARN msg=\"the console serves plain HTTP on an address other than loopback")
}
