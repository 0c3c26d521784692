package ferry

import (
	"fmt"
	"testing"
	"time"

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
	_, withEvents := q.progress()
	require.Equal(t, int64(2), withEvents, "p1 and p3 had events, p2 none")

	ids, _ := q.take(5)
	require.Nil(t, ids)
}

func TestLogQueueEmptyTransactionsMoveTheCheckpoint(t *testing.T) {
	var q logQueue
	q.reset("p0")
	q.push(batch("p1"))
	q.push(batch("p2"))
	handled, withEvents := q.progress()
	require.Equal(t, ferrystore.LogPosition("p2"), handled)
	require.Zero(t, withEvents, "no event was handled: the checkpointer waits for the lease's renewal to save")
	q.reset("p9")
	_, handled = q.state()
	require.Equal(t, ferrystore.LogPosition("p9"), handled)
}

// An event missed by claims by id is tried again with doubling delays,
// maxMissTries times, then left to the table; a claim forgets its tries.
func TestLogQueueMissedEventsAreTriedAFewTimes(t *testing.T) {
	var q logQueue
	var delays []time.Duration
	for range maxMissTries {
		again, d, gaveUp := q.missed([]string{"a"})
		require.Equal(t, []string{"a"}, again)
		require.False(t, gaveUp)
		delays = append(delays, d)
	}
	require.Equal(t, time.Millisecond, delays[0])
	require.Equal(t, time.Millisecond<<(maxMissTries-1), delays[maxMissTries-1])
	again, d, gaveUp := q.missed([]string{"a"})
	require.Empty(t, again, "given up: the table has it")
	require.Zero(t, d)
	require.True(t, gaveUp, "the relay claims from the table at once")
	again, _, _ = q.missed([]string{"a"})
	require.Equal(t, []string{"a"}, again, "a new miss starts again")
	q.claimed([]string{"a"})
	again, d, gaveUp = q.missed([]string{"a", "b"})
	require.Equal(t, []string{"a", "b"}, again)
	require.Equal(t, time.Millisecond, d)
	require.False(t, gaveUp)
}

// Events a claim from the table took are not tried again by id when the
// log tells of them; the record of them is bounded.
func TestLogQueueEventsTakenFromTheTableAreNotTriedAgain(t *testing.T) {
	var q logQueue
	q.tookFromTable([]string{"a", "b"})
	again, _, gaveUp := q.missed([]string{"a", "c"})
	require.Equal(t, []string{"c"}, again)
	require.False(t, gaveUp, "a was taken: nothing given up")
	for i := range maxScanned {
		q.tookFromTable([]string{fmt.Sprint("x", i)})
	}
	require.LessOrEqual(t, len(q.scanned), maxScanned)
	again, _, _ = q.missed([]string{"b"})
	require.Equal(t, []string{"b"}, again, "forgotten past maxScanned")
}
