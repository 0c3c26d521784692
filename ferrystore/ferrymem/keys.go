package ferrymem

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// keyTable holds idempotency keys by hash.
type keyTable struct {
	name string
	rows map[string]*keyRow
}

// keyRow is an idempotency key's row.
type keyRow struct {
	ferrystore.KeyClaim
	state       string
	lockedUntil time.Time
	takeovers   int64
	resp        ferrystore.StoredResponse
	expiresAt   time.Time
}

// keyLock names a transaction's staged completion of a key.
type keyLock struct {
	table *keyTable
	hash  string
}

func (t *keyTable) lockName(hash string) string { return "inbox\x00" + t.name + "\x00key\x00" + hash }

// view is the key as GetKey returns it.
func (r *keyRow) view(now time.Time) ferrystore.IdempotencyKey {
	k := ferrystore.IdempotencyKey{KeyClaim: r.KeyClaim, State: r.state, Takeovers: r.takeovers,
		LeaseLeft: r.lockedUntil.Sub(now), Expired: !r.expiresAt.After(now), Response: r.resp}
	k.Response.Headers = cloneHeaders(r.resp.Headers)
	k.Response.Body = slices.Clone(r.resp.Body)
	return k
}

func cloneHeaders(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, v := range h {
		out[k] = slices.Clone(v)
	}
	return out
}

// writeKey runs fn on the key hash once no transaction holds it (a
// completion not yet committed), as a SQL write waits for the row's lock.
func (in *Inbox) writeKey(ctx context.Context, hash string, fn func(now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db := in.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.waitFree(ctx, in.keys.lockName(hash)); err != nil {
		return err
	}
	return fn(db.now())
}

// ClaimKey inserts c as in progress, leased for lease under c.Token,
// expiring after retention; or claims an existing key that expired (a
// fresh request: its takeovers and response are gone) or was released
// (its takeovers kept). Otherwise it returns the key as it is, and false.
func (in *Inbox) ClaimKey(ctx context.Context, c ferrystore.KeyClaim, lease, retention time.Duration) (ferrystore.IdempotencyKey, bool, error) {
	var (
		out     ferrystore.IdempotencyKey
		claimed bool
	)
	err := in.writeKey(ctx, c.Hash, func(now time.Time) error {
		cur := in.keys.rows[c.Hash]
		expired := cur != nil && !cur.expiresAt.After(now)
		switch {
		case cur != nil && !expired && cur.state == ferrystore.KeyReleased:
			cur.KeyClaim, cur.state, cur.lockedUntil = c, ferrystore.KeyInProgress, now.Add(lease)
		case cur != nil && !expired:
			out = cur.view(now)
			return nil
		default: // absent or expired: a new request
			cur = &keyRow{KeyClaim: c, state: ferrystore.KeyInProgress, lockedUntil: now.Add(lease),
				expiresAt: now.Add(retention)}
			in.keys.rows[c.Hash] = cur
		}
		out, claimed = cur.view(now), true
		return nil
	})
	if err != nil {
		return ferrystore.IdempotencyKey{}, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	return out, claimed, nil
}

// TakeOverKey gives an in-progress key whose lease ran out to token, with
// a new lease.
func (in *Inbox) TakeOverKey(ctx context.Context, hash, token string, lease time.Duration) (bool, error) {
	var ok bool
	err := in.writeKey(ctx, hash, func(now time.Time) error {
		r := in.keys.rows[hash]
		if r == nil || r.state != ferrystore.KeyInProgress || !r.lockedUntil.Before(now) {
			return nil
		}
		r.Token, r.lockedUntil, r.takeovers, ok = token, now.Add(lease), r.takeovers+1, true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("take over idempotency key: %w", err)
	}
	return ok, nil
}

// CompleteKey records resp as the key's response in the transaction of ex
// if token still holds the key's claim (ferrystore.ErrKeyFenced when it
// does not). The key stays locked until the transaction ends: a takeover
// or a release waits for it.
func (in *Inbox) CompleteKey(ctx context.Context, ex ferrystore.Executor, hash, token string, resp ferrystore.StoredResponse, retention time.Duration) error {
	tx, err := txOf(in.db, "CompleteKey", ex)
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	db, t := in.db, in.keys
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.acquire(ctx, tx, t.lockName(hash)); err != nil {
		return fmt.Errorf("complete idempotency key: %w", classify(err))
	}
	k := keyLock{t, hash}
	cur := tx.keys[k]
	if cur == nil {
		cur = t.rows[hash]
	}
	if cur == nil || cur.Token != token || cur.state != ferrystore.KeyInProgress {
		return ferrystore.ErrKeyFenced
	}
	now := db.now()
	done := *cur
	done.Token, done.state, done.expiresAt = "", ferrystore.KeyDone, now.Add(retention)
	done.resp = ferrystore.StoredResponse{Status: resp.Status, Headers: cloneHeaders(resp.Headers), Body: slices.Clone(resp.Body)}
	if done.resp.Body == nil {
		done.resp.Body = []byte{}
	}
	if tx.keys == nil {
		tx.keys = map[keyLock]*keyRow{}
	}
	tx.keys[k] = &done
	return nil
}

// ReleaseKey frees the key if token still holds its in-progress claim: it
// deletes it, or marks it released when it was taken over (its count of
// takeovers stays).
func (in *Inbox) ReleaseKey(ctx context.Context, hash, token string) error {
	err := in.writeKey(ctx, hash, func(time.Time) error {
		r := in.keys.rows[hash]
		switch {
		case r == nil || r.state != ferrystore.KeyInProgress || r.Token != token:
		case r.takeovers > 0:
			r.state, r.Token = ferrystore.KeyReleased, ""
		default:
			delete(in.keys.rows, hash)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// GetKey reads a key; ferrytype.ErrNotFound when none.
func (in *Inbox) GetKey(ctx context.Context, hash string) (ferrystore.IdempotencyKey, error) {
	var out ferrystore.IdempotencyKey
	err := in.db.statement(ctx, func(now time.Time) error {
		r := in.keys.rows[hash]
		if r == nil {
			return ferrytype.ErrNotFound
		}
		out = r.view(now)
		return nil
	})
	if err != nil {
		return ferrystore.IdempotencyKey{}, fmt.Errorf("read idempotency key: %w", err)
	}
	return out, nil
}

// expiredKeys returns the hashes of the expired keys no transaction
// holds, oldest expiry first.
func (in *Inbox) expiredKeys(now time.Time) []string {
	rows := in.keys.rows
	var out []string
	for h, r := range rows {
		if !r.expiresAt.After(now) && !in.db.held(in.keys.lockName(h)) {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(rows[a].expiresAt.Compare(rows[b].expiresAt), strings.Compare(a, b))
	})
	return out
}

// PurgeKeys deletes up to limit expired keys, in-progress ones included,
// oldest expiry first. A key a transaction is completing is left for the
// next purge.
func (in *Inbox) PurgeKeys(ctx context.Context, limit int) (int64, error) {
	if err := positive("purge idempotency keys", limit); err != nil {
		return 0, err
	}
	var n int64
	err := in.db.statement(ctx, func(now time.Time) error {
		old := in.expiredKeys(now)
		for _, h := range old[:min(len(old), limit)] {
			delete(in.keys.rows, h)
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return n, nil
}

// PurgeableKeys counts the expired keys.
func (in *Inbox) PurgeableKeys(ctx context.Context) (int64, error) {
	var n int64
	err := in.db.statement(ctx, func(now time.Time) error {
		for _, r := range in.keys.rows {
			if !r.expiresAt.After(now) {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count expired idempotency keys: %w", err)
	}
	return n, nil
}
