package main

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// --users-file: each user of the file signs in as themself; behind a
// proxy, --auth-header and --trusted-proxy name the operator on the
// proxy's requests only.
func TestConsoleUsersFileAndTrustedProxy(t *testing.T) {
	t.Parallel()
	db := migratedSQLite(t)
	var lines string
	for _, u := range []string{"alice", "bob"} {
		h, err := bcrypt.GenerateFromPassword([]byte("pw-"+u), bcrypt.MinCost)
		require.NoError(t, err)
		lines += u + ":" + string(h) + "\n"
	}
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte(lines), 0o600))
	addr := freePort(t)
	cmd, out := child(t, nil, "console", "--database-url", db, "--http-addr", addr, "--users-file", users,
		"--auth-header", "X-Forwarded-User", "--trusted-proxy", "127.0.0.1")
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	status := func(user, pw, header string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		if header != "" {
			req.Header.Set("X-Forwarded-User", header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	testsvc.WaitFor(t, 30*time.Second, func() bool { return status("", "", "jane") == http.StatusOK },
		func() string { _ = cmd.Process.Kill(); _ = cmd.Wait(); return "the console answers:\n" + out.String() })
	// The test client is the trusted proxy (127.0.0.1): the header names
	// the operator; without it, refused.
	require.Equal(t, http.StatusUnauthorized, status("alice", "pw-alice", ""))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())

	addr = freePort(t)
	cmd, out = child(t, nil, "console", "--database-url", db, "--http-addr", addr, "--users-file", users)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testsvc.WaitFor(t, 30*time.Second, func() bool { return status("alice", "pw-alice", "") == http.StatusOK },
		func() string { _ = cmd.Process.Kill(); _ = cmd.Wait(); return "the console answers:\n" + out.String() })
	require.Equal(t, http.StatusOK, status("bob", "pw-bob", ""))
	require.Equal(t, http.StatusUnauthorized, status("bob", "pw-alice", ""))
	require.Equal(t, http.StatusUnauthorized, status("", "", "alice"), "no proxy trusted: the header is nobody")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.NotContains(t, out.String(), "pw-")
}

func TestConsoleRefusesHalfAProxySetup(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	for _, v := range []string{envConsoleUser, envConsolePassword, envConsoleToken, envConsoleSecret} {
		t.Setenv(v, "")
	}
	db := migratedSQLite(t)
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte("alice:plain\n"), 0o600))
	for _, c := range []struct {
		env  map[string]string
		args []string
		says string
	}{
		{nil, []string{"--auth-header", "X-Forwarded-User"}, "--auth-header and --trusted-proxy go together"},
		{nil, []string{"--trusted-proxy", "10.0.0.1"}, "--auth-header and --trusted-proxy go together"},
		{nil, []string{"--auth-header", "X-U", "--trusted-proxy", "ten"}, `--trusted-proxy "ten"`},
		{nil, []string{"--users-file", users}, `the password of "alice" is not a bcrypt hash`},
		{map[string]string{envConsoleToken: "tok"}, []string{"--users-file", users}, "--users-file with"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, _, errOut := ferryCLI(t, append([]string{"console", "--database-url", db}, c.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.says)
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}
