package ferrybroker

import (
	"context"
	"fmt"
)

// Durability is what a broker's confirm of one destination is worth, read
// from the broker's own settings: a relay marks an event SENT on the
// confirm, so a confirm the broker gives before the message is safe is the
// weak link of the whole chain.
type Durability struct {
	// Destination is what the row is about, in the broker's terms: "queue
	// points", "stream ORDERS", "topic orders".
	Destination string `json:"destination"`
	// Level is the guarantee the settings give a confirmed message.
	Level DurabilityLevel `json:"level"`
	// Settings says what was read: "quorum queue, 3 members, 3 online",
	// "stream R1, file storage", "replication factor 3,
	// min.insync.replicas 2, acks all".
	Settings string `json:"settings"`
	// Fix says what to change for a replicated guarantee; empty when Level
	// is DurabilityReplicated.
	Fix string `json:"fix,omitempty"`
}

// DurabilityLevel is the guarantee a broker's settings give a confirmed
// message, weakest first: DurabilityUnknown, DurabilityVolatile,
// DurabilitySingle, DurabilityReplicated.
type DurabilityLevel string

// The levels of Durability.
const (
	// DurabilityUnknown: the broker does not say (a RabbitMQ queue's type
	// without its management API, a destination no check names).
	DurabilityUnknown DurabilityLevel = "unknown"
	// DurabilityVolatile: the confirm may come while the message is in
	// memory only (a JetStream stream of memory storage, an exchange with
	// no durable queue bound). A broker restart loses it.
	DurabilityVolatile DurabilityLevel = "volatile"
	// DurabilitySingle: the confirm comes once one node holds the message
	// (a classic queue, a quorum queue of one member, a stream of one
	// replica, a topic whose min.insync.replicas is 1). Losing that node's
	// disk loses it.
	DurabilitySingle DurabilityLevel = "single"
	// DurabilityReplicated: the confirm comes once a majority of at least
	// three nodes, or min.insync.replicas of at least two, hold the
	// message (a quorum queue of three members or more, a stream of three
	// replicas, replication factor 3 with min.insync.replicas 2 and acks
	// from all in-sync replicas).
	DurabilityReplicated DurabilityLevel = "replicated"
)

var levelRank = map[DurabilityLevel]int{DurabilityUnknown: 0, DurabilityVolatile: 1, DurabilitySingle: 2, DurabilityReplicated: 3}

// AtLeast reports whether l is as strong as want. An unknown level is
// below every other.
func (l DurabilityLevel) AtLeast(want DurabilityLevel) bool {
	return levelRank[l] >= levelRank[want]
}

// ParseDurabilityLevel reads a level's name.
func ParseDurabilityLevel(s string) (DurabilityLevel, error) {
	l := DurabilityLevel(s)
	if _, ok := levelRank[l]; !ok {
		return "", fmt.Errorf("durability %q is none of unknown, volatile, single, replicated", s)
	}
	return l, nil
}

// DurabilityReader is a publisher that reads from its broker what its
// confirms are worth, for the destinations it was set up with (the
// queues, the stream, the topics its config names). ferryamqp, ferrynats
// and ferrykafka publishers are DurabilityReaders; ferry relay reports
// their rows at start and ferry doctor prints them.
type DurabilityReader interface {
	// Durability returns a row per destination. An error means the
	// broker could not be asked at all; a destination it does not
	// describe is a row of DurabilityUnknown.
	Durability(ctx context.Context) ([]Durability, error)
}
