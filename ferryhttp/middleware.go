package ferryhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ferrydev/ferry"
)

type (
	txKey   struct{}
	failKey struct{}
)

// failure holds the error a handler handed back with Fail.
type failure struct {
	mu  sync.Mutex
	err error
}

// Fail hands err, an error the handler met in the request's transaction (a
// deadlock, a lock wait timeout, a serialization failure, or any other
// database error), back to Middleware, from inside the handler, which then
// returns: whatever the handler wrote is discarded and its transaction
// rolled back. A deadlock, lock wait timeout or serialization failure is
// rerun with a new transaction, up to Config.MaxRetries times, the body
// readable again; any other error, or one still failing after the reruns,
// is answered 503 (retry with the same key) and the key released. The
// first error handed back in an attempt counts. Fail reports false outside
// a handler wrapped by Middleware (and does nothing).
func Fail(ctx context.Context, err error) bool {
	f, ok := ctx.Value(failKey{}).(*failure)
	if !ok || err == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	return true
}

// Tx returns the request's transaction inside a handler wrapped by
// Middleware: make the business writes and EnqueueTx calls through it, and
// never commit it yourself. ok is false outside such a handler (a method
// the keys do not cover).
func Tx[TTx any](ctx context.Context) (tx TTx, ok bool) {
	tx, ok = ctx.Value(txKey{}).(TTx)
	return tx, ok
}

// Fingerprint returns the hex SHA-256 of what defines a request: its
// method, its path, its query (parameters in sorted order) and fields —
// canonical JSON of fields when fields is not nil, else of body when body
// is JSON, else body as it is.
func Fingerprint(method string, r *http.Request, body []byte, fields any) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", method, r.URL.Path, r.URL.Query().Encode())
	switch {
	case fields != nil:
		canon, _, err := ferry.Fingerprint(fields)
		if err != nil {
			return "", err
		}
		h.Write([]byte("json\n"))
		h.Write(canon)
	case json.Valid(body):
		canon, _, err := ferry.Fingerprint(json.RawMessage(body))
		if err != nil {
			return "", err
		}
		h.Write([]byte("json\n"))
		h.Write(canon)
	default:
		h.Write([]byte("raw\n"))
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Middleware runs next idempotently for the covered methods (Config): the
// request's transaction is in its context (Tx), its response is buffered
// and, when kept, stored in that transaction before the commit, then
// written. Replays carry the stored status, headers (Config.ReplayHeaders)
// and body, and HeaderReplayed. Refusals are RFC 9457 problem details
// (application/problem+json):
//
//	400 the key is missing (unless Config.Optional) or malformed
//	401 Config.Principal failed
//	409 a request with the key is in progress (with Retry-After), or this
//	    request's claim was taken over after its lease ran out
//	413 the body exceeds Config.MaxBodyBytes
//	422 the key was used with another request
//	503 the database failed before the handler's effects were decided
//	    (retry with the same key)
//
// The handler's response is written only after the commit: a handler
// cannot stream, and Flush is not offered.
func (k *Keys[TTx]) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(k.cfg.Methods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		route := k.cfg.Route(r)
		vals := r.Header.Values(HeaderKey)
		if len(vals) == 0 && k.cfg.Optional {
			k.serveWithoutKey(w, r, next)
			return
		}
		refuse := func(status int, kind, title, detail string) {
			k.observe(route, Invalid, time.Since(start))
			writeProblem(w, status, kind, title, detail)
		}
		if len(vals) == 0 {
			refuse(http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key is required",
				"This operation is idempotent only with a key: send an Idempotency-Key header with a unique value (a UUID) and reuse it on retries.")
			return
		}
		if len(vals) > 1 {
			refuse(http.StatusBadRequest, "idempotency-key-invalid", "Idempotency-Key is invalid", "More than one Idempotency-Key header was sent.")
			return
		}
		key, err := ParseKey(vals[0], k.cfg.MaxKeyLength)
		if err != nil {
			refuse(http.StatusBadRequest, "idempotency-key-invalid", "Idempotency-Key is invalid", err.Error())
			return
		}
		principal := ""
		if k.cfg.Principal != nil {
			if principal, err = k.cfg.Principal(r); err != nil {
				refuse(http.StatusUnauthorized, "principal-unknown", "The request's principal is unknown", "")
				return
			}
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, k.cfg.MaxBodyBytes))
		if err != nil {
			if errors.As(err, new(*http.MaxBytesError)) {
				refuse(http.StatusRequestEntityTooLarge, "body-too-large", "The request body is too large",
					fmt.Sprintf("At most %d bytes.", k.cfg.MaxBodyBytes))
				return
			}
			refuse(http.StatusBadRequest, "body-unreadable", "The request body could not be read", "")
			return
		}
		var fields any
		if k.cfg.Fields != nil {
			if fields, err = k.cfg.Fields(r, body); err != nil {
				refuse(http.StatusBadRequest, "request-invalid", "The request could not be fingerprinted", err.Error())
				return
			}
		}
		fp, err := Fingerprint(r.Method, r, body, fields)
		if err != nil {
			refuse(http.StatusBadRequest, "request-invalid", "The request could not be fingerprinted", err.Error())
			return
		}
		req := Request{Principal: principal, Method: r.Method, Route: route, Key: key, Fingerprint: fp}
		res, err := k.Do(r.Context(), req, func(ctx context.Context, tx TTx) (Response, error) {
			return k.serve(ctx, tx, w, r, body, next)
		})
		switch {
		case res.Outcome == Replayed:
			writeResponse(w, res.Response, true)
		case res.Outcome == Executed || (res.Outcome == NotStored && err == nil):
			writeResponse(w, res.Response, false)
		case errors.Is(err, ErrInProgress):
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(res.RetryAfter, time.Second).Seconds()))))
			writeProblem(w, http.StatusConflict, "idempotency-key-in-progress", "A request with this Idempotency-Key is in progress",
				"Retry after the time in Retry-After to get its response.")
		case errors.Is(err, ErrMismatch):
			writeProblem(w, http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused for a different request",
				"This key was used with another request (method, path, query or body). Use a new key for a new request.")
		case errors.Is(err, ErrFenced):
			writeProblem(w, http.StatusConflict, "idempotency-key-taken-over", "This request ran out of time and a retry took it over",
				"Nothing of this request was kept. Retry with the same key to get the retry's response.")
		case errors.Is(err, errResponseTooLarge):
			writeProblem(w, http.StatusInternalServerError, "response-too-large", "The response is too large to store",
				"Nothing of this request was kept.")
		case errors.Is(err, errClientGone) || (r.Context().Err() != nil && errors.Is(err, context.Canceled)):
			// Normal client behaviour (a timeout, a closed tab): nothing
			// was kept and no one reads this answer.
			k.log.Info("idempotent request abandoned by its client: nothing kept, its key released", "route", route, "err", err)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "idempotency-unavailable", "The request could not be completed",
				"Retry with the same Idempotency-Key: it runs once.")
		default:
			k.log.Error("idempotent request failed", "route", route, "err", err)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "idempotency-unavailable", "The request could not be completed",
				"Retry with the same Idempotency-Key: it runs once.")
		}
	})
}

