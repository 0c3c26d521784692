package ferrypg_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// Claims check each payload's JSON unless the payload column is json or
// jsonb (as the migrations make it), whose values PostgreSQL checked on
// the way in: a table whose payload column is text, as a hand-made table
// might be, still has a payload that is not JSON recorded DEAD as
// malformed, and its other rows claimed.
func TestClaimChecksPayloadsUnlessTheColumnIsJSON(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, time.Minute)
	claim := func(s ferrystore.Store) ([]ferrytype.Message, map[string]error) {
		var mu sync.Mutex
		bad := map[string]error{}
		msgs, err := s.Claim(ctx, ferrystore.ClaimParams{Limit: 10, Token: testenv.Name("t"), Lease: time.Minute,
			Malformed: func(id string, err error) { mu.Lock(); bad[id] = err; mu.Unlock() }})
		require.NoError(t, err)
		return msgs, bad
	}
	insert := func(s ferrystore.Store, id, payload string) {
		exec(ctx, t, s, `INSERT INTO "`+s.Table()+`" (event_id, aggregate_id, event_type, payload) VALUES ('`+
			id+`', '1', 'T', '`+payload+`')`)
	}

	typed := Store(t)
	insert(typed, "good", `{"a":1}`)
	msgs, bad := claim(typed)
	require.Len(t, msgs, 1)
	require.Empty(t, bad)
	require.True(t, ferrypg.PayloadsTrusted(typed.(*ferrypg.StdlibStore)), "a json column's payloads are PostgreSQL's to check")

	text := Store(t)
	exec(ctx, t, text, `ALTER TABLE "`+text.Table()+`" ALTER COLUMN payload TYPE text`)
	insert(text, "good", `{"a":1}`)
	insert(text, "bad", `not json`)
	msgs, bad = claim(text)
	require.Len(t, msgs, 1)
	require.Equal(t, "good", msgs[0].ID)
	require.ErrorIs(t, bad["bad"], ferrytype.ErrMalformedRow)
	require.ErrorContains(t, bad["bad"], "payload: not valid JSON")
	require.False(t, ferrypg.PayloadsTrusted(text.(*ferrypg.StdlibStore)))
}
