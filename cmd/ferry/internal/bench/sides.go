package bench

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

// ProducerResult holds the producer side's rates, in committed
// transactions per second.
type ProducerResult struct {
	Writers int `json:"writers"`
	// Business: the business INSERT alone. Hand: plus a hand-written
	// INSERT of the seed's outbox columns. Enqueue: plus EnqueueTx (which
	// also numbers the aggregate's events). NoSeq: plus EnqueueTx with
	// SkipSequence.
	Business, Hand, Enqueue, NoSeq float64
}

// Producer measures the producer side: a business transaction (insert an
// order row) alone, with a hand-written outbox INSERT, with EnqueueTx and
// with EnqueueTx under SkipSequence, each txs transactions by writers
// concurrent writers.
func Producer(ctx context.Context, t *Target, txs, writers int) (ProducerResult, error) {
	res := ProducerResult{Writers: writers}
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	ob, err := ferry.NewOutbox(t.Driver, nil)
	if err != nil {
		return res, err
	}
	obNoSeq, err := ferry.NewOutbox(t.Driver, &ferry.OutboxConfig{SkipSequence: true})
	if err != nil {
		return res, err
	}
	orders, err := t.table(ctx, "orders", "id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL")
	if err != nil {
		return res, err
	}
	insertOrder := t.bind("INSERT INTO " + orders + " (id, status) VALUES (?, 'PAID')")
	hand := t.bind("INSERT INTO " + t.quote(t.Store.Table()) +
		" (event_id, aggregate_id, event_type, payload, status, available_at, created_at)" +
		" VALUES (?, ?, 'OrderPaid', ?, 'NEW', " + t.now() + ", " + t.now() + ")")
	var id atomic.Int64
	run := func(body func(ctx context.Context, tx *sql.Tx, n int64) error) (float64, error) {
		took, err := parallel(txs, writers, func(int) error {
			n := id.Add(1)
			tx, err := t.DB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err = tx.ExecContext(ctx, insertOrder, n); err == nil {
				err = body(ctx, tx, n)
			}
			if err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
		return float64(txs) / took.Seconds(), err
	}
	event := func(n int64) ferry.Event {
		return ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(n), Type: "OrderPaid", Payload: Payload}
	}
	if res.Business, err = run(func(context.Context, *sql.Tx, int64) error { return nil }); err != nil {
		return res, err
	}
	if res.Hand, err = run(func(ctx context.Context, tx *sql.Tx, n int64) error {
		_, err := tx.ExecContext(ctx, hand, fmt.Sprintf("order-%d-paid", n), fmt.Sprint(n), string(Payload))
		return err
	}); err != nil {
		return res, err
	}
	if res.Enqueue, err = run(func(ctx context.Context, tx *sql.Tx, n int64) error {
		_, err := ob.EnqueueTx(ctx, tx, event(n))
		return err
	}); err != nil {
		return res, err
	}
	res.NoSeq, err = run(func(ctx context.Context, tx *sql.Tx, n int64) error {
		_, err := obNoSeq.EnqueueTx(ctx, tx, event(n))
		return err
	})
	return res, err
}

// InboxResult holds the consumer side's rates, in operations per second.
type InboxResult struct {
	Workers int `json:"workers"`
	// Bare: the seed's business UPDATE (award points) in its own
	// transaction. Inbox: the same UPDATE inside Inbox.Process.
	Bare, Inbox float64
}

// Inbox measures the consumer side: the seed's points award as a bare
// transaction and wrapped in the inbox, each ops operations by workers
// concurrent workers over 1,000 accounts.
func Inbox(ctx context.Context, t *Target, ops, workers int) (InboxResult, error) {
	res := InboxResult{Workers: workers}
	drv, err := t.inbox(ctx)
	if err != nil {
		return res, err
	}
	const accounts = 1000
	points, err := t.table(ctx, "points", "user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL")
	if err != nil {
		return res, err
	}
	for u := 0; u < accounts; u += 500 {
		q := "INSERT INTO " + points + " VALUES "
		for i := u; i < u+500; i++ {
			if i > u {
				q += ","
			}
			q += fmt.Sprintf("(%d, 0)", i)
		}
		if _, err := t.DB.ExecContext(ctx, q); err != nil {
			return res, err
		}
	}
	update := t.bind("UPDATE " + points + " SET points = points + ? WHERE user_id = ?")
	in, err := ferry.NewInbox(drv, &ferry.InboxConfig{Consumer: "points-award"})
	if err != nil {
		return res, err
	}
	took, err := parallel(ops, workers, func(i int) error {
		tx, err := t.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := ferry.ExpectResult(tx.ExecContext(ctx, update, 1, i%accounts)); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return res, err
	}
	res.Bare = float64(ops) / took.Seconds()
	run := time.Now().UnixNano()
	took, err = parallel(ops, workers, func(i int) error {
		_, err := in.Process(ctx, ferry.Operation{
			Key: fmt.Sprintf("order:%d:%d:paid", run, i), EventID: fmt.Sprint(i),
			Fields: map[string]int{"user_id": i % accounts, "amount": 1},
		}, func(ctx context.Context, tx *sql.Tx) error {
			return ferry.ExpectResult(tx.ExecContext(ctx, update, 1, i%accounts))
		})
		return err
	})
	res.Inbox = float64(ops) / took.Seconds()
	return res, err
}

// inbox creates the bench's inbox tables (once) and returns their driver.
func (t *Target) inbox(ctx context.Context) (ferrystore.InboxDriver[*sql.Tx], error) {
	m, c, v := t.name+"_marker", t.name+"_conflict", t.name+"_version"
	var (
		drv ferrystore.InboxDriver[*sql.Tx]
		err error
	)
	switch t.Dialect {
	case "mysql":
		drv, err = ferrymysql.NewInbox(t.DB, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	case "postgres":
		drv, err = ferrypg.NewStdlibInbox(t.DB, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	default:
		drv, err = ferrysqlite.NewInbox(t.DB, &ferrysqlite.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	}
	if err != nil {
		return nil, err
	}
	if err := drv.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("create the bench's inbox tables: %w", err)
	}
	t.tables = append([]string{m, c, v}, t.tables...)
	return drv, nil
}

// parallel runs op(1..n) on w goroutines and returns how long they took;
// the first error stops them.
func parallel(n, w int, op func(i int) error) (time.Duration, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
		failed   atomic.Bool
	)
	start := time.Now()
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if err := op(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), firstErr
}
