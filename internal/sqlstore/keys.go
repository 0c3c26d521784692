package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Keys is the idempotency key table of an inbox database, written once for
// every dialect. It implements ferrystore.IdempotencyStore.
type Keys struct {
	d     Dialect
	pool  ferrystore.Executor
	table string // quoted
	purge string
}

var _ ferrystore.IdempotencyStore = (*Keys)(nil)

// NewKeys returns the key table (quoted) on pool. purge is the dialect's
// statement that deletes a bounded number of expired keys, oldest expiry
// first, with ? placeholders: its one placeholder takes the bound.
func NewKeys(d Dialect, pool ferrystore.Executor, table, purge string) Keys {
	return Keys{d: d, pool: pool, table: table, purge: d.Rebind(purge)}
}

func (k *Keys) q(s string) string { return k.d.Rebind(s) }

// ClaimKey inserts the key in progress, or reclaims an expired one.
func (k *Keys) ClaimKey(ctx context.Context, c ferrystore.KeyClaim, lease, retention time.Duration) (ferrystore.IdempotencyKey, bool, error) {
	for range 3 {
		// Look first: a replay, or a duplicate of a running request, is
		// answered by a read, which never waits for a writer (SQLite in
		// WAL mode has one writer at a time).
		cur, err := k.GetKey(ctx, c.Hash)
		switch {
		case err == nil && !cur.Expired && cur.State == ferrystore.KeyReleased:
			// Released after a takeover: free for the retry, with the
			// count of takeovers kept.
			n, err := k.pool.Exec(ctx, k.q("UPDATE "+k.table+" SET principal = ?, method = ?, route = ?, idem_key = ?,"+
				" fingerprint = ?, state = '"+ferrystore.KeyInProgress+"', lease_token = ?, locked_until = "+k.d.Shift()+
				" WHERE key_hash = ? AND state = '"+ferrystore.KeyReleased+"' AND expires_at > "+k.d.Now()),
				c.Principal, c.Method, c.Route, c.Key, c.Fingerprint, c.Token, later(k.d, lease), c.Hash)
			if err != nil {
				return ferrystore.IdempotencyKey{}, false, fmt.Errorf("reclaim released idempotency key: %w", k.d.Classify(err))
			}
			if n == 1 {
				return ferrystore.IdempotencyKey{KeyClaim: c, State: ferrystore.KeyInProgress, LeaseLeft: lease,
					Takeovers: cur.Takeovers}, true, nil
			}
			continue // claimed, expired or purged since: look again
		case err == nil && !cur.Expired:
			return cur, false, nil
		case err != nil && !errors.Is(err, ferrytype.ErrNotFound):
			return ferrystore.IdempotencyKey{}, false, err
		}
		_, err = k.pool.Exec(ctx, k.q("INSERT INTO "+k.table+" (key_hash, principal, method, route, idem_key, fingerprint,"+
			" state, lease_token, locked_until, takeovers, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, '"+
			ferrystore.KeyInProgress+"', ?, "+k.d.Shift()+", 0, "+k.d.Now()+", "+k.d.Shift()+")"),
			c.Hash, c.Principal, c.Method, c.Route, c.Key, c.Fingerprint, c.Token,
			later(k.d, lease), later(k.d, retention))
		if err == nil {
			return ferrystore.IdempotencyKey{KeyClaim: c, State: ferrystore.KeyInProgress, LeaseLeft: lease}, true, nil
		}
		if !errors.Is(k.d.Classify(err), ferrytype.ErrDuplicate) {
			return ferrystore.IdempotencyKey{}, false, fmt.Errorf("claim idempotency key: %w", k.d.Classify(err))
		}
		// The key exists: a request with an expired key is a new request.
		n, err := k.pool.Exec(ctx, k.q("UPDATE "+k.table+" SET principal = ?, method = ?, route = ?, idem_key = ?,"+
			" fingerprint = ?, state = '"+ferrystore.KeyInProgress+"', lease_token = ?, locked_until = "+k.d.Shift()+
			", takeovers = 0, status_code = NULL, resp_headers = NULL, resp_body = NULL, created_at = "+k.d.Now()+
			", completed_at = NULL, expires_at = "+k.d.Shift()+" WHERE key_hash = ? AND expires_at <= "+k.d.Now()),
			c.Principal, c.Method, c.Route, c.Key, c.Fingerprint, c.Token, later(k.d, lease), later(k.d, retention), c.Hash)
		if err != nil {
			return ferrystore.IdempotencyKey{}, false, fmt.Errorf("reclaim expired idempotency key: %w", k.d.Classify(err))
		}
		if n == 1 {
			return ferrystore.IdempotencyKey{KeyClaim: c, State: ferrystore.KeyInProgress, LeaseLeft: lease}, true, nil
		}
		cur, err = k.GetKey(ctx, c.Hash)
		if errors.Is(err, ferrytype.ErrNotFound) {
			continue // released or purged since: claim again
		}
		return cur, false, err
	}
	return ferrystore.IdempotencyKey{}, false, fmt.Errorf("claim idempotency key: %w: the key kept appearing and vanishing",
		ferrytype.Classed(errors.New("contended key"), ferrytype.ErrRetryable))
}

