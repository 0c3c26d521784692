package ferryhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// counter is a hook counting outcomes.
type counter struct {
	mu sync.Mutex
	n  map[ferryhttp.Outcome]int
	t  []takeover
}

var _ ferryhttp.TakeoverHook = (*counter)(nil)

func (c *counter) OnIdempotency(_ string, o ferryhttp.Outcome, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[ferryhttp.Outcome]int{}
	}
	c.n[o]++
}

// takeover is one call of OnTakeover.
type takeover struct {
	Route, KeyHash string
	Takeovers      int64
}

func (c *counter) OnTakeover(route, keyHash string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = append(c.t, takeover{route, keyHash, n})
}

func (c *counter) takeovers() []takeover {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]takeover(nil), c.t...)
}

func (c *counter) get(o ferryhttp.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[o]
}

func TestRetryGetsTheStoredResponseAndChargesOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		hook := &counter{}
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.Hooks = append(c.Hooks, hook) })))
		defer srv.Close()

		first := post(t, srv.URL, "k-1", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		require.Empty(t, first.Header.Get(ferryhttp.HeaderReplayed))
		require.NotEmpty(t, first.Header.Get("Set-Cookie"), "the first response is the handler's own")

		// The same request, spelled differently: key order, spaces and
		// number spelling do not change its fingerprint.
		for _, body := range []string{`{"order_id":"o-1","amount":10}`, `{ "amount": 1e1, "order_id": "o-1" }`} {
			again := post(t, srv.URL, "k-1", body)
			require.Equal(t, first.Status, again.Status)
			require.Equal(t, first.Body, again.Body, "a replay is the stored response byte for byte")
			require.Equal(t, "true", again.Header.Get(ferryhttp.HeaderReplayed))
			require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
			require.Equal(t, first.Header.Get("Content-Type"), again.Header.Get("Content-Type"))
			require.Empty(t, again.Header.Get("Set-Cookie"), "Set-Cookie is never stored")
		}
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 1, b.events(t, "o-1"), "one event, committed with the payment")
		require.Equal(t, 1, hook.get(ferryhttp.Executed))
		require.Equal(t, 2, hook.get(ferryhttp.Replayed))

		// Another key is another payment.
		other := post(t, srv.URL, "k-2", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusCreated, other.Status)
		require.NotEqual(t, first.payment(t).PaymentID, other.payment(t).PaymentID)
		require.Equal(t, 2, b.charged(t, "o-1"))
	})
}

func TestKeyReusedForAnotherRequestIs422(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t)))
		defer srv.Close()
		require.Equal(t, http.StatusCreated, post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`).Status)
		// 10.000000000000001 is another amount to a handler that parses
		// decimals exactly, though a float64 cannot tell it from 10.
		for _, body := range []string{`{"order_id":"o-1","amount":11}`, `{"order_id":"o-2","amount":10}`,
			`{"order_id":"o-1","amount":10.000000000000001}`} {
			r := post(t, srv.URL, "k", body)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", body)
			require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
			require.Equal(t, "idempotency-key-reused", r.problemType())
		}
		// A body with a key twice means what each reader makes of it: it
		// is refused before anything runs.
		for _, key := range []string{"k", "k-dup"} {
			r := post(t, srv.URL, key, `{"order_id":"o-2","amount":10,"amount":11}`)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			require.Equal(t, "request-invalid", r.problemType())
		}
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 0, b.charged(t, "o-2"))
	})
}

func TestMissingOrMalformedKeyIs400AndRunsNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t)))
		defer srv.Close()
		long := make([]byte, 256)
		for i := range long {
			long[i] = 'a'
		}
		for _, key := range []string{"", `"unterminated`, "two words", `"x";a=1`, string(long), `"   "`} {
			r := post(t, srv.URL, key, `{"order_id":"o-1","amount":10}`)
			require.Equal(t, http.StatusBadRequest, r.Status, "key %q", key)
			require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
			want := "idempotency-key-invalid"
			if key == "" {
				want = "idempotency-key-missing"
			}
			require.Equal(t, want, r.problemType(), "key %q", key)
		}
		require.Equal(t, 0, b.charged(t, "o-1"))
		// The draft's form, an sf-string, and the bare form are one key.
		require.Equal(t, http.StatusCreated, post(t, srv.URL, `"abc-1"`, `{"order_id":"o-1","amount":10}`).Status)
		require.Equal(t, "true", post(t, srv.URL, `abc-1`, `{"order_id":"o-1","amount":10}`).Header.Get(ferryhttp.HeaderReplayed))
		// Other methods are not covered: no key needed, no transaction.
		resp, err := http.Get(srv.URL + "/payments")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	})
}

