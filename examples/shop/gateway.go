package shop

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
)

// Gateway is the SMS gateway: an external service that honours
// Idempotency-Key, as payment and messaging APIs do. A key it executed is
// answered again without executing twice. It counts calls and executions
// per key, which is how the checker sees duplicates and losses of side
// effects. FailPct of first calls fail with 503, to exercise retries.
type Gateway struct {
	FailPct int

	mu       sync.Mutex
	calls    map[string]int
	executed map[string]int
}

// GatewayStats is the gateway's account, served at /stats.
type GatewayStats struct {
	Calls    map[string]int `json:"calls"`
	Executed map[string]int `json:"executed"`
}

// NewGateway returns a gateway with empty counts.
func NewGateway(failPct int) *Gateway {
	return &Gateway{FailPct: failPct, calls: map[string]int{}, executed: map[string]int{}}
}

// ServeHTTP serves POST /sms and GET /stats.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/stats":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(g.Stats())
	case r.Method == http.MethodPost && r.URL.Path == "/sms":
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.calls[key]++
		if g.executed[key] == 0 && rand.IntN(100) < g.FailPct {
			http.Error(w, "busy, try again", http.StatusServiceUnavailable)
			return
		}
		if g.executed[key] == 0 {
			g.executed[key] = 1 // the text goes out here, once per key
		}
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

// Stats returns a copy of the counts.
func (g *Gateway) Stats() GatewayStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := GatewayStats{Calls: make(map[string]int, len(g.calls)), Executed: make(map[string]int, len(g.executed))}
	for k, v := range g.calls {
		s.Calls[k] = v
	}
	for k, v := range g.executed {
		s.Executed[k] = v
	}
	return s
}
