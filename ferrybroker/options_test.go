package ferrybroker_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestConsumerOptionsDefaults(t *testing.T) {
	o := ferrybroker.ConsumerOptions{}.WithDefaults("points")
	want := ferrybroker.ConsumerOptions{
		Concurrency: ferrybroker.DefaultConcurrency,
		Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: ferrybroker.DefaultMaxDeliveries,
			RetryDelay: ferrybroker.DefaultRetryDelay, MaxRetryDelay: ferrybroker.DefaultMaxRetryDelay},
		ParkTimeout: 30 * time.Second, ShutdownTimeout: 30 * time.Second, Name: "points", Logger: slog.Default(),
	}
	if o.Concurrency != want.Concurrency || o.Redelivery != want.Redelivery || o.ParkTimeout != want.ParkTimeout ||
		o.ShutdownTimeout != want.ShutdownTimeout || o.Name != want.Name || o.Logger != want.Logger || o.HandlerTimeout != 0 {
		t.Fatalf("defaults: got %+v, want %+v", o, want)
	}
	if err := o.Check(); err != nil {
		t.Fatalf("defaults do not pass: %v", err)
	}
	set := ferrybroker.ConsumerOptions{Concurrency: 9, Name: "mine", ParkTimeout: time.Second}.WithDefaults("points")
	if set.Concurrency != 9 || set.Name != "mine" || set.ParkTimeout != time.Second {
		t.Fatalf("a field set is kept: %+v", set)
	}
}

// Each field out of range is named in the error.
func TestConsumerOptionsCheckNamesTheField(t *testing.T) {
	for field, o := range map[string]ferrybroker.ConsumerOptions{
		"ConsumerConfig.Concurrency -1":       {Concurrency: -1},
		"ConsumerConfig.Concurrency 4097":     {Concurrency: ferrybroker.MaxConcurrency + 1},
		"ConsumerConfig.Redelivery: ":         {Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: -1}},
		"RedeliveryPolicy.RetryDelay":         {Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: time.Second, MaxRetryDelay: time.Millisecond}},
		"ConsumerConfig.HandlerTimeout -1s":   {HandlerTimeout: -time.Second},
		"ConsumerConfig.ParkTimeout -1s":      {ParkTimeout: -time.Second},
		"ConsumerConfig.ShutdownTimeout -1ms": {ShutdownTimeout: -time.Millisecond},
	} {
		err := o.WithDefaults("q").Check()
		if !errors.Is(err, ferrytype.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

// A hook that implements none of the consumer's hooks would observe
// nothing: the check refuses it, naming it.
func TestConsumerOptionsRefuseAHookThatObservesNothing(t *testing.T) {
	type notAHook struct{}
	o := ferrybroker.ConsumerOptions{Hooks: []ferrybroker.Hook{ferrybroker.SettledFunc(func(string, *ferrybroker.Delivery,
		ferrybroker.Settlement) {
	}), notAHook{}}}.WithDefaults("q")
	err := o.Check()
	if !errors.Is(err, ferrytype.ErrInvalidConfig) || !strings.Contains(err.Error(), "ConsumerConfig.Hooks[1] (ferrybroker_test.notAHook)") {
		t.Fatalf("Check() = %v, want ErrInvalidConfig naming ConsumerConfig.Hooks[1]", err)
	}
}