func TestConcurrentDuplicateIs409WithRetryAfter(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		hook := &counter{}
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.Hooks = append(c.Hooks, hook) })))
		t.Cleanup(srv.Close)
		entered, release := b.hold(t)
		firstDone := make(chan reply, 1)
		go func() {
			r, err := send(srv.URL, "k", `{"order_id":"o-1","amount":10}`)
			if err != nil {
				r.Status = -1
			}
			firstDone <- r
		}()
		var first reply
		select {
		case <-entered:
		case first = <-firstDone:
			t.Fatalf("the first request ended before its handler made its writes: %d %s", first.Status, first.Body)
		}
		// The first request holds its claim, its writes made and not
		// committed: every duplicate, sent at once, is refused.
		var wg sync.WaitGroup
		replies := make([]reply, 8)
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i], _ = send(srv.URL, "k", `{"order_id":"o-1","amount":10}`)
			}()
		}
		wg.Wait()
		for _, r := range replies {
			require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
			require.Equal(t, "idempotency-key-in-progress", r.problemType())
			secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
			require.NoError(t, err)
			// No request of these Keys has taken long: a second, not
			// the 30 s the lease has left.
			require.Equal(t, 1, secs)
		}
		release()
		first = <-firstDone
		require.Equal(t, http.StatusCreated, first.Status)
		again := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, first.Body, again.Body)
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 1, b.events(t, "o-1"))
		require.Equal(t, 8, hook.get(ferryhttp.InProgress))
	})
}

// Many clients retry many keys at once, with no gate: whatever each gets
// (201, a replay or 409), every key charges once, and every 201 of a key
// has the same body.
func TestConcurrentRetriesChargeEachKeyOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t)))
		defer srv.Close()
		const keys, senders = 20, 12
		var (
			mu     sync.Mutex
			bodies = map[string]map[string]bool{}
			wg     sync.WaitGroup
			errs   atomic.Int64
		)
		for s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					k := (i + s) % keys
					key, order := fmt.Sprint("key-", k), fmt.Sprint("o-", k)
					r, err := send(srv.URL, key, fmt.Sprintf(`{"order_id":%q,"amount":5}`, order))
					if err != nil || (r.Status != http.StatusCreated && r.Status != http.StatusConflict) {
						errs.Add(1)
						continue
					}
					if r.Status == http.StatusCreated {
						mu.Lock()
						if bodies[key] == nil {
							bodies[key] = map[string]bool{}
						}
						bodies[key][string(r.Body)] = true
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, errs.Load(), "only 201 and 409 are expected")
		for k := range keys {
			key, order := fmt.Sprint("key-", k), fmt.Sprint("o-", k)
			// Whoever got 409 each time now gets the stored response.
			r := post(t, srv.URL, key, fmt.Sprintf(`{"order_id":%q,"amount":5}`, order))
			require.Equal(t, http.StatusCreated, r.Status)
			bodies[key][string(r.Body)] = true
			require.Len(t, bodies[key], 1, "every 201 of %s is one response", key)
			require.Equal(t, 1, b.charged(t, order), "order %s charged once", order)
			require.Equal(t, 1, b.events(t, order))
		}
	})
}

func TestFailedRequestRollsBackAndFreesTheKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		hook := &counter{}
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.Hooks = append(c.Hooks, hook) })))
		defer srv.Close()
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusBadRequest, http.StatusPaymentRequired} {
			r := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`, "X-Test-Status", strconv.Itoa(status))
			require.Equal(t, status, r.Status, "the handler's own response is written")
			require.Empty(t, r.Header.Get(ferryhttp.HeaderReplayed))
			require.Equal(t, 0, b.charged(t, "o-1"), "a %d rolls the payment back", status)
			require.Equal(t, 0, b.events(t, "o-1"), "and its event")
		}
		// The key is free: the retry runs.
		r := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusCreated, r.Status)
		require.Empty(t, r.Header.Get(ferryhttp.HeaderReplayed))
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 4, hook.get(ferryhttp.NotStored))
	})
}

func TestKeepStoresChosenClientErrors(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) {
			// A declined card is a business outcome: stored, with its
			// writes, and replayed.
			c.Keep = func(status int) bool { return status < 400 || status == http.StatusPaymentRequired }
		})))
		defer srv.Close()
		first := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`, "X-Test-Status", "402")
		require.Equal(t, http.StatusPaymentRequired, first.Status)
		again := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusPaymentRequired, again.Status)
		require.Equal(t, first.Body, again.Body)
		require.Equal(t, "true", again.Header.Get(ferryhttp.HeaderReplayed))
		require.Equal(t, 1, b.charged(t, "o-1"))
		// 5xx is never kept.
		r := post(t, srv.URL, "k2", `{"order_id":"o-2","amount":10}`, "X-Test-Status", "503")
		require.Equal(t, http.StatusServiceUnavailable, r.Status)
		require.Equal(t, 0, b.charged(t, "o-2"))
	})
}

