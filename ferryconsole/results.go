package ferryconsole

import (
	"net/http"
	"sync"
	"time"
)

// An action's POST is answered with a redirect to its result (POST,
// redirect, GET): reloading the result page shows the result again and
// acts on nothing. Results are kept in the console's memory, per
// instance: behind a load balancer without session affinity a result
// page may land on another instance, which says it has no such result
// (the action ran; the audit log has it).

// resultTTL is how long an action's result can be shown again.
const resultTTL = time.Hour

// maxResults bounds the results kept; the oldest are forgotten first.
const maxResults = 1000

type storedResult struct {
	operator string
	page     resultPage
	expires  time.Time
}

// results are the recent actions' results, by id.
type results struct {
	mu    sync.Mutex
	byID  map[string]storedResult
	order []string
}

func (s *results) put(operator string, p resultPage, now time.Time) string {
	id := newRef() + newRef()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]storedResult{}
	}
	for len(s.order) > 0 && (len(s.order) >= maxResults || !s.byID[s.order[0]].expires.After(now)) {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	s.byID[id] = storedResult{operator: operator, page: p, expires: now.Add(resultTTL)}
	s.order = append(s.order, id)
	return id
}

func (s *results) get(id, operator string, now time.Time) (resultPage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[id]
	if !ok || r.operator != operator || !r.expires.After(now) {
		return resultPage{}, false
	}
	return r.page, true
}

// done answers an action that ran: its result is stored and the browser
// sent to it (303 See Other, a GET).
func (h *console) done(w http.ResponseWriter, r *http.Request, p resultPage) {
	id := h.results.put(operator(r), p, time.Now())
	// Relative, as every link of the console is (http.Redirect would
	// make it absolute, losing the prefix the console is mounted under).
	w.Header().Set("Location", "result?id="+id)
	w.WriteHeader(http.StatusSeeOther)
}

// result shows an action's result again.
func (h *console) result(w http.ResponseWriter, r *http.Request) {
	kind, name, _, ok := h.table(w, r)
	if !ok {
		return
	}
	p, ok := h.results.get(r.URL.Query().Get("id"), operator(r), time.Now())
	if !ok || p.Kind != kind || p.Name != name {
		h.fail(w, r, http.StatusNotFound, "No such result",
			"This console keeps an action's result for an hour, for the operator who acted, on the instance that ran it: "+
				"this one has no such result. Nothing was done now; the console's log records every action.")
		return
	}
	h.page(w, r, "result", p)
}
