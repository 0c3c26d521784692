package ferryconsole

import (
	"io"
	"net/http"
)

// HealthPath is the console's health endpoint: GET (or HEAD) answers 200
// "ok" without authentication, for a Kubernetes probe or a load
// balancer's check. It says only that the handler serves requests: it
// reads no database and shows nothing of the console, its stores or its
// version. Serving it unauthenticated reveals no more than the 401 every
// other path answers.
//
// It is both the liveness and the readiness check: the console needs no
// store to answer, and a page whose database is down says so to the
// operator, which is better than no page at all. A console that cannot
// open its databases at start exits (ferry console), and one whose
// database goes away later keeps serving its error pages.
const HealthPath = "/healthz"

// health answers a GET or HEAD of HealthPath and reports whether it did;
// any other request is left to the authenticated routes.
func health(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != HealthPath || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = io.WriteString(w, "ok\n")
	}
	return true
}
