package ferry

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
)

func batch(pos string, ids ...string) ferrystore.LogBatch {
	b := ferrystore.LogBatch{Pos: ferrystore.LogPosition(pos)}
	for _, id := range ids {
		b.Events = append(b.Events, ferrystore.LogEvent{ID: id})
	}
	return b
}

// The checkpoint passes a transaction only once every claim of its events
// committed, whichever lane finishes first; a failed claim puts its ids
// back at the head, and holds the checkpoint.
func TestLogQueueCheckpointWaitsForEveryClaim(t *testing.T) {
	var q logQueue
	q.reset("p0")
	q.push(batch("p1", "a", "b", "c"))
	q.push(batch("p2")) // a transaction with no events
	q.push(batch("p3", "d"))

	ids1, done1 := q.take(2)
	require.Equal(t, []string{"a", "b"}, ids1)
	ids2, done2 := q.take(2)
	require.Equal(t, []string{"c", "d"}, ids2)
	queued, handled := q.state()
	require.Zero(t, queued)
	require.Equal(t, ferrystore.LogPosition("p0"), handled)

	done2(true) // c and d claimed, a and b not yet
	_, handled = q.state()
	require.Equal(t, ferrystore.LogPosition("p0"), handled, "p1 still has a and b in a claim")

	done1(false) // that claim failed: a and b go back
	queued, handled = q.state()
	require.Equal(t, 2, queued)
	require.Equal(t, ferrystore.LogPosition("p0"), handled)
	again, done := q.take(10)
	require.Equal(t, []string{"a", "b"}, again)
	done(true)
	queued, handled = q.state()
	require.Zero(t, queued)
	require.Equal(t, ferrystore.LogPosition("p3"), handled, "every transaction up to p3 is claimed")

	ids, _ := q.take(5)
	require.Nil(t, ids)
}

func TestLogQueueEmptyTransactionsMoveTheCheckpoint(t *testing.T) {
	var q logQueue
	q.reset("p0")
	q.push(batch("p1"))
	q.push(batch("p2"))
	_, handled := q.state()
	require.Equal(t, ferrystore.LogPosition("p2"), handled)
	q.reset("p9")
	_, handled = q.state()
	require.Equal(t, ferrystore.LogPosition("p9"), handled)
}
