package ferrystoretest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// KeysHarness adapts one store's idempotency key table to the suite.
type KeysHarness[TTx any] struct {
	// New returns a migrated inbox store on fresh tables (its key table
	// among them), dropped when t ends.
	New func(t *testing.T) ferrystore.IdempotencyDriver[TTx]
}

func keyClaim(token string) ferrystore.KeyClaim {
	sum := sha256.Sum256(fmt.Appendf(nil, "key-%d", rand.Uint64()))
	return ferrystore.KeyClaim{
		Hash: hex.EncodeToString(sum[:]), Principal: "acct_1", Method: "POST", Route: "POST /payments",
		Key: "k-" + token, Fingerprint: hex.EncodeToString(sum[:]), Token: token,
	}
}

// complete stores resp for (hash, token) in a transaction of its own.
func complete[TTx any](ctx context.Context, s ferrystore.IdempotencyDriver[TTx], hash, token string, resp ferrystore.StoredResponse, retention time.Duration) error {
	tx, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.CompleteKey(ctx, s.UnwrapTx(tx), hash, token, resp, retention); err != nil {
		_ = s.Rollback(ctx, tx)
		return err
	}
	return s.Commit(ctx, tx)
}

// waitLeaseOver waits until the database's clock has passed the key's
// lease (or retention, when expired is set).
func waitLeaseOver(t *testing.T, ctx context.Context, s ferrystore.IdempotencyStore, hash string, expired bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, func() bool {
		k, err := s.GetKey(ctx, hash)
		require.NoError(t, err)
		if expired {
			return k.Expired
		}
		return k.LeaseLeft < 0
	}, func() string { return "the key's lease or retention to run out by the database clock" })
}

