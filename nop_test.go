package ferry_test

import (
	"context"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// nopStore and nopPublisher satisfy the interfaces for configuration tests
// that never run the relay.
type nopStore struct{ ferrystore.Store }

func (nopStore) Table() string { return "t" }

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, []ferrytype.Message) []ferrytype.PublishResult {
	return nil
}
func (nopPublisher) Close() error { return nil }