// TakeOverKey claims an in-progress key whose lease ran out.
func (k *Keys) TakeOverKey(ctx context.Context, hash, token string, lease time.Duration) (bool, error) {
	n, err := k.pool.Exec(ctx, k.q("UPDATE "+k.table+" SET lease_token = ?, locked_until = "+k.d.Shift()+
		", takeovers = takeovers + 1 WHERE key_hash = ? AND state = '"+ferrystore.KeyInProgress+"' AND locked_until < "+k.d.Now()),
		token, later(k.d, lease), hash)
	if err != nil {
		return false, fmt.Errorf("take over idempotency key: %w", k.d.Classify(err))
	}
	return n == 1, nil
}

// CompleteKey stores the response in the request's transaction.
func (k *Keys) CompleteKey(ctx context.Context, ex ferrystore.Executor, hash, token string, resp ferrystore.StoredResponse, retention time.Duration) error {
	headers, err := json.Marshal(resp.Headers)
	if err != nil {
		return fmt.Errorf("complete idempotency key: headers: %w", err)
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	n, err := ex.Exec(ctx, k.q("UPDATE "+k.table+" SET state = '"+ferrystore.KeyDone+"', lease_token = '', status_code = ?,"+
		" resp_headers = ?, resp_body = ?, completed_at = "+k.d.Now()+", expires_at = "+k.d.Shift()+
		" WHERE key_hash = ? AND lease_token = ? AND state = '"+ferrystore.KeyInProgress+"'"),
		resp.Status, string(headers), body, later(k.d, retention), hash, token)
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", k.d.Classify(err))
	}
	if n != 1 {
		return ferrystore.ErrKeyFenced
	}
	return nil
}

// ReleaseKey deletes an in-progress key its token still holds, or marks it
// released when it was taken over (its count of takeovers stays).
func (k *Keys) ReleaseKey(ctx context.Context, hash, token string) error {
	_, err := k.pool.Exec(ctx, k.q("UPDATE "+k.table+" SET state = '"+ferrystore.KeyReleased+"', lease_token = ''"+
		" WHERE key_hash = ? AND lease_token = ? AND state = '"+ferrystore.KeyInProgress+"' AND takeovers > 0"), hash, token)
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", k.d.Classify(err))
	}
	_, err = k.pool.Exec(ctx, k.q("DELETE FROM "+k.table+" WHERE key_hash = ? AND lease_token = ? AND state = '"+
		ferrystore.KeyInProgress+"'"), hash, token)
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", k.d.Classify(err))
	}
	return nil
}

// GetKey reads a key.
func (k *Keys) GetKey(ctx context.Context, hash string) (ferrystore.IdempotencyKey, error) {
	rows, err := k.pool.Query(ctx, k.q("SELECT key_hash, principal, method, route, idem_key, fingerprint, state, lease_token,"+
		" takeovers, COALESCE(status_code, 0), COALESCE(resp_headers, ''), resp_body, "+k.d.AgeMicros("locked_until")+
		", CASE WHEN expires_at <= "+k.d.Now()+" THEN 1 ELSE 0 END FROM "+k.table+" WHERE key_hash = ?"), hash)
	if err != nil {
		return ferrystore.IdempotencyKey{}, fmt.Errorf("read idempotency key: %w", k.d.Classify(err))
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ferrystore.IdempotencyKey{}, fmt.Errorf("read idempotency key: %w", k.d.Classify(err))
		}
		return ferrystore.IdempotencyKey{}, ferrytype.ErrNotFound
	}
	var (
		r        ferrystore.IdempotencyKey
		headers  string
		age      int64
		expired  int64
		takeover int64
		status   int64
	)
	if err := rows.Scan(&r.Hash, &r.Principal, &r.Method, &r.Route, &r.Key, &r.Fingerprint, &r.State, &r.Token,
		&takeover, &status, &headers, &r.Response.Body, &age, &expired); err != nil {
		return ferrystore.IdempotencyKey{}, fmt.Errorf("read idempotency key: %w", err)
	}
	r.Takeovers, r.Response.Status, r.Expired = takeover, int(status), expired == 1
	r.LeaseLeft = -time.Duration(age) * time.Microsecond
	if headers != "" {
		if err := json.Unmarshal([]byte(headers), &r.Response.Headers); err != nil {
			return ferrystore.IdempotencyKey{}, fmt.Errorf("read idempotency key: stored headers: %w", err)
		}
	}
	return r, rows.Close()
}

// PurgeableKeys counts the expired keys, as PurgeKeys finds them.
func (k *Keys) PurgeableKeys(ctx context.Context) (int64, error) {
	n, err := QueryCount(ctx, k.pool, "count expired idempotency keys",
		"SELECT COUNT(*) FROM "+k.table+" WHERE expires_at <= "+k.d.Now())
	if err != nil {
		return 0, k.d.Classify(err)
	}
	return n, nil
}

// PurgeKeys deletes up to limit expired keys.
func (k *Keys) PurgeKeys(ctx context.Context, limit int) (int64, error) {
	n, err := k.pool.Exec(ctx, k.purge, limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", k.d.Classify(err))
	}
	return n, nil
}
