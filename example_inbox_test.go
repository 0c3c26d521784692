package ferry_test

import (
	"context"
	"fmt"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
)

// The seed's scenario: award 10 points for order 42's payment, exactly
// once, whatever the broker redelivers. The marker and the award commit in
// one transaction (here the in-memory database's, whose business state is
// a map changed at commit; on a SQL database, an UPDATE through tx checked
// with ferry.ExpectResult).
func ExampleInbox_Process() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	ib, _ := ferrymem.NewInbox(db, nil)
	accounts := map[int]int{7: 0}

	inbox, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points-award", Logger: quiet})
	if err != nil {
		panic(err)
	}
	award := func(user, amount int) func(context.Context, *ferrymem.Tx) error {
		return func(ctx context.Context, tx *ferrymem.Tx) error {
			// The effect check: no account, no effect, no marker.
			if _, ok := accounts[user]; !ok {
				return ferry.ExpectAffected(0, 1)
			}
			return tx.OnCommit(func() { accounts[user] += amount })
		}
	}
	deliver := func(eventID string, user, amount int) {
		op := ferry.Operation{
			Key:     "order:42:paid", // the business operation, not the message id
			EventID: eventID,
			Fields:  map[string]int{"user_id": user, "amount": amount},
		}
		res, err := inbox.Process(ctx, op, award(user, amount))
		fmt.Printf("%s: %s (err: %v)\n", eventID, res.Outcome, err != nil)
	}
	deliver("event-001", 7, 10) // first delivery
	deliver("event-002", 7, 10) // re-wrapped redelivery
	deliver("event-003", 7, 20) // same key, other amount

	fmt.Println("points:", accounts[7])
	// Output:
	// event-001: applied (err: false)
	// event-002: duplicate (err: false)
	// event-003: conflict (err: true)
	// points: 10
}

// The effect check: a business function that changed nothing returns an
// error wrapping ErrNoEffect, so that the inbox rolls back and records no
// marker; the operation is tried again when it is delivered again.
func ExampleExpectAffected() {
	ctx := context.Background()
	ib, _ := ferrymem.NewInbox(ferrymem.NewDB(nil), nil)
	inbox, _ := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points-award", Logger: quiet})
	accounts := map[int]int{} // user 7 has no account yet

	op := ferry.Operation{Key: "order:42:paid", EventID: "event-001", Fields: map[string]int{"user_id": 7, "amount": 10}}
	_, err := inbox.Process(ctx, op, func(_ context.Context, tx *ferrymem.Tx) error {
		affected := int64(0)
		if _, ok := accounts[7]; ok {
			affected = 1
		}
		return ferry.ExpectAffected(affected, 1)
	})
	fmt.Println(err)
	n, _ := ib.MarkerCount(ctx, "points-award")
	fmt.Println("markers:", n)
	// Output:
	// ferry: statement had no effect: 0 rows affected, want 1
	// markers: 0
}
