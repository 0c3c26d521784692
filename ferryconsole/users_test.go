package ferryconsole_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/ferrydev/ferry/ferryconsole"
)

func usersFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func hash(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}

func basic(user, pw string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pw)
	return r
}

// Each user of the file is an operator of their own name; a wrong
// password, an unknown user or no credentials is a 401 with a challenge.
func TestPasswordFileNamesEachOperator(t *testing.T) {
	t.Parallel()
	auth, err := ferryconsole.PasswordFile(usersFile(t, "# on-call\nalice:"+hash(t, "pw-a")+"\n\nbob:"+hash(t, "pw-b")+"\n"))
	require.NoError(t, err)
	for range 2 { // the second time from the cache of checked passwords
		op, err := auth(basic("alice", "pw-a"))
		require.NoError(t, err)
		require.Equal(t, "alice", op)
		op, err = auth(basic("bob", "pw-b"))
		require.NoError(t, err)
		require.Equal(t, "bob", op)
	}
	for _, r := range []*http.Request{basic("alice", "pw-b"), basic("carol", "pw-a"), basic("bob", ""), httptest.NewRequest("GET", "/", nil)} {
		_, err := auth(r)
		var ae *ferryconsole.AuthError
		require.True(t, errors.As(err, &ae), "%v", err)
		require.Contains(t, ae.Challenge, "Basic")
	}
}

// A file that is not a list of users with bcrypt hashes is refused, naming
// its line and never a hash or a password.
func TestPasswordFileRefusesWhatIsNotOne(t *testing.T) {
	t.Parallel()
	h := hash(t, "pw")
	for text, says := range map[string]string{
		"alice":                            "line 1: want name:bcrypt-hash",
		"alice:s3cr3t-plain":               `line 1: the password of "alice" is not a bcrypt hash`,
		"# x\nalice:" + h + "\nalice:" + h: `line 3: user "alice" given twice`,
		":" + h:                            "line 1: user name: empty",
		"al\x01ce:" + h:                    "line 1: user name: holds a control character",
		"# nobody\n\n":                     "names no user",
	} {
		_, err := ferryconsole.PasswordFile(usersFile(t, text))
		require.ErrorContains(t, err, says, "%q", text)
		require.NotContains(t, err.Error(), "s3cr3t-plain")
		require.NotContains(t, err.Error(), h)
	}
	_, err := ferryconsole.PasswordFile(filepath.Join(t.TempDir(), "missing"))
	require.ErrorContains(t, err, "no such file")
}

// Behind an authenticating proxy: a request from the proxy's address is
// the operator its header names; the same header from anywhere else is
// ignored (the fallback decides); the proxy without the header is refused.
func TestTrustedProxyTrustsOnlyTheProxy(t *testing.T) {
	t.Parallel()
	fallback := ferryconsole.BasicAuth("oncall", "pw")
	auth, err := ferryconsole.TrustedProxy("X-Forwarded-User", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"),
		netip.MustParsePrefix("::1/128")}, fallback)
	require.NoError(t, err)
	req := func(from, user string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = from
		if user != "" {
			r.Header.Set("X-Forwarded-User", user)
		}
		return r
	}
	op, err := auth(req("10.0.0.7:41000", "jane.doe@example.com"))
	require.NoError(t, err)
	require.Equal(t, "jane.doe@example.com", op)
	op, err = auth(req("[::1]:41000", "sam"))
	require.NoError(t, err)
	require.Equal(t, "sam", op)
	_, err = auth(req("10.0.0.7:41000", ""))
	require.ErrorContains(t, err, "X-Forwarded-User header: empty")
	_, err = auth(req("10.0.0.7:41000", strings.Repeat("x", 129)))
	require.Error(t, err)
	_, err = auth(req("10.0.1.7:41000", "jane.doe@example.com"))
	require.Error(t, err, "a client that names itself is not trusted")
	r := req("192.0.2.1:5000", "jane.doe@example.com")
	r.SetBasicAuth("oncall", "pw")
	op, err = auth(r)
	require.NoError(t, err)
	require.Equal(t, "oncall", op, "from elsewhere, the fallback decides, the header ignored")

	alone, err := ferryconsole.TrustedProxy("X-Forwarded-User", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, nil)
	require.NoError(t, err)
	_, err = alone(req("192.0.2.1:5000", "jane"))
	require.ErrorContains(t, err, "not from a trusted proxy")
	_, err = ferryconsole.TrustedProxy("", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, nil)
	require.Error(t, err)
	_, err = ferryconsole.TrustedProxy("X-User", nil, nil)
	require.Error(t, err)
}