func TestKeysAreScopedByPrincipal(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) {
			c.Principal = func(r *http.Request) (string, error) {
				if a := r.Header.Get("X-Account"); a != "" {
					return a, nil
				}
				return "", fmt.Errorf("no account")
			}
		})))
		defer srv.Close()
		a := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`, "X-Account", "acct_a")
		bb := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`, "X-Account", "acct_b")
		require.Equal(t, http.StatusCreated, a.Status)
		require.Equal(t, http.StatusCreated, bb.Status)
		require.NotEqual(t, a.Body, bb.Body, "two principals' keys never collide")
		require.Equal(t, 2, b.charged(t, "o-1"))
		r := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Equal(t, 2, b.charged(t, "o-1"))
	})
}

func TestDeadClaimIsTakenOverAfterItsLease(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		hook := &counter{}
		const lease = time.Second
		k := b.newKeys(t, func(c *ferryhttp.Config) { c.Lease = lease; c.Hooks = append(c.Hooks, hook) })
		srv := httptest.NewServer(b.handler(k))
		defer srv.Close()
		// A request claimed the key and its process died: its claim, as
		// the middleware writes it, with nothing else committed.
		body := `{"order_id":"o-1","amount":10}`
		req := httptest.NewRequest(http.MethodPost, "/payments", nil)
		fp, err := ferryhttp.Fingerprint(http.MethodPost, req, []byte(body), nil)
		require.NoError(t, err)
		ctx := testsvc.Context(t, time.Minute)
		// Do, with a lease that cannot run out during the test.
		res, err := b.newKeys(t).Do(ctx, ferryhttp.Request{Method: "POST", Route: "POST /payments", Key: "k", Fingerprint: fp},
			func(context.Context, *sql.Tx) (ferryhttp.Response, error) {
				// Still in progress from a second request's view.
				r := post(t, srv.URL, "k", body)
				require.Equal(t, http.StatusConflict, r.Status)
				return ferryhttp.Response{}, errDied
			})
		require.ErrorIs(t, err, errDied)
		require.Equal(t, ferryhttp.NotStored, res.Outcome)
		// A handler error releases the key; a dead process cannot. Claim
		// it again the way a process that dies leaves it.
		claimDead(t, b, k, fp, lease)
		waitLeaseOver(t, b, "k")
		// The request that takes it over fails (a 5xx is never kept): the
		// key is free again, its takeover still counted.
		failed := post(t, srv.URL, "k", body, "X-Test-Status", "500")
		require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)
		require.Equal(t, 0, b.charged(t, "o-1"))
		// Its process dies again holding the key, and the next retry
		// takes it over: the second takeover, not a first one again.
		claimDead(t, b, k, fp, lease)
		waitLeaseOver(t, b, "k")
		r := post(t, srv.URL, "k", body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 2, hook.get(ferryhttp.TakenOver))
		require.Equal(t, r.Body, post(t, srv.URL, "k", body).Body)
		hash := ferryhttp.ScopeHash(ferryhttp.Request{Method: "POST", Route: "POST /payments", Key: "k"})
		require.Equal(t, []takeover{{"POST /payments", hash, 1}, {"POST /payments", hash, 2}}, hook.takeovers(),
			"each takeover names its key and counts on")
		stored, err := b.keys.GetKey(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, int64(2), stored.Takeovers)
	})
}

func TestExpiredKeyIsANewRequest(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) {
			// The lease bounds the first request's handler: long enough
			// for a loaded machine.
			c.Lease, c.Retention = 3*time.Second, 3*time.Second
		})))
		defer srv.Close()
		require.Equal(t, http.StatusCreated, post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`).Status)
		waitExpired(t, b, "k")
		// Past retention the key is forgotten: another body is no
		// mismatch, it is a new request.
		r := post(t, srv.URL, "k", `{"order_id":"o-1","amount":20}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		require.Empty(t, r.Header.Get(ferryhttp.HeaderReplayed))
		require.Equal(t, 2, b.charged(t, "o-1"))
		n, err := b.keys.PurgeKeys(testsvc.Context(t, time.Minute), 100)
		require.NoError(t, err)
		require.Zero(t, n, "the reclaimed key is live again")
	})
}