// ExerciseKeys runs the idempotency key conformance suite.
func ExerciseKeys[TTx any](t *testing.T, h KeysHarness[TTx]) {
	const lease, retention = time.Minute, time.Hour
	resp := ferrystore.StoredResponse{
		Status:  201,
		Headers: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/payments/p_1"}},
		// Not text: replays return the body byte for byte.
		Body: []byte("{\"id\":\"p_1\"}\x00\xff\xfe\n"),
	}

	t.Run("FirstClaimWinsAndADuplicateSeesItInProgress", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)

		c2 := c
		c2.Token = "t2"
		k, ok, err := s.ClaimKey(ctx, c2, lease, retention)
		require.NoError(t, err)
		require.False(t, ok, "a second claim of a held key must fail")
		require.Equal(t, ferrystore.KeyInProgress, k.State)
		require.Equal(t, "t1", k.Token)
		require.Equal(t, c.Fingerprint, k.Fingerprint)
		require.Greater(t, k.LeaseLeft, 30*time.Second)
		require.False(t, k.Expired)
	})

	t.Run("CompletedKeyReturnsTheResponseByteForByte", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, complete(ctx, s, c.Hash, c.Token, resp, retention))

		k, err := s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyDone, k.State)
		require.Equal(t, resp, k.Response)
		require.Equal(t, c.Key, k.Key)
		require.Equal(t, c.Route, k.Route)

		// A completed key is never released, and never completed twice.
		require.NoError(t, s.ReleaseKey(ctx, c.Hash, c.Token))
		_, err = s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.ErrorIs(t, complete(ctx, s, c.Hash, c.Token, resp, retention), ferrystore.ErrKeyFenced)
	})

	t.Run("RolledBackCompletionLeavesTheClaimAndReleaseFreesIt", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, s.CompleteKey(ctx, s.UnwrapTx(tx), c.Hash, c.Token, resp, retention))
		require.NoError(t, s.Rollback(ctx, tx))
		k, err := s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyInProgress, k.State)

		require.NoError(t, s.ReleaseKey(ctx, c.Hash, "not-the-holder"))
		_, err = s.GetKey(ctx, c.Hash)
		require.NoError(t, err, "only the holder's token releases a key")
		require.NoError(t, s.ReleaseKey(ctx, c.Hash, c.Token))
		_, err = s.GetKey(ctx, c.Hash)
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
		_, ok, err = s.ClaimKey(ctx, keyWithToken(c, "t2"), lease, retention)
		require.NoError(t, err)
		require.True(t, ok, "a released key is free for the retry")
	})

	t.Run("TakeOverOnlyAfterTheLeaseAndTheOldHolderIsFenced", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, 50*time.Millisecond, retention)
		require.NoError(t, err)
		require.True(t, ok)

		long := keyClaim("t3")
		_, ok, err = s.ClaimKey(ctx, long, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TakeOverKey(ctx, long.Hash, "t4", lease)
		require.NoError(t, err)
		require.False(t, ok, "a running lease is never taken over")

		waitLeaseOver(t, ctx, s, c.Hash, false)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t2", lease)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t5", lease)
		require.NoError(t, err)
		require.False(t, ok, "the new holder's lease runs")

		require.ErrorIs(t, complete(ctx, s, c.Hash, "t1", resp, retention), ferrystore.ErrKeyFenced)
		require.NoError(t, s.ReleaseKey(ctx, c.Hash, "t1"))
		require.NoError(t, complete(ctx, s, c.Hash, "t2", resp, retention))
		k, err := s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyDone, k.State)
		require.Equal(t, int64(1), k.Takeovers)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t6", lease)
		require.NoError(t, err)
		require.False(t, ok, "a completed key is never taken over")
	})

	// A request that took a key over and then failed releases it, but the
	// count of takeovers stays with the key: a request that keeps killing
	// its servers shows a growing count, not a count back at 0.
	t.Run("ReleaseAfterATakeoverKeepsTheCount", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, 50*time.Millisecond, retention)
		require.NoError(t, err)
		require.True(t, ok)
		waitLeaseOver(t, ctx, s, c.Hash, false)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t2", 50*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.ReleaseKey(ctx, c.Hash, "t1"), "the fenced holder's release does nothing")
		k, err := s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyInProgress, k.State)
		require.NoError(t, s.ReleaseKey(ctx, c.Hash, "t2"))
		k, err = s.GetKey(ctx, c.Hash)
		require.NoError(t, err, "a key released after a takeover stays, with its count")
		require.Equal(t, ferrystore.KeyReleased, k.State)
		require.Equal(t, int64(1), k.Takeovers)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t9", lease)
		require.NoError(t, err)
		require.False(t, ok, "a released key is claimed, not taken over")

		// The retry claims it (any fingerprint: it is free), the count
		// kept; the next takeover counts on from it.
		c3 := keyWithToken(c, "t3")
		c3.Fingerprint = keyClaim("other").Fingerprint
		k, ok, err = s.ClaimKey(ctx, c3, 50*time.Millisecond, retention)
		require.NoError(t, err)
		require.True(t, ok, "a released key is free for the retry")
		require.Equal(t, int64(1), k.Takeovers)
		_, ok, err = s.ClaimKey(ctx, keyWithToken(c, "t4"), lease, retention)
		require.NoError(t, err)
		require.False(t, ok, "once claimed again it is in progress")
		waitLeaseOver(t, ctx, s, c.Hash, false)
		ok, err = s.TakeOverKey(ctx, c.Hash, "t5", lease)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, complete(ctx, s, c.Hash, "t5", resp, retention))
		k, err = s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyDone, k.State)
		require.Equal(t, int64(2), k.Takeovers)
		require.Equal(t, c3.Fingerprint, k.Fingerprint)

		// A key never taken over is deleted by its release, as before.
		fresh := keyClaim("t6")
		_, ok, err = s.ClaimKey(ctx, fresh, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.ReleaseKey(ctx, fresh.Hash, "t6"))
		_, err = s.GetKey(ctx, fresh.Hash)
		require.ErrorIs(t, err, ferrytype.ErrNotFound)
	})

	t.Run("ExpiredKeyIsANewRequest", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		c := keyClaim("t1")
		_, ok, err := s.ClaimKey(ctx, c, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, complete(ctx, s, c.Hash, c.Token, resp, 50*time.Millisecond))
		waitLeaseOver(t, ctx, s, c.Hash, true)

		c2 := keyWithToken(c, "t2")
		c2.Fingerprint = keyClaim("other").Fingerprint
		k, ok, err := s.ClaimKey(ctx, c2, lease, retention)
		require.NoError(t, err)
		require.True(t, ok, "an expired key is claimed anew")
		require.Equal(t, ferrystore.KeyInProgress, k.State)
		k, err = s.GetKey(ctx, c.Hash)
		require.NoError(t, err)
		require.Equal(t, ferrystore.KeyInProgress, k.State)
		require.Equal(t, c2.Fingerprint, k.Fingerprint)
		require.Equal(t, 0, k.Response.Status, "the old response is gone")
		require.Empty(t, k.Response.Body)
		require.False(t, k.Expired)
	})

	t.Run("PurgeDeletesExpiredKeysInBoundedBatches", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		var expired []string
		for i := range 3 {
			c := keyClaim(fmt.Sprint("e", i))
			_, ok, err := s.ClaimKey(ctx, c, lease, 50*time.Millisecond)
			require.NoError(t, err)
			require.True(t, ok)
			if i > 0 {
				require.NoError(t, complete(ctx, s, c.Hash, c.Token, resp, 50*time.Millisecond))
			}
			expired = append(expired, c.Hash)
		}
		live := keyClaim("live")
		_, ok, err := s.ClaimKey(ctx, live, lease, retention)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, complete(ctx, s, live.Hash, live.Token, resp, retention))
		for _, h := range expired {
			waitLeaseOver(t, ctx, s, h, true)
		}

		n, err := s.PurgeableKeys(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(len(expired)), n, "the expired keys, not the live one")
		var total int64
		for _, want := range []int64{2, 1, 0} {
			n, err := s.PurgeKeys(ctx, 2)
			require.NoError(t, err)
			require.Equal(t, want, n)
			total += n
		}
		require.Equal(t, int64(3), total)
		for _, h := range expired {
			_, err := s.GetKey(ctx, h)
			require.ErrorIs(t, err, ferrytype.ErrNotFound)
		}
		_, err = s.GetKey(ctx, live.Hash)
		require.NoError(t, err, "a live key is kept")
	})

	t.Run("ConcurrentClaimsOfOneKeyHaveOneWinner", func(t *testing.T) {
		ctx := testenv.Context(t, time.Minute)
		s := h.New(t)
		for round := range 5 {
			c := keyClaim(fmt.Sprint("r", round))
			var (
				wg   sync.WaitGroup
				wins atomic.Int64
				errs = make(chan error, 16)
			)
			start := make(chan struct{})
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, ok, err := s.ClaimKey(ctx, keyWithToken(c, fmt.Sprint("g", g)), lease, retention)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						wins.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int64(1), wins.Load(), "round %d", round)
		}
	})
}

func keyWithToken(c ferrystore.KeyClaim, token string) ferrystore.KeyClaim {
	c.Token = token
	return c
}