var (
	errResponseTooLarge = errors.New("ferryhttp: response too large to store")
	errClientGone       = errors.New("ferryhttp: the client went away before the request completed")
	errLeaseOver        = errors.New("ferryhttp: the handler outlived its claim's lease")
)

// serve runs next with tx in the request's context and returns what it
// wrote.
func (k *Keys[TTx]) serve(ctx context.Context, tx TTx, w http.ResponseWriter, r *http.Request, body []byte, next http.Handler) (Response, error) {
	rec := &recorder{header: http.Header{}, limit: k.cfg.MaxResponseBytes}
	f := &failure{}
	r2 := r.WithContext(context.WithValue(context.WithValue(ctx, txKey{}, tx), failKey{}, f))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	next.ServeHTTP(rec, r2)
	f.mu.Lock()
	failed := f.err
	f.mu.Unlock()
	switch {
	case r.Context().Err() != nil:
		// The client left: nobody reads the answer; the transaction is
		// void.
		return Response{}, fmt.Errorf("%w: %w", errClientGone, context.Cause(r.Context()))
	case ctx.Err() != nil:
		return Response{}, fmt.Errorf("%w (%s): %w", errLeaseOver, k.cfg.Lease, ctx.Err())
	case failed != nil:
		return Response{}, fmt.Errorf("handler failed: %w", failed)
	case rec.tooLarge:
		return Response{}, errResponseTooLarge
	}
	return rec.response(), nil
}

// serveWithoutKey runs next in a transaction, for Config.Optional.
func (k *Keys[TTx]) serveWithoutKey(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	tx, err := k.d.Begin(ctx)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "database-unavailable", "The request could not be started", "")
		return
	}
	committed := false
	defer func() {
		if !committed {
			_ = k.d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	rec := &recorder{header: http.Header{}, limit: k.cfg.MaxResponseBytes}
	next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, txKey{}, tx)))
	resp := rec.response()
	if !rec.tooLarge && resp.Status < 500 && k.cfg.Keep(resp.Status) {
		committed = true
		if err := k.d.Commit(ctx, tx); err != nil {
			writeProblem(w, http.StatusServiceUnavailable, "commit-failed", "The request's outcome is unknown",
				"The commit failed; without an Idempotency-Key a retry may apply the request twice.")
			return
		}
	}
	writeResponse(w, resp, false)
}

func writeResponse(w http.ResponseWriter, resp Response, replayed bool) {
	h := w.Header()
	for name, vals := range resp.Header {
		h[name] = vals
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// ProblemType prefixes the problem types the middleware answers with.
const ProblemType = "urn:ferry:problem:"

// writeProblem answers with an RFC 9457 problem details object.
func writeProblem(w http.ResponseWriter, status int, kind, title, detail string) {
	p := map[string]any{"type": ProblemType + kind, "title": title, "status": status}
	if detail != "" {
		p["detail"] = detail
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// recorder buffers a handler's response.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	tooLarge bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) > r.limit {
		r.tooLarge = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(b)
}

func (r *recorder) response() Response {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	if r.header.Get("Content-Type") == "" && r.body.Len() > 0 {
		r.header.Set("Content-Type", http.DetectContentType(r.body.Bytes()))
	}
	return Response{Status: status, Header: r.header.Clone(), Body: bytes.Clone(r.body.Bytes())}
}
