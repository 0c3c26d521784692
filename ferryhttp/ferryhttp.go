// Package ferryhttp makes HTTP requests idempotent with the Idempotency-Key
// header, on the database that holds the business data.
//
// The first request with a key claims it (a row with a lease of its own),
// then runs the handler inside one database transaction: the handler's
// business writes, the outbox events it enqueues with EnqueueTx and the
// response it wrote are committed together. A retry of the same request
// gets the stored response byte for byte, marked with the
// Idempotent-Replayed header; a retry while the first still runs gets 409
// with Retry-After; the same key with another request gets 422. A crash can
// leave neither "charged but no stored response" nor "stored response but
// no event": they are one commit. A claim whose process died is taken over
// once its lease runs out.
//
// Keys is the engine; Middleware wraps any net/http handler with it, and
// Do serves other routers and plain Go callers.
package ferryhttp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Header names.
const (
	// HeaderKey carries the client's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a stored response replayed to a
	// retry (Stripe's name for it).
	HeaderReplayed = "Idempotent-Replayed"
)

// Defaults.
const (
	DefaultLease        = 30 * time.Second
	DefaultRetention    = 24 * time.Hour
	DefaultMaxKeyLength = 255
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxResponse  = 4 << 20
)

// Errors of Do. The middleware turns each into its problem response.
var (
	// ErrInProgress: a request with the key is running (409).
	ErrInProgress = errors.New("ferryhttp: a request with this idempotency key is in progress")
	// ErrMismatch: the key was used for another request (422).
	ErrMismatch = errors.New("ferryhttp: idempotency key reused for a different request")
	// ErrFenced: this request ran out of lease and a retry took its key
	// over; its transaction was rolled back (409).
	ErrFenced = errors.New("ferryhttp: the request's claim on its idempotency key was taken over")
)

// Outcome is what happened to one request with a key.
type Outcome int

const (
	// Executed: the handler ran and its response was stored with its
	// writes, in one commit.
	Executed Outcome = iota + 1
	// NotStored: the handler ran and its transaction was rolled back (an
	// error, a 5xx, or a response Config.Keep does not keep); the key was
	// released, so a retry runs the request again.
	NotStored
	// Replayed: the stored response of an earlier request was returned.
	Replayed
	// Mismatch: the key was used for a request with another fingerprint.
	Mismatch
	// InProgress: a request with the key was still running.
	InProgress
	// TakenOver: a claim whose lease had run out was taken over; the
	// request then runs (a second outcome follows).
	TakenOver
	// Fenced: the request lost its claim to a takeover before it could
	// commit; it was rolled back.
	Fenced
	// Invalid: the request's key was missing, malformed, or its body too
	// large; nothing ran.
	Invalid
)