// A request that outlives its lease is taken over by a retry; its own
// writes roll back, whatever it does after: one charge.
func TestRequestPastItsLeaseIsFenced(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.Lease = 3 * time.Second })))
		t.Cleanup(srv.Close)
		entered, release := b.hold(t)
		slow := make(chan reply, 1)
		go func() {
			r, _ := send(srv.URL, "k", `{"order_id":"o-1","amount":10}`)
			slow <- r
		}()
		select {
		case <-entered:
		case r := <-slow:
			t.Fatalf("the first request ended before its handler made its writes: %d %s", r.Status, r.Body)
		}
		waitLeaseOver(t, b, "k")
		r := post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		release()
		s := <-slow
		require.Contains(t, []int{http.StatusConflict, http.StatusServiceUnavailable}, s.Status, "%s", s.Body)
		require.Equal(t, 1, b.charged(t, "o-1"))
		require.Equal(t, 1, b.events(t, "o-1"))
		require.Equal(t, r.Body, post(t, srv.URL, "k", `{"order_id":"o-1","amount":10}`).Body)
	})
}

func TestOptionalKeyRunsInATransactionAndStoresNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.Optional = true })))
		defer srv.Close()
		require.Equal(t, http.StatusCreated, post(t, srv.URL, "", `{"order_id":"o-1","amount":10}`).Status)
		require.Equal(t, http.StatusCreated, post(t, srv.URL, "", `{"order_id":"o-1","amount":10}`).Status)
		require.Equal(t, 2, b.charged(t, "o-1"), "without a key every request runs")
		r := post(t, srv.URL, "", `{"order_id":"o-2","amount":10}`, "X-Test-Status", "500")
		require.Equal(t, http.StatusInternalServerError, r.Status)
		require.Equal(t, 0, b.charged(t, "o-2"), "a 5xx rolls back")
	})
}

func TestBodyTooLargeIs413(t *testing.T) {
	t.Parallel()
	b := newBed(t, "sqlite")
	srv := httptest.NewServer(b.handler(b.newKeys(t, func(c *ferryhttp.Config) { c.MaxBodyBytes = 64 })))
	defer srv.Close()
	r := post(t, srv.URL, "k", fmt.Sprintf(`{"order_id":"o-1","amount":10,"note":%q}`, string(make([]byte, 100))))
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
	require.Equal(t, 0, b.charged(t, "o-1"))
}

var errDied = errors.New("the handler failed")

// claimDead leaves the key claimed as a process that died while running
// the request leaves it: in progress, leased, nothing else committed.
func claimDead(t *testing.T, b *bed, k *ferryhttp.Keys[*sql.Tx], fp string, lease time.Duration) {
	t.Helper()
	req := ferryhttp.Request{Method: "POST", Route: "POST /payments", Key: "k", Fingerprint: fp}
	_, ok, err := b.keys.ClaimKey(testsvc.Context(t, time.Minute), ferrystore.KeyClaim{
		Hash: ferryhttp.ScopeHash(req), Method: req.Method, Route: req.Route, Key: req.Key,
		Fingerprint: fp, Token: "dead-process",
	}, lease, time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
}

func waitLeaseOver(t *testing.T, b *bed, key string) {
	t.Helper()
	waitKey(t, b, key, func(k ferrystore.IdempotencyKey) bool { return k.LeaseLeft < 0 })
}

func waitExpired(t *testing.T, b *bed, key string) {
	t.Helper()
	waitKey(t, b, key, func(k ferrystore.IdempotencyKey) bool { return k.Expired })
}

// waitKey waits until the key (principal "", POST /payments) satisfies
// cond by the database's clock.
func waitKey(t *testing.T, b *bed, key string, cond func(ferrystore.IdempotencyKey) bool) {
	t.Helper()
	ctx := testsvc.Context(t, time.Minute)
	hash := ferryhttp.ScopeHash(ferryhttp.Request{Method: "POST", Route: "POST /payments", Key: key})
	testsvc.WaitFor(t, 20*time.Second, func() bool {
		k, err := b.keys.GetKey(ctx, hash)
		require.NoError(t, err)
		return cond(k)
	}, func() string { return "key " + key + " to reach its state by the database clock" })
}
