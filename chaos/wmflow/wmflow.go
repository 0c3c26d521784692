// Package wmflow holds what the side-by-side comparison's processes
// (cmd/wmflow) and its driver (chaos.RunWatermill) share: the order
// payload and watermill-sql's settings.
package wmflow

import (
	"encoding/json"
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// Order is the event's payload: an order was paid.
type Order struct {
	Order  int64 `json:"order"`
	Points int64 `json:"points"`
}

// DecodeOrder returns the order id of a payload.
func DecodeOrder(payload []byte) (int64, error) {
	var o Order
	if err := json.Unmarshal(payload, &o); err != nil || o.Order == 0 {
		return 0, fmt.Errorf("not an order: %q", payload)
	}
	return o.Order, nil
}

// SQLSchema is watermill-sql's MySQL schema, as its documentation sets it.
func SQLSchema() wsql.SchemaAdapter { return wsql.DefaultMySQLSchema{} }

// SQLSubscriberConfig is the forwarder's watermill-sql subscriber: one
// consumer group, a short poll so that it is not the bottleneck.
func SQLSubscriberConfig() wsql.SubscriberConfig {
	return wsql.SubscriberConfig{ConsumerGroup: "forwarder", SchemaAdapter: SQLSchema(),
		OffsetsAdapter: wsql.DefaultMySQLOffsetsAdapter{}, InitializeSchema: true, PollInterval: 50 * time.Millisecond}
}