// String returns the outcome's name, as metrics label it.
func (o Outcome) String() string {
	switch o {
	case Executed:
		return "executed"
	case NotStored:
		return "not-stored"
	case Replayed:
		return "replayed"
	case Mismatch:
		return "mismatch"
	case InProgress:
		return "in-progress"
	case TakenOver:
		return "taken-over"
	case Fenced:
		return "fenced"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Hook observes requests with keys: ferryprom counts them. Hooks run on the
// request's goroutine: keep them fast.
type Hook interface {
	OnIdempotency(route string, outcome Outcome, took time.Duration)
}

// TakeoverHook is implemented by a Hook that wants to know which key was
// taken over (OnIdempotency gets the outcome TakenOver without it):
// keyHash is the key's ScopeHash, the key table's primary key (key_hash),
// and takeovers how many times its claims were taken over so far, kept
// across the releases of failed requests. A count that keeps growing is a
// request that kills or hangs the servers that run it.
type TakeoverHook interface {
	OnTakeover(route, keyHash string, takeovers int64)
}

// Config configures Keys. The zero value is usable: every field has a
// default.
type Config struct {
	// Methods are the methods a key applies to. Default POST and PATCH.
	// Requests with other methods pass through the middleware untouched,
	// without a transaction.
	Methods []string
	// Optional lets requests without a key through: the handler then runs
	// in a transaction as usual and nothing is stored. Default false: a
	// missing key is refused with 400.
	Optional bool
	// Principal returns who sends the request (account, tenant): keys are
	// scoped by it, so two clients never share a key. An error refuses the
	// request with 401. Default: every request has the same principal.
	Principal func(r *http.Request) (string, error)
	// Route names the operation: keys are scoped by it. Default the
	// request's ServeMux pattern ("POST /payments"), else its path.
	Route func(r *http.Request) string
	// Fields returns the values that define the request, when only some
	// of the body should count (a client-generated timestamp should not).
	// Default: the whole body, canonical when it is JSON (key order and
	// number spelling do not matter), as is otherwise. The method, the
	// path and the query always count.
	Fields func(r *http.Request, body []byte) (any, error)
	// MaxKeyLength bounds a key, in bytes. Default 255.
	MaxKeyLength int
	// MaxBodyBytes bounds a request body read for its fingerprint; a
	// larger one is refused with 413. Default 1 MiB.
	MaxBodyBytes int64
	// MaxResponseBytes bounds a response the middleware buffers and stores;
	// a larger one rolls the request back and answers 500. Default 4 MiB.
	MaxResponseBytes int
	// Lease is how long a claim holds its key: a request with the key that
	// arrives during the lease gets 409; after it, the claim is taken over
	// (its process is presumed dead). The handler's context ends with the
	// lease, so a live request never runs past it. Default 30 s.
	Lease time.Duration
	// Retention is how long a completed key is kept and replayed, counted
	// from its completion. After it the key is free: the same key is a new
	// request. `ferry purge --idempotency-keys` deletes expired keys.
	// Default 24 h.
	Retention time.Duration
	// Keep decides which responses are stored. A response that is not
	// kept is rolled back with the handler's writes and its key released.
	// Default: status below 400 (validation errors are not stored; the
	// client may fix the request and retry with the same key). 5xx is
	// never kept, whatever Keep says.
	Keep func(status int) bool
	// ReplayHeaders are the response headers stored and replayed. Default
	// Content-Type, Content-Language, Content-Location, Location, ETag and
	// Last-Modified. Set-Cookie is never stored.
	ReplayHeaders []string
	// MaxRetries bounds the reruns of a request whose transaction hit a
	// deadlock, a lock wait timeout or a serialization failure. Default 3.
	MaxRetries int
	// Hooks observe the requests.
	Hooks []Hook
	// Logger receives the middleware's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Keys runs requests idempotently on one database. It is safe for
// concurrent use.
type Keys[TTx any] struct {
	d   ferrystore.IdempotencyDriver[TTx]
	cfg Config
	log *slog.Logger
	// typical is a moving average of how long the handler's requests
	// took, in nanoseconds: the base of Retry-After.
	typical atomic.Int64
}

// New returns Keys on d's database. Migrate the inbox tables first (ferry
// migrate --inbox, or the store's Migrate): the key table is one of them.
func New[TTx any](d ferrystore.IdempotencyDriver[TTx], cfg *Config) (*Keys[TTx], error) {
	if nilness.Nil(d) {
		return nil, fmt.Errorf("%w: ferryhttp.New needs a store", ferrytype.ErrInvalidConfig)
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Lease < 0 || c.Retention < 0 || c.MaxKeyLength < 0 || c.MaxBodyBytes < 0 || c.MaxResponseBytes < 0 || c.MaxRetries < 0 {
		return nil, fmt.Errorf("%w: ferryhttp.Config: negative Lease, Retention, MaxKeyLength, MaxBodyBytes, MaxResponseBytes or MaxRetries", ferrytype.ErrInvalidConfig)
	}
	if c.MaxKeyLength > DefaultMaxKeyLength {
		return nil, fmt.Errorf("%w: ferryhttp.Config.MaxKeyLength above %d (the key column's size)", ferrytype.ErrInvalidConfig, DefaultMaxKeyLength)
	}
	if c.Lease > 0 && c.Retention > 0 && c.Retention < c.Lease {
		return nil, fmt.Errorf("%w: ferryhttp.Config.Retention shorter than Lease", ferrytype.ErrInvalidConfig)
	}
	if len(c.Methods) == 0 {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	c.Methods = slices.Clone(c.Methods)
	if c.Route == nil {
		c.Route = defaultRoute
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = DefaultMaxKeyLength
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponse
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Retention == 0 {
		c.Retention = max(DefaultRetention, c.Lease)
	}
	if c.Keep == nil {
		c.Keep = func(status int) bool { return status < 400 }
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Last-Modified"}
	}
	headers := make([]string, len(c.ReplayHeaders))
	for i, h := range c.ReplayHeaders {
		headers[i] = http.CanonicalHeaderKey(h)
	}
	c.ReplayHeaders = headers
	if c.MaxRetries == 0 {
		c.MaxRetries = 3
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Keys[TTx]{d: d, cfg: c, log: log}, nil
}

// Request identifies one request for Do.
type Request struct {
	// Principal, Method and Route scope the key (see Config).
	Principal, Method, Route string
	// Key is the client's idempotency key (see ParseKey).
	Key string
	// Fingerprint is the hex SHA-256 of what defines the request
	// (Fingerprint computes it the middleware's way).
	Fingerprint string
}

// Response is a handler's response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Result is what Do did.
type Result struct {
	Outcome Outcome
	// Response is the handler's response (Executed, NotStored) or the
	// stored one (Replayed; its Header holds the replayed headers only).
	Response Response
	// RetryAfter is when to ask again (InProgress): twice the typical
	// time of this Keys' recent requests, at least a second (Retry-After
	// counts whole seconds), never past the running claim's lease.
	RetryAfter time.Duration
	// LeaseLeft is how long the running claim's lease still runs
	// (InProgress), by the database's clock, at most Config.Lease.
	LeaseLeft time.Duration
	// TookOver reports that the request ran after taking over a claim
	// whose lease had run out.
	TookOver bool
}

// Do runs fn for req at most once per key while the key is kept: fn gets a
// transaction in which to make its business writes and enqueue its events;
// its response is stored in the same transaction. The error is
// ErrInProgress, ErrMismatch or ErrFenced (with the Result saying so), fn's
// own error (rolled back, key released), or a database error.
//
// fn's context ends when the claim's lease does. fn may run again (with a
// new transaction) after a deadlock or a serialization failure, up to
// Config.MaxRetries times.
//
// Once the transaction committed, Do reaches the fault point
// ferryfault.HTTPAfterCommit of ctx (the middleware's: the request's
// context): an error there acts as a crash between the commit and the
// response, which the client's retry with the same key must survive.
func (k *Keys[TTx]) Do(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) (Response, error)) (Result, error) {
	start := time.Now()
	res, err := k.do(ctx, req, fn)
	took := time.Since(start)
	if res.Outcome != 0 {
		k.observe(req.Route, res.Outcome, took)
	}
	if res.Outcome == Executed || res.Outcome == NotStored {
		k.sample(took)
	}
	return res, err
}

// sample adds a request's duration to the moving average (weight 1/8).
func (k *Keys[TTx]) sample(took time.Duration) {
	for {
		old := k.typical.Load()
		next := int64(took)
		if old != 0 {
			next = old + (int64(took)-old)/8
		}
		if k.typical.CompareAndSwap(old, next) {
			return
		}
	}
}

// retryAfter is the hint a duplicate of a running request gets: twice the
// typical request's time, at least a second, at most the lease left.
func (k *Keys[TTx]) retryAfter(leaseLeft time.Duration) time.Duration {
	return min(max(2*time.Duration(k.typical.Load()), time.Second), leaseLeft)
}

func (k *Keys[TTx]) observe(route string, o Outcome, took time.Duration) {
	for _, h := range k.cfg.Hooks {
		h.OnIdempotency(route, o, took)
	}
}

func (k *Keys[TTx]) do(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) (Response, error)) (Result, error) {
	if req.Key == "" || len(req.Key) > k.cfg.MaxKeyLength {
		return Result{Outcome: Invalid}, fmt.Errorf("%w: 1 to %d bytes", ErrInvalidKey, k.cfg.MaxKeyLength)
	}
	if len(req.Principal) > 255 || len(req.Route) > 255 || len(req.Method) > 16 {
		return Result{}, fmt.Errorf("%w: principal and route are at most 255 bytes, the method 16", ferrytype.ErrInvalidConfig)
	}
	claim := ferrystore.KeyClaim{
		Hash:      ScopeHash(req),
		Principal: req.Principal, Method: req.Method, Route: req.Route, Key: req.Key,
		Fingerprint: req.Fingerprint, Token: newToken(),
	}
	tookOver := false
	for attempt := 0; ; attempt++ {
		cur, ok, err := k.d.ClaimKey(ctx, claim, k.cfg.Lease, k.cfg.Retention)
		if err != nil {
			return Result{}, err
		}
		if ok {
			break
		}
		switch {
		case cur.Fingerprint != req.Fingerprint:
			return Result{Outcome: Mismatch}, ErrMismatch
		case cur.State == ferrystore.KeyDone:
			return Result{Outcome: Replayed, Response: Response{
				Status: cur.Response.Status, Header: http.Header(cur.Response.Headers), Body: cur.Response.Body,
			}}, nil
		case cur.LeaseLeft > 0:
			// The lease left, by a database clock that may be the
			// statement's start (MariaDB): never more than a lease.
			left := min(cur.LeaseLeft, k.cfg.Lease)
			return Result{Outcome: InProgress, RetryAfter: k.retryAfter(left), LeaseLeft: left}, ErrInProgress
		}
		taken, err := k.d.TakeOverKey(ctx, claim.Hash, claim.Token, k.cfg.Lease)
		if err != nil {
			return Result{}, err
		}
		if taken {
			k.log.Warn("idempotency key taken over after its lease ran out: the request that held it died or hung",
				"route", req.Route, "principal", req.Principal, "key_hash", claim.Hash, "takeovers", cur.Takeovers+1)
			k.observe(req.Route, TakenOver, 0)
			for _, h := range k.cfg.Hooks {
				if th, ok := h.(TakeoverHook); ok {
					th.OnTakeover(req.Route, claim.Hash, cur.Takeovers+1)
				}
			}
			tookOver = true
			break
		}
		if attempt == 2 {
			// Three rounds of racing claims, completions and takeovers:
			// another request holds the key now.
			return Result{Outcome: InProgress, RetryAfter: time.Second}, ErrInProgress
		}
	}
	res, err := k.execute(ctx, claim, fn)
	res.TookOver = tookOver
	return res, err
}

// execute runs fn in a transaction under claim and stores its response.
func (k *Keys[TTx]) execute(ctx context.Context, claim ferrystore.KeyClaim, fn func(ctx context.Context, tx TTx) (Response, error)) (res Result, err error) {
	// The key is released unless its response committed or the commit's
	// outcome is unknown and a retry will tell.
	release := true
	defer func() {
		if release {
			// Not the request's context: a client that went away still
			// frees its key.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := k.d.ReleaseKey(rctx, claim.Hash, claim.Token); rerr != nil {
				k.log.Error("idempotency key not released: retries get 409 until its lease runs out",
					"route", claim.Route, "err", rerr)
			}
			cancel()
		}
	}()
	lctx, cancel := context.WithTimeout(ctx, k.cfg.Lease)
	defer cancel()
	for attempt := 0; ; attempt++ {
		resp, err := k.attempt(lctx, claim, fn)
		if err == nil || !errors.Is(err, ferrytype.ErrRetryable) || attempt >= k.cfg.MaxRetries || lctx.Err() != nil {
			switch {
			case errors.Is(err, ferrystore.ErrKeyFenced):
				release = false
				return Result{Outcome: Fenced}, ErrFenced
			case errors.Is(err, errNotKept):
				return Result{Outcome: NotStored, Response: resp}, nil
			case errors.Is(err, errCommit):
				// The commit may have happened: release deletes the
				// key only if it is still in progress under this
				// claim, so it is safe either way.
				return Result{}, err
			case err != nil:
				return Result{Outcome: NotStored}, err
			}
			release = false
			if ferr := ferryfault.At(ctx, ferryfault.HTTPAfterCommit); ferr != nil {
				return Result{}, ferr
			}
			return Result{Outcome: Executed, Response: resp}, nil
		}
		k.log.Info("idempotent request rerun after a transient database error", "route", claim.Route, "attempt", attempt+1, "err", err)
	}
}

var (
	errNotKept = errors.New("response not kept")
	errCommit  = errors.New("ferryhttp: commit")
)

// attempt runs fn once in a transaction.
func (k *Keys[TTx]) attempt(ctx context.Context, claim ferrystore.KeyClaim, fn func(ctx context.Context, tx TTx) (Response, error)) (resp Response, err error) {
	tx, err := k.d.Begin(ctx)
	if err != nil {
		return Response{}, fmt.Errorf("begin: %w", k.d.Classify(err))
	}
	done := false
	defer func() {
		if !done {
			// A panic in fn, or an error below: nothing of this
			// request stays.
			_ = k.d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	resp, err = fn(ctx, tx)
	if err != nil {
		return resp, k.d.Classify(err)
	}
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	if resp.Status >= 500 || !k.cfg.Keep(resp.Status) {
		return resp, errNotKept
	}
	stored := ferrystore.StoredResponse{Status: resp.Status, Headers: k.replayHeaders(resp.Header), Body: resp.Body}
	if err := k.d.CompleteKey(ctx, k.d.UnwrapTx(tx), claim.Hash, claim.Token, stored, k.cfg.Retention); err != nil {
		return resp, err
	}
	done = true
	if err := k.d.Commit(ctx, tx); err != nil {
		return resp, fmt.Errorf("%w: %w", errCommit, k.d.Classify(err))
	}
	return resp, nil
}

// replayHeaders selects the headers stored for replays.
func (k *Keys[TTx]) replayHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for name, vals := range h {
		name = http.CanonicalHeaderKey(name)
		if name != "Set-Cookie" && slices.Contains(k.cfg.ReplayHeaders, name) {
			out[name] = slices.Clone(vals)
		}
	}
	return out
}

// ScopeHash identifies a request's key within its scope (principal,
// method, route): the key table's primary key.
func ScopeHash(r Request) string {
	h := sha256.New()
	for _, s := range []string{r.Principal, r.Method, r.Route, r.Key} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}
