package ferryconsole

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/crypto/bcrypt"
)

// maxOperatorLen bounds an operator's name, from a users file or a proxy's
// header.
const maxOperatorLen = 128

// PasswordFile returns an Authenticate function that accepts HTTP basic
// authentication from the users of a file, one "name:bcrypt-hash" per line
// (what `htpasswd -nB name` prints; blank lines and lines starting with #
// are skipped), and names the operator by the user's name, so that every
// audit line says who acted. The file is read once; a file that is not
// such a list is an error naming its line, never its hashes. A password
// checked once is remembered for a few minutes (bcrypt costs tens of
// milliseconds, and a browser sends the credentials with every request).
func PasswordFile(path string) (func(*http.Request) (string, error), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ferryconsole: users file: %w", err)
	}
	users := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("ferryconsole: users file %s line %d: want name:bcrypt-hash", path, n)
		case checkOperator(name) != nil:
			return nil, fmt.Errorf("ferryconsole: users file %s line %d: user name: %v", path, n, checkOperator(name))
		case users[name] != nil:
			return nil, fmt.Errorf("ferryconsole: users file %s line %d: user %q given twice", path, n, name)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil || !strings.HasPrefix(hash, "$2") {
			return nil, fmt.Errorf("ferryconsole: users file %s line %d: the password of %q is not a bcrypt hash "+
				"(make one with htpasswd -nB %s); plain passwords are not accepted", path, n, name, name)
		}
		users[name] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ferryconsole: users file %s: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("ferryconsole: users file %s names no user", path)
	}
	// Checked for an unknown user, so that the time taken does not tell
	// which names exist.
	dummy, err := bcrypt.GenerateFromPassword([]byte("ferry console: no such user"), bcrypt.DefaultCost)
	if err != nil {
		return nil, err
	}
	c := newVerifiedCache()
	challenge := `Basic realm="ferry console", charset="UTF-8"`
	return func(r *http.Request) (string, error) {
		u, p, ok := r.BasicAuth()
		if !ok {
			return "", &AuthError{Challenge: challenge, Reason: "no basic credentials"}
		}
		if c.known(u, p) {
			return u, nil
		}
		hash, found := users[u]
		if !found {
			hash = dummy
		}
		if bcrypt.CompareHashAndPassword(hash, []byte(p)) != nil || !found {
			return "", &AuthError{Challenge: challenge, Reason: "wrong user or password"}
		}
		c.add(u, p)
		return u, nil
	}, nil
}

// verifiedCache remembers credentials bcrypt accepted, by an HMAC under a
// key of the process (never the password itself), for verifiedFor.
type verifiedCache struct {
	key []byte
	mu  sync.Mutex
	at  map[string]time.Time
}

const (
	verifiedFor = 5 * time.Minute
	maxVerified = 1000
)

func newVerifiedCache() *verifiedCache {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &verifiedCache{key: key, at: map[string]time.Time{}}
}

func (c *verifiedCache) sum(u, p string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(u))
	m.Write([]byte{0})
	m.Write([]byte(p))
	return string(m.Sum(nil))
}

func (c *verifiedCache) known(u, p string) bool {
	k := c.sum(u, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[k]
	return ok && time.Since(at) < verifiedFor
}

func (c *verifiedCache) add(u, p string) {
	k := c.sum(u, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.at) >= maxVerified {
		for k2, at := range c.at {
			if time.Since(at) >= verifiedFor {
				delete(c.at, k2)
			}
		}
		if len(c.at) >= maxVerified {
			clear(c.at)
		}
	}
	c.at[k] = time.Now()
}

// checkOperator validates an operator's name.
func checkOperator(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > maxOperatorLen:
		return fmt.Errorf("longer than %d bytes", maxOperatorLen)
	case strings.IndexFunc(name, func(c rune) bool { return !unicode.IsPrint(c) || c == ':' }) >= 0:
		return errors.New("holds a control character or a colon")
	}
	return nil
}

// TrustedProxy returns an Authenticate function for a console behind an
// authenticating proxy (oauth2-proxy, an identity-aware proxy, a
// Kubernetes ingress with SSO): a request from one of proxies (by its
// remote address) is the operator its header names, and one from the
// proxy without the header is refused; a request from anywhere else is
// left to fallback (nil: refused), the header ignored, so that no client
// names itself. Mind the proxy: it must set the header on every request it
// forwards and drop the one its clients send.
func TrustedProxy(header string, proxies []netip.Prefix, fallback func(*http.Request) (string, error)) (func(*http.Request) (string, error), error) {
	if header == "" || len(proxies) == 0 {
		return nil, errors.New("ferryconsole.TrustedProxy: a header and at least one proxy address are needed")
	}
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (string, error) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		from := err == nil && inAny(ap.Addr().Unmap(), proxies)
		if !from {
			if fallback != nil {
				return fallback(r)
			}
			return "", &AuthError{Reason: "not from a trusted proxy (" + r.RemoteAddr + ")"}
		}
		name := r.Header.Get(header)
		if err := checkOperator(name); err != nil {
			return "", &AuthError{Reason: fmt.Sprintf("the trusted proxy's %s header: %v", header, err)}
		}
		return name, nil
	}, nil
}

func inAny(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
