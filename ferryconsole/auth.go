package ferryconsole

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
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
// the time and an HMAC over the operator and the time.
func (h *console) token(operator string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return ts + "." + base64.RawURLEncoding.EncodeToString(h.mac(operator, ts))
}

func (h *console) mac(operator, ts string) []byte {
	m := hmac.New(sha256.New, h.cfg.Secret)
	m.Write([]byte("ferryconsole/csrf\x00"))
	m.Write([]byte(operator))
	m.Write([]byte{0})
	m.Write([]byte(ts))
	return m.Sum(nil)
}

// validToken reports whether tok is a token of operator's that has not
// expired at now.
func (h *console) validToken(operator, tok string, now time.Time) bool {
	ts, sig, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, h.mac(operator, ts)) {
		return false
	}
	age := now.Sub(time.Unix(sec, 0))
	return age >= -time.Minute && age <= h.cfg.TokenLifetime
}
