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
