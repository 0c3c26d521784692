package ferryconsole

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AuthError refuses a request with 401 Unauthorized. Challenge, when
// set, is sent as the WWW-Authenticate header, so that a browser asks for
// credentials.
type AuthError struct {
	Challenge string
	// Reason says why, for the console's log; the page never shows it.
	Reason string
}

func (e *AuthError) Error() string { return "ferryconsole: unauthorized: " + e.Reason }

// BasicAuth returns an Authenticate function that accepts HTTP basic
// authentication with user and password, compared in constant time, and
// names the operator user. It panics when user or password is empty.
func BasicAuth(user, password string) func(*http.Request) (string, error) {
	if user == "" || password == "" {
		panic("ferryconsole.BasicAuth: user and password must not be empty")
	}
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	challenge := `Basic realm="ferry console", charset="UTF-8"`
	return func(r *http.Request) (string, error) {
		u, p, ok := r.BasicAuth()
		if !ok {
			return "", &AuthError{Challenge: challenge, Reason: "no basic credentials"}
		}
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		// Both compared whatever the first gives: no timing tells which
		// one was wrong.
		okUser := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		okPass := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if okUser&okPass != 1 {
			return "", &AuthError{Challenge: challenge, Reason: "wrong user or password"}
		}
		return user, nil
	}
}

// BearerToken returns an Authenticate function that accepts the header
// "Authorization: Bearer <token>", compared in constant time, and names
// the operator "token". It panics when token is empty.
func BearerToken(token string) func(*http.Request) (string, error) {
	if token == "" {
		panic("ferryconsole.BearerToken: token must not be empty")
	}
	want := sha256.Sum256([]byte(token))
	challenge := `Bearer realm="ferry console"`
	return func(r *http.Request) (string, error) {
		h := r.Header.Get("Authorization")
		scheme, got, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", &AuthError{Challenge: challenge, Reason: "no bearer token"}
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			return "", &AuthError{Challenge: challenge + `, error="invalid_token"`, Reason: "wrong token"}
		}
		return "token", nil
	}
}

// unauthorized refuses a request with 401.
func (h *console) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	var ae *AuthError
	if errors.As(err, &ae) && ae.Challenge != "" {
		w.Header().Set("WWW-Authenticate", ae.Challenge)
	}
	// A browser's first request carries no credentials: only a refusal of
	// credentials is worth a warning.
	level := slog.LevelDebug
	if r.Header.Get("Authorization") != "" {
		level = slog.LevelWarn
	}
	h.cfg.Logger.Log(r.Context(), level, "console request refused", "reason", err.Error(), "method", r.Method,
		"path", r.URL.Path, "remote_addr", r.RemoteAddr)
	h.render(w, r, http.StatusUnauthorized, "error", errorPage{Title: "Authentication required",
		Message: "The console needs your credentials."}, false)
}

// tokenField is the name of the forms' anti-CSRF token field.
const tokenField = "csrf"

// token returns the anti-CSRF token of operator's forms rendered at now:
// the time, a random nonce (each rendered page's token is its own, so that
// an action spends it alone) and an HMAC over the operator, the time and
// the nonce.
func (h *console) token(operator string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	var n [9]byte
	_, _ = rand.Read(n[:])
	nonce := base64.RawURLEncoding.EncodeToString(n[:])
	return ts + "." + nonce + "." + base64.RawURLEncoding.EncodeToString(h.mac(operator, ts, nonce))
}

func (h *console) mac(operator, ts, nonce string) []byte {
	m := hmac.New(sha256.New, h.cfg.Secret)
	m.Write([]byte("ferryconsole/csrf\x00"))
	m.Write([]byte(operator))
	m.Write([]byte{0})
	m.Write([]byte(ts))
	m.Write([]byte{0})
	m.Write([]byte(nonce))
	return m.Sum(nil)
}

// validToken reports whether tok is a token of operator's that has not
// expired at now.
func (h *console) validToken(operator, tok string, now time.Time) bool {
	_, ok := h.tokenTime(operator, tok, now)
	return ok
}

// tokenTime returns when tok, a valid token of operator's, was rendered.
func (h *console) tokenTime(operator, tok string, now time.Time) (time.Time, bool) {
	ts, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return time.Time{}, false
	}
	nonce, sig, ok := strings.Cut(rest, ".")
	if !ok || nonce == "" {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, h.mac(operator, ts, nonce)) {
		return time.Time{}, false
	}
	at := time.Unix(sec, 0)
	age := now.Sub(at)
	return at, age >= -time.Minute && age <= h.cfg.TokenLifetime
}

// maxSpent bounds the spent tokens a console remembers: past it, the
// oldest are forgotten (a replay of one of them is refused still by its
// expiry, TokenLifetime after it was rendered).
const maxSpent = 100_000

// spentTokens are the tokens of forms whose action ran: a form acts once.
type spentTokens struct {
	mu    sync.Mutex
	until map[string]time.Time // token → when it expires anyway
	order []string
}

// spend records tok as used by an action, valid until expires; false when
// it was used already.
func (s *spentTokens) spend(tok string, expires, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.until == nil {
		s.until = map[string]time.Time{}
	}
	if _, used := s.until[tok]; used {
		return false
	}
	for len(s.order) > 0 && (len(s.order) >= maxSpent || !s.until[s.order[0]].After(now)) {
		delete(s.until, s.order[0])
		s.order = s.order[1:]
	}
	s.until[tok] = expires
	s.order = append(s.order, tok)
	return true
}

// spendToken spends the form's token before its action runs, and answers
// 409 when the form was submitted already (a reload of an action's POST,
// or its page's other forms after one of them ran): nothing is done again.
func (h *console) spendToken(w http.ResponseWriter, r *http.Request) bool {
	tok := r.PostForm.Get(tokenField)
	now := time.Now()
	at, ok := h.tokenTime(operator(r), tok, now)
	if ok && h.spent.spend(tok, at.Add(h.cfg.TokenLifetime), now) {
		return true
	}
	h.cfg.Logger.Warn("console action refused: its form was submitted already", "operator", operator(r), "path", r.URL.Path)
	h.fail(w, r, http.StatusConflict, "Already done",
		"This form was submitted already, and its action ran then: nothing was done again. "+
			"Reload the page to see the current state, and act from there.")
	return false
}
