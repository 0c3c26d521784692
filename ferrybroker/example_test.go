package ferrybroker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// What a consumer does with a handler's error, by delivery count: a
// poison error parks at once, a transient one is retried until the last
// allowed delivery.
func ExampleRedeliveryPolicy() {
	p := ferrybroker.RedeliveryPolicy{MaxDeliveries: 3, RetryDelay: 100 * time.Millisecond}.WithDefaults()
	fmt.Println("max retry delay:", p.MaxRetryDelay)
	transient := errors.New("database unavailable")
	poison := ferrytype.Poison(errors.New("unknown currency XXX"))
	for n := 1; n <= 3; n++ {
		fmt.Printf("delivery %d, transient: park=%v\n", n, p.ParkReason(transient, n))
	}
	fmt.Printf("delivery 1, poison: park=%v\n", p.ParkReason(poison, 1))
	// Output:
	// max retry delay: 30s
	// delivery 1, transient: park=<nil>
	// delivery 2, transient: park=<nil>
	// delivery 3, transient: park=failed on delivery 3 of at most 3: database unavailable
	// delivery 1, poison: park=unknown currency XXX
}

// A validation for ConsumerConfig.Validate that accepts only events
// published by a ferry relay; consumers park anything else as malformed.
func ExampleRequireHeaders() {
	validate := ferrybroker.RequireHeaders(ferrybroker.HeaderEventID, ferrybroker.HeaderEventType)
	err := validate(&ferrybroker.Delivery{Headers: map[string]string{ferrybroker.HeaderEventID: "evt-1"}})
	fmt.Println(err, errors.Is(err, ferrybroker.ErrMalformed))
	// Output:
	// malformed message: missing header Ferry-Event-Type true
}

// SettledFunc turns a function into a hook, for a consumer's
// ConsumerConfig.Hooks.
func ExampleSettledFunc() {
	var hooks []ferrybroker.Hook
	hooks = append(hooks, ferrybroker.SettledFunc(func(consumer string, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
		if s.Action == ferrybroker.ActionParked {
			fmt.Printf("%s parked %s: %v\n", consumer, d.MessageID, s.Err)
		}
	}))
	// The consumer calls it; here, by hand.
	obs := ferrybroker.NewConsumerObserver("points", hooks)
	d := &ferrybroker.Delivery{MessageID: "evt-7"}
	obs.Delivered(d)
	obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionParked, Err: errors.New("unknown currency XXX")})
	fmt.Printf("%+v\n", obs.Stats())
	// Output:
	// points parked evt-7: unknown currency XXX
	// {Delivered:1 Handled:0 Acked:0 Retried:0 Parked:1 ParkFailed:0 Left:0 InFlight:0 Rewinds:0 Rewound:0}
}

// WithoutContext makes a Handler of a function that takes no context;
// a Handler is itself a function type, so a func(ctx, d) error needs no
// adapter.
func ExampleWithoutContext() {
	var h ferrybroker.Handler = ferrybroker.WithoutContext(func(d *ferrybroker.Delivery) error {
		fmt.Println("handled", d.MessageID)
		return nil
	})
	// The consumer calls it; here, by hand.
	_ = h(context.Background(), &ferrybroker.Delivery{MessageID: "evt-7"})
	// Output:
	// handled evt-7
}
