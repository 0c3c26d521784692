package ferrystore

import (
	"context"
	"errors"
	"time"
)

// IdempotencyStore is the database side of ferry's idempotent requests
// (ferryhttp): one row per request key, claimed by the first request with a
// lease of its own, completed with the stored response in the request's
// business transaction, replayed to every retry until it expires. Every
// inbox store implements it on the inbox's database (its key table).
type IdempotencyStore interface {
	// ClaimKey inserts k as in progress, leased for lease under k.Token,
	// expiring after retention. When the key exists it claims it only if
	// the existing row expired (a fresh request then) or was released
	// (KeyReleased; its takeovers are kept and returned); otherwise it
	// returns the existing row and false.
	ClaimKey(ctx context.Context, k KeyClaim, lease, retention time.Duration) (IdempotencyKey, bool, error)
	// TakeOverKey gives an in-progress key whose lease ran out to a new
	// request under token, with a new lease. It returns false when the key
	// is no longer in progress or its lease is still running.
	TakeOverKey(ctx context.Context, hash, token string, lease time.Duration) (bool, error)
	// CompleteKey records resp as the key's response through ex, the
	// request's transaction, if token still holds the key's claim;
	// ErrKeyFenced when it does not (the lease ran out and another request
	// took the key over). The row stays locked until ex commits.
	CompleteKey(ctx context.Context, ex Executor, hash, token string, resp StoredResponse, retention time.Duration) error
	// ReleaseKey frees the key if token still holds its in-progress
	// claim, so that a retry runs the request again: it deletes the key,
	// or, when the key was taken over, marks it KeyReleased with its count
	// of takeovers, which the next ClaimKey keeps. A completed key is
	// never released.
	ReleaseKey(ctx context.Context, hash, token string) error
	// GetKey reads a key; ferrytype.ErrNotFound when none.
	GetKey(ctx context.Context, hash string) (IdempotencyKey, error)
	// PurgeKeys deletes up to limit expired keys, in-progress ones
	// included, oldest expiry first.
	PurgeKeys(ctx context.Context, limit int) (int64, error)
	// PurgeableKeys counts the expired keys: what PurgeKeys would delete,
	// deleting nothing (ferry purge --idempotency-keys --dry-run).
	PurgeableKeys(ctx context.Context) (int64, error)
}

// IdempotencyDriver is an InboxDriver whose database also holds
// idempotency keys: what ferryhttp needs.
type IdempotencyDriver[TTx any] interface {
	InboxDriver[TTx]
	IdempotencyStore
}

// ErrKeyFenced is returned by CompleteKey when the request no longer holds
// its key's claim.
var ErrKeyFenced = errors.New("ferrystore: idempotency key claimed by another request")

// Idempotency key states.
const (
	KeyInProgress = "IN_PROGRESS"
	KeyDone       = "DONE"
	// KeyReleased: a key that was taken over and then released (its
	// request failed): free for the next request, as a key that is not
	// there is, but its count of takeovers stays, so that a request that
	// keeps killing its servers is seen.
	KeyReleased = "RELEASED"
)

// KeyClaim is what a request claims a key with.
type KeyClaim struct {
	// Hash identifies the key within its scope: the SHA-256 (hex) of the
	// principal, method, route and key. The table's primary key.
	Hash string
	// Principal, Method, Route and Key are stored for people to read.
	Principal, Method, Route, Key string
	// Fingerprint is the SHA-256 (hex) of what defines the request.
	Fingerprint string
	// Token identifies this request's claim.
	Token string
}

// StoredResponse is a request's response as stored for replays.
type StoredResponse struct {
	Status  int
	Headers map[string][]string
	Body    []byte
}

// IdempotencyKey is a key's stored row.
type IdempotencyKey struct {
	KeyClaim
	// State is KeyInProgress, KeyDone or KeyReleased.
	State string
	// Response is set when State is KeyDone.
	Response StoredResponse
	// LeaseLeft is how long the in-progress claim's lease still runs,
	// negative once it ran out, by the database's clock.
	LeaseLeft time.Duration
	// Expired reports that the key's retention ended (by the database's
	// clock): a request with it is a new request.
	Expired bool
	// Takeovers counts the claims taken over from a request that ran out
	// of lease.
	Takeovers int64
}
