package ferryconsole

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokenExpiresAndNamesItsOperator(t *testing.T) {
	t.Parallel()
	h := &console{cfg: Config{Secret: []byte(strings.Repeat("k", 32)), TokenLifetime: time.Hour}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tok := h.token("alice", now)
	require.True(t, h.validToken("alice", tok, now))
	require.True(t, h.validToken("alice", tok, now.Add(time.Hour)), "valid for its whole lifetime")
	require.False(t, h.validToken("alice", tok, now.Add(time.Hour+time.Second)), "expired")
	require.False(t, h.validToken("alice", tok, now.Add(-2*time.Minute)), "rendered in the future")
	require.False(t, h.validToken("bob", tok, now), "another operator's")
	other := &console{cfg: Config{Secret: []byte(strings.Repeat("j", 32)), TokenLifetime: time.Hour}}
	require.False(t, other.validToken("alice", tok, now), "another secret's")
	// The time is signed: moving it forward breaks the signature.
	ts, sig, _ := strings.Cut(tok, ".")
	require.False(t, h.validToken("alice", ts+"0."+sig, now))
	for _, bad := range []string{"", ".", "x.y", ts + ".", "." + sig, ts + "." + sig + "=", ts + ".!!"} {
		require.False(t, h.validToken("alice", bad, now), "%q", bad)
	}
}

func TestBaseIsRelativeToTheRoot(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{"/": "./", "/conflicts": "./", "/outbox/orders/dead": "../../",
		"/inbox/points/conflicts/7/resolve": "../../../../"} {
		require.Equal(t, want, base(path), path)
	}
}

func TestTokensAreOwnAndSpentOnce(t *testing.T) {
	t.Parallel()
	h := &console{cfg: Config{Secret: []byte(strings.Repeat("k", 32)), TokenLifetime: time.Hour}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a, b := h.token("alice", now), h.token("alice", now)
	require.NotEqual(t, a, b, "two pages rendered in one second have their own tokens")
	at, ok := h.tokenTime("alice", a, now)
	require.True(t, ok)
	require.True(t, now.Equal(at))
	var s spentTokens
	require.True(t, s.spend(a, now.Add(time.Hour), now))
	require.False(t, s.spend(a, now.Add(time.Hour), now.Add(time.Minute)), "spent")
	require.True(t, s.spend(b, now.Add(time.Hour), now), "another page's token is its own")
	// Expired entries are forgotten as others are spent.
	require.True(t, s.spend(h.token("alice", now), now.Add(time.Hour), now.Add(2*time.Hour)))
	require.NotContains(t, s.until, a)
}

func TestResultsAreTheirOperatorsAndExpire(t *testing.T) {
	t.Parallel()
	var rs results
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	id := rs.put("alice", resultPage{Kind: kindOutbox, Name: "orders", Action: "Retry"}, now)
	p, ok := rs.get(id, "alice", now.Add(time.Minute))
	require.True(t, ok)
	require.Equal(t, "Retry", p.Action)
	_, ok = rs.get(id, "bob", now)
	require.False(t, ok, "another operator's")
	_, ok = rs.get(id, "alice", now.Add(resultTTL))
	require.False(t, ok, "expired")
	for i := range maxResults {
		rs.put("alice", resultPage{}, now.Add(time.Duration(i)))
	}
	_, ok = rs.get(id, "alice", now)
	require.False(t, ok, "the oldest is forgotten past the bound")
	require.LessOrEqual(t, len(rs.byID), maxResults)
}
