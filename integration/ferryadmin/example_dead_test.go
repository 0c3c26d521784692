package ferryadmin_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ferrydev/ferry/ferryadmin"
)

// SummarizeDead groups DEAD events by destination and error class, the
// largest group first; a group's filter selects exactly its events.
func ExampleSummarizeDead() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 2, `attempt 20: returned: nats: no stream matches subject "orders.paid.7"`)
	giveUp(ctx, store, 2, "attempt 20: dial tcp 10.0.0.7:4222: i/o timeout")

	sum, err := ferryadmin.SummarizeDead(ctx, store, ferryadmin.DeadFilter{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("DEAD:", sum.Total)
	for _, g := range sum.Groups {
		fmt.Printf("%d  %s  %s\n", g.Count, g.Destination, g.ErrorClass)
	}
	timeouts := sum.Groups[len(sum.Groups)-1]
	res, err := ferryadmin.RetryDead(ctx, store, ferryadmin.BulkOptions{Filter: timeouts.Filter()})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retried:", res.Changed, "of", res.Matched)
	// Output:
	// DEAD: 4
	// 2  OrderPaid  attempt <n>: returned: nats: no stream matches subject "<s>"
	// 1  OrderPaid  attempt <n>: dial tcp <n>:<n>: i/o timeout
	// 1  OrderShipped  attempt <n>: dial tcp <n>:<n>: i/o timeout
	// retried: 1 of 1
}

// RestoreDiscarded takes discarded events back to DEAD, keeping the record
// of the discard and adding who restored them.
func ExampleRestoreDiscarded() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryadmin-example-")
	defer os.RemoveAll(dir)
	store := openExample(ctx, dir)
	defer store.Close()
	giveUp(ctx, store, 2, "payload too large")
	if _, err := ferryadmin.DiscardDead(ctx, store, ferryadmin.BulkOptions{All: true}, "a test order, INC-42", "alice@ops"); err != nil {
		log.Fatal(err)
	}

	discarded, err := ferryadmin.ListDiscarded(ctx, store, ferryadmin.DeadFilter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("discarded:", len(discarded.Events))
	res, err := ferryadmin.RestoreDiscarded(ctx, store, ferryadmin.BulkOptions{
		Filter: ferryadmin.DeadFilter{IDs: []string{discarded.Events[0].ID}}}, "bob@ops")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("restored:", res.Changed)
	dead, err := ferryadmin.CountDead(ctx, store, ferryadmin.DeadFilter{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("DEAD again:", dead)
	// Output:
	// discarded: 2
	// restored: 1
	// DEAD again: 1
}
