package ferryconsole_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
)

// panicAdmin is an outbox whose every method panics (the embedded
// interface is nil): a request that reads it fails the test.
type panicAdmin struct{ ferrystore.Admin }

// healthBundle is a console over panicAdmin that counts the requests it
// authenticates, and lets none through.
type healthBundle struct {
	h     http.Handler
	auths *atomic.Int64
}

func healthSetup(t *testing.T) healthBundle {
	t.Helper()
	auths := new(atomic.Int64)
	h, err := ferryconsole.New(ferryconsole.Config{
		Outboxes: map[string]ferrystore.Admin{"orders-db-7": panicAdmin{}},
		Logger:   slog.New(slog.DiscardHandler),
		Authenticate: func(r *http.Request) (string, error) {
			auths.Add(1)
			return "", &ferryconsole.AuthError{Reason: "no credentials", Challenge: `Basic realm="ferry console"`}
		},
	})
	require.NoError(t, err)
	return healthBundle{h: h, auths: auths}
}

func (b healthBundle) do(method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// GET /healthz answers 200 "ok" without credentials, reading no store and
// showing nothing of the console: no outbox name, no challenge, no version.
func TestHealth(t *testing.T) {
	t.Parallel()
	t.Run("AnswersOKWithoutAuthentication", func(t *testing.T) {
		t.Parallel()
		b := healthSetup(t)
		rec := b.do("GET", ferryconsole.HealthPath)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "ok\n", rec.Body.String())
		require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
		require.Zero(t, b.auths.Load(), "the health check asks for no credentials")
	})
	t.Run("ShowsNothing", func(t *testing.T) {
		t.Parallel()
		b := healthSetup(t)
		rec := b.do("GET", "/healthz")
		require.NotContains(t, rec.Body.String(), "orders-db-7")
		require.Empty(t, rec.Header().Get("WWW-Authenticate"))
		require.Empty(t, rec.Header().Get("Server"))
		// The security headers of every response are there too.
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
		var names []string
		for k := range rec.Header() {
			names = append(names, k)
		}
		require.ElementsMatch(t, []string{"Content-Type", "Content-Security-Policy", "X-Frame-Options",
			"X-Content-Type-Options", "Referrer-Policy", "Cache-Control"}, names)
	})
	t.Run("HeadHasNoBody", func(t *testing.T) {
		t.Parallel()
		b := healthSetup(t)
		rec := b.do("HEAD", "/healthz")
		require.Equal(t, http.StatusOK, rec.Code)
		require.Empty(t, rec.Body.String())
		require.Zero(t, b.auths.Load())
	})
	t.Run("OtherPathsAndMethodsAreAuthenticated", func(t *testing.T) {
		t.Parallel()
		b := healthSetup(t)
		for _, req := range []struct{ method, path string }{
			{"POST", "/healthz"}, {"PUT", "/healthz"}, {"GET", "/healthz/"}, {"GET", "/healthz/x"},
			{"GET", "/Healthz"}, {"GET", "/healthzz"}, {"GET", "/"}, {"GET", "/outbox/orders-db-7/dead"},
		} {
			before := b.auths.Load()
			rec := b.do(req.method, req.path)
			require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s", req.method, req.path)
			require.Equal(t, before+1, b.auths.Load(), "%s %s is authenticated", req.method, req.path)
			require.NotContains(t, rec.Body.String(), "orders-db-7", "%s %s", req.method, req.path)
		}
	})
	t.Run("UnderAPrefix", func(t *testing.T) {
		t.Parallel()
		b := healthSetup(t)
		mux := http.NewServeMux()
		mux.Handle("/console/", http.StripPrefix("/console", b.h))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/console/healthz", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "ok", strings.TrimSpace(rec.Body.String()))
		require.Zero(t, b.auths.Load())
	})
}
