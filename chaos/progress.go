package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
)

// loadStall is how long the order services may go without committing an
// order before the run fails as stalled. A liveness bound: the longest
// pause a fault causes (a payments server's restart, a key held for its
// lease by a killed request) is a few seconds.
const loadStall = time.Minute

// progress watches the orders committed while the load runs, in the
// orders database (not through the row's proxies).
type progress struct {
	db      *shop.DB
	start   time.Time
	every   time.Duration // between counts
	stall   time.Duration // loadStall
	checked time.Time     // last query
	moved   time.Time     // last query that saw the count grow
	orders  int64
	err     error // last query's error, if it failed
	now     func() time.Time
}

func (s *system) orderProgress(ctx context.Context) (*progress, error) {
	db, err := shop.Open(ctx, s.ordersDirect)
	if err != nil {
		return nil, fmt.Errorf("open the orders database to watch the load: %w", err)
	}
	return newProgress(db, 2*time.Second, loadStall), nil
}

func newProgress(db *shop.DB, every, stall time.Duration) *progress {
	now := time.Now()
	return &progress{db: db, start: now, moved: now, every: every, stall: stall, now: time.Now}
}

// stalled counts the committed orders (at most once per p.every) and
// reports whether none was committed for p.stall. A failed count is
// not progress, and is said in String; only ctx's end is an error.
func (p *progress) stalled(ctx context.Context) (bool, error) {
	if p.now().Sub(p.checked) < p.every {
		return false, nil
	}
	p.checked = p.now()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	p.err = p.db.QueryRowContext(qctx, "SELECT COUNT(*) FROM shop_order").Scan(&n)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if p.err == nil && n > p.orders {
		p.orders, p.moved = n, p.checked
	}
	return p.checked.Sub(p.moved) >= p.stall, nil
}

func (p *progress) String() string {
	s := fmt.Sprintf("%d orders committed in %s, the last count that grew %s ago",
		p.orders, p.now().Sub(p.start).Round(time.Second), p.now().Sub(p.moved).Round(time.Second))
	if p.err != nil {
		s += fmt.Sprintf("; the last count failed: %v", p.err)
	}
	return s
}

func (p *progress) close() { _ = p.db.Close() }
