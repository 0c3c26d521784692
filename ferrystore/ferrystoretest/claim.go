package ferrystoretest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseClaim checks claims: leases, limits, concurrency.
func exerciseClaim[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("ClaimLeasesOnce", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`))
		first, token := b.claim(t, 10, false)
		require.Len(t, first, 2)
		again, _ := b.claim(t, 10, false)
		require.Empty(t, again, "a leased row is not claimed again")
		n, err := b.store.MarkSent(b.ctx, token, ids(first))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		for _, m := range first {
			row := b.get(t, m.ID)
			require.Equal(t, ferrytype.StatusSent, row.Status)
			require.Empty(t, row.LeaseToken)
			require.False(t, row.SentAt.IsZero())
		}
	})

	t.Run("ClaimRespectsLimit", func(t *testing.T) {
		b := setup(t, h)
		for i := 0; i < 7; i++ {
			b.enqueue(t, ev("A", fmt.Sprint(i), `{}`))
		}
		msgs, _ := b.claim(t, 3, false)
		require.Len(t, msgs, 3)
	})

	t.Run("ConcurrentClaimsNeverOverlap", func(t *testing.T) {
		b := setup(t, h)
		const total = 1200
		batch := make([]ferry.Event, 0, 100)
		for i := 0; i < total; i++ {
			batch = append(batch, ev("A", fmt.Sprint(i), `{}`))
			if len(batch) == cap(batch) {
				b.enqueue(t, batch...)
				batch = batch[:0]
			}
		}
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					token := fmt.Sprintf("w%d-%d", w, i)
					msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 25, Token: token, Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						seen[m.ID]++
					}
					mu.Unlock()
					if n, err := b.store.MarkSent(b.ctx, token, ids(msgs)); err != nil || n != int64(len(msgs)) {
						errs <- fmt.Errorf("mark sent: n=%d err=%v", n, err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, seen, total)
		for id, n := range seen {
			require.Equal(t, 1, n, "event %s claimed %d times", id, n)
		}
	})

	// Producers' transactions must not wait for relays, let alone
	// deadlock with them: a business transaction failing because a relay
	// was claiming would make the outbox a new source of errors. (InnoDB
	// under REPEATABLE READ does exactly that: the claim's locking scan
	// locks the gap where new events are inserted.)
	t.Run("ProducersNeverConflictWithClaims", func(t *testing.T) {
		b := setup(t, h)
		const producers, perProducer, claimers = 4, 150, 4
		var (
			wg, cw  sync.WaitGroup
			mu      sync.Mutex
			claimed = map[string]int{}
			done    = make(chan struct{})
			// committed rings after each producer's commit. On SQLite a
			// claimer that found nothing waits for it instead of claiming
			// again at once: spinning claimers would hold its one write
			// lock almost all the time, and its busy handler is not fair,
			// so a producer could wait past the busy timeout on a loaded
			// machine. Elsewhere claimers spin, to press on the indexes.
			committed = make(chan struct{}, 1)
			pace      = b.store.Dialect() == "sqlite"
		)
		errs := make(chan error, producers+claimers)
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; i < perProducer; i++ {
					tx, commit, rollback := b.h.Begin(b.ctx, t, b.store)
					if _, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", fmt.Sprintf("%d-%d", p, i), `{}`)); err != nil {
						_ = rollback()
						errs <- fmt.Errorf("producer %d: enqueue: %w", p, err)
						return
					}
					if err := commit(); err != nil {
						errs <- fmt.Errorf("producer %d: commit: %w", p, err)
						return
					}
					select {
					case committed <- struct{}{}:
					default:
					}
				}
			}(p)
		}
		for c := 0; c < claimers; c++ {
			cw.Add(1)
			go func(c int) {
				defer cw.Done()
				for i := 0; ; i++ {
					token := fmt.Sprintf("c%d-%d", c, i)
					// Only a claim that starts after every producer
					// committed sees all their rows: a claim already
					// running may read an older snapshot.
					var last bool
					select {
					case <-done:
						last = true
					default:
					}
					// A claim may lose the lock too: on SQLite its busy
					// handler is not fair, and a claimer can wait past the
					// busy timeout while the others take turns. The relay
					// claims again after a backoff; so does this claimer,
					// a few times.
					var msgs []ferrytype.Message
					if err := retryLockConflict(func() (err error) {
						msgs, err = b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 10, Token: token, Lease: time.Minute})
						return err
					}); err != nil {
						errs <- fmt.Errorf("claimer %d: claim: %w", c, err)
						return
					}
					if len(msgs) == 0 {
						if last {
							return
						}
						if pace {
							select {
							case <-committed:
							case <-done:
							}
						}
						continue
					}
					mu.Lock()
					for _, m := range msgs {
						claimed[m.ID]++
					}
					mu.Unlock()
					// A mark may lose a deadlock to another claimer's on
					// InnoDB; the relay tries a mark again (until the
					// lease ends), and so does this claimer. Producers get
					// no such allowance.
					if err := retryLockConflict(func() error {
						_, err := b.store.MarkSent(b.ctx, token, ids(msgs))
						return err
					}); err != nil {
						errs <- fmt.Errorf("claimer %d: mark sent: %w", c, err)
						return
					}
				}
			}(c)
		}
		wg.Wait()
		close(done) // claimers stop at their first empty claim from now on
		cw.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, claimed, producers*perProducer)
		for id, n := range claimed {
			require.Equal(t, 1, n, "event %s claimed %d times", id, n)
		}
	})
}

// retryLockConflict calls op until it succeeds, fails with an error other
// than [ferrytype.ErrLockConflict], or has lost the lock five times, 50 ms
// apart, as a relay that claims or marks again after a backoff would.
func retryLockConflict(op func() error) error {
	const tries = 5
	for try := 1; ; try++ {
		err := op()
		if err == nil || !errors.Is(err, ferrytype.ErrLockConflict) {
			return err
		}
		if try == tries {
			return fmt.Errorf("lost the lock %d times: %w", tries, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
