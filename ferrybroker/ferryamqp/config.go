package ferryamqp

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// DefaultExchange is the exchange events go to when neither the event nor
// the Config names one. Every RabbitMQ server has it.
const DefaultExchange = "amq.topic"

// Config configures a Publisher. A nil config uses the defaults; zero
// fields take the default named in their comment.
type Config struct {
	// Exchange receives every event whose own Exchange field is empty; the
	// routing key is the event's destination, or its type. Default
	// "amq.topic". The publisher checks at start that it exists (a
	// passive declare) or, with Declare, declares it (durable, of kind
	// ExchangeKind); amq.* exchanges are only ever checked.
	Exchange string
	// ExchangeKind is the kind Exchange is declared with. Default "topic".
	ExchangeKind string
	// Topology lists further exchanges, queues and bindings the events
	// rely on. Without Declare they are checked at start (exchanges and
	// queues by passive declares; bindings cannot be checked over AMQP
	// 0-9-1, and a missing one shows up as returned messages); with
	// Declare they are declared.
	Topology Topology
	// Declare declares the topology at start (and after every reconnect)
	// instead of checking it. Default false.
	Declare bool
	// Window is the most publishes one channel keeps awaiting their
	// confirms. Default 1000; 1 awaits each confirm before the next
	// publish (about 8x slower).
	Window int
	// Channels is the number of channels Publish spreads concurrent calls
	// over, so that concurrent relay lanes do not queue behind one
	// another. Default 4.
	Channels int
	// ReconnectWait is how long a Publish made while the connection is
	// down waits for it to come back before reporting every message
	// unknown. Default 1s; negative: do not wait.
	ReconnectWait time.Duration
	// Encoding writes each event as a message in place of ferry's form
	// (ferrybroker.Encoding; ferrycloudevents.Encoding writes CloudEvents
	// in the AMQP binding's application properties, as headers). Default
	// nil: ferry's form. message_id, type, timestamp and app_id stay set
	// either way.
	Encoding ferrybroker.Encoding
	// Connection configures the connection Dial opens; New ignores it
	// (but for its TLS, which ManagementURL uses).
	Connection ConnectionConfig
	// ManagementURL is the URL of RabbitMQ's management API
	// (http://user:password@host:15672; https:// for TLS, verified with
	// Connection.TLS's roots, default the system's). It is used by
	// Durability only, which reads there the type of each queue of
	// Topology.Queues (AMQP 0-9-1 cannot tell a queue's type), in the
	// publisher's virtual host (the broker URL's; for New, the
	// connection's); a path after the port is kept as the API's prefix.
	// On a cluster it may list the APIs of several nodes, comma-separated
	// (http://u:p@host1:15672,http://u:p@host2:15672): Durability asks the
	// first that answers, so that it reads while a node is down. The user
	// needs the management or monitoring tag and access to that virtual
	// host. Default empty: queue types are reported unknown. Errors and
	// logs never contain its password.
	ManagementURL string
	// Logger receives the publisher's logs. Default: slog.Default().
	Logger *slog.Logger

	// testAfterPublish, when set, is called after each basic.publish
	// with the number of publishes so far (tests only).
	testAfterPublish func(n int64)
}

// ConnectionConfig configures a connection that ferryamqp dials itself
// (Dial, DialConsumer).
type ConnectionConfig struct {
	// TLS configures TLS for amqps:// URLs. Default: the system roots and
	// the URL's host name.
	TLS *tls.Config
	// Name is the connection name shown by rabbitmqctl and the management
	// UI. Default "ferry".
	Name string
	// Heartbeat is the AMQP heartbeat interval: a connection silent for
	// two intervals is considered dead. Default 10s.
	Heartbeat time.Duration
	// DialTimeout bounds the TCP connect and the AMQP handshake. Default
	// 10s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the delay between reconnect
	// attempts after the connection was lost; the delay doubles from
	// ReconnectMin, with jitter. Defaults 100ms and 10s.
	ReconnectMin, ReconnectMax time.Duration
}

func (c ConnectionConfig) withDefaults(name string) (ConnectionConfig, error) {
	if c.Name == "" {
		c.Name = name
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 10 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 10 * time.Second
	}
	switch {
	case c.Heartbeat < time.Second:
		return c, fmt.Errorf("%w: ConnectionConfig.Heartbeat %s is below 1s", ferrytype.ErrInvalidConfig, c.Heartbeat)
	case c.DialTimeout < 0 || c.ReconnectMin < 0 || c.ReconnectMax < 0:
		return c, fmt.Errorf("%w: ConnectionConfig durations must not be negative", ferrytype.ErrInvalidConfig)
	case c.ReconnectMax < c.ReconnectMin:
		return c, fmt.Errorf("%w: ConnectionConfig.ReconnectMax %s is below ReconnectMin %s",
			ferrytype.ErrInvalidConfig, c.ReconnectMax, c.ReconnectMin)
	}
	return c, nil
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Exchange == "" {
		out.Exchange = DefaultExchange
	}
	if out.ExchangeKind == "" {
		out.ExchangeKind = amqp.ExchangeTopic
	}
	if out.Window == 0 {
		out.Window = 1000
	}
	if out.Channels == 0 {
		out.Channels = 4
	}
	if out.ReconnectWait == 0 {
		out.ReconnectWait = time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	var err error
	if out.Connection, err = out.Connection.withDefaults("ferry"); err != nil {
		return out, err
	}
	switch {
	case out.Window < 1 || out.Window > 65535:
		return out, fmt.Errorf("%w: Config.Window %d must be within 1..65535", ferrytype.ErrInvalidConfig, out.Window)
	case out.Channels < 1 || out.Channels > 64:
		return out, fmt.Errorf("%w: Config.Channels %d must be within 1..64", ferrytype.ErrInvalidConfig, out.Channels)
	case len(out.Exchange) > 255:
		return out, fmt.Errorf("%w: Config.Exchange is longer than 255 bytes", ferrytype.ErrInvalidConfig)
	}
	if err := out.Topology.validate(out.Exchange); err != nil {
		return out, err
	}
	if out.ManagementURL != "" {
		if _, err := parseManagementURLs(out.ManagementURL); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Topology is the broker topology events rely on: declared, or checked,
// when a publisher or consumer starts and after each reconnect.
type Topology struct {
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding
}

// Exchange is an exchange to declare or check. Exchanges are durable.
type Exchange struct {
	// Name of the exchange. Required.
	Name string
	// Kind: "topic", "direct", "fanout" or "headers". Default "topic".
	Kind string
	// AlternateExchange receives what this exchange cannot route. A
	// message routed there is not returned to the publisher, so the relay
	// counts it as confirmed: the alternate exchange must lead to a queue.
	// Default none.
	AlternateExchange string
	// Args are further exchange arguments.
	Args amqp.Table
}

// QueueType is the type of a declared queue.
type QueueType string

// Queue types. Quorum queues are the default: they replicate with Raft,
// confirm a message only once a majority of replicas stored it, count
// deliveries (x-delivery-count) and support a delivery limit and
// at-least-once dead-lettering. Classic queues do none of these.
const (
	QueueQuorum  QueueType = "quorum"
	QueueClassic QueueType = "classic"
)

// Queue is a durable queue to declare or check.
type Queue struct {
	// Name of the queue. Required.
	Name string
	// Type of the queue. Default QueueQuorum. Checking an existing queue
	// (without Declare) cannot see its type or arguments.
	Type QueueType
	// ParkingQueue receives the messages of this queue that a Consumer
	// parks (poison messages, with the reason in their headers) and those
	// the broker dead-letters (past DeliveryLimit, or rejected without
	// requeue). It is declared with the queue, of the same type, and set
	// as the queue's dead-letter target through the default exchange; on
	// quorum queues dead-lettering is at-least-once
	// (x-dead-letter-strategy=at-least-once, which needs
	// x-overflow=reject-publish: a queue at its length limit then nacks
	// publishes instead of dropping its oldest messages). Default
	// Name+".parking".
	ParkingQueue string
	// NoParking declares the queue without a parking queue and without
	// dead-lettering. Default false.
	NoParking bool
	// DeliveryLimit is the quorum queue's x-delivery-limit: a message
	// returned to the queue more than this many times is dead-lettered to
	// the parking queue by the broker. It is the backstop for messages
	// that crash their consumer before it can park them; a Consumer parks
	// failing messages itself, with their reason, after
	// ConsumerConfig.Redelivery.MaxDeliveries. Default 20; negative: no limit.
	// Classic queues have no delivery limit.
	DeliveryLimit int
	// Args are further queue arguments; they override ferry's.
	Args amqp.Table
}

// Binding binds a queue to an exchange with a routing key (a topic
// pattern for topic exchanges).
type Binding struct {
	Queue string
	// Exchange defaults to the publisher's Config.Exchange.
	Exchange   string
	RoutingKey string
}

// ParkingSuffix names a queue's parking queue by default: the queue's name
// with it appended (points: points.parking). See Queue.ParkingQueue and
// ReplayOptions.ParkingQueue.
const ParkingSuffix = ".parking"

func (q Queue) withDefaults() Queue {
	if q.Type == "" {
		q.Type = QueueQuorum
	}
	if q.ParkingQueue == "" && !q.NoParking {
		q.ParkingQueue = q.Name + ParkingSuffix
	}
	if q.NoParking {
		q.ParkingQueue = ""
	}
	if q.DeliveryLimit == 0 && q.Type == QueueQuorum {
		q.DeliveryLimit = 20
	}
	return q
}

func (q Queue) validate() error {
	switch {
	case q.Name == "":
		return fmt.Errorf("%w: Queue.Name is empty", ferrytype.ErrInvalidConfig)
	case len(q.Name) > 255 || len(q.ParkingQueue) > 255:
		return fmt.Errorf("%w: queue name %.40q... is longer than 255 bytes", ferrytype.ErrInvalidConfig, q.Name)
	case strings.HasPrefix(q.Name, "amq."):
		return fmt.Errorf("%w: queue name %q: the amq. prefix is reserved", ferrytype.ErrInvalidConfig, q.Name)
	case q.Type != QueueQuorum && q.Type != QueueClassic:
		return fmt.Errorf("%w: queue %s: Type %q must be %q or %q", ferrytype.ErrInvalidConfig, q.Name, q.Type, QueueQuorum, QueueClassic)
	case q.Type == QueueClassic && q.DeliveryLimit > 0:
		return fmt.Errorf("%w: queue %s: DeliveryLimit needs a quorum queue", ferrytype.ErrInvalidConfig, q.Name)
	case q.ParkingQueue == q.Name:
		return fmt.Errorf("%w: queue %s: ParkingQueue must differ from the queue", ferrytype.ErrInvalidConfig, q.Name)
	}
	return nil
}

// Arguments returns the arguments ferryamqp declares the queue with,
// defaults applied: use them to declare the queue yourself (a definitions
// file, another tool) so that ferryamqp's declare or check agrees.
func (q Queue) Arguments() amqp.Table {
	q = q.withDefaults()
	a := amqp.Table{"x-queue-type": string(q.Type)}
	if q.ParkingQueue != "" {
		a["x-dead-letter-exchange"] = ""
		a["x-dead-letter-routing-key"] = q.ParkingQueue
		if q.Type == QueueQuorum {
			a["x-dead-letter-strategy"] = "at-least-once"
			a["x-overflow"] = "reject-publish"
		}
	}
	if q.Type == QueueQuorum && q.DeliveryLimit > 0 {
		a["x-delivery-limit"] = int64(q.DeliveryLimit)
	}
	for k, v := range q.Args {
		a[k] = v
	}
	return a
}

func (t *Topology) validate(defaultExchange string) error {
	for i, e := range t.Exchanges {
		if e.Name == "" {
			return fmt.Errorf("%w: Topology.Exchanges[%d].Name is empty", ferrytype.ErrInvalidConfig, i)
		}
		switch e.Kind {
		case "", amqp.ExchangeTopic, amqp.ExchangeDirect, amqp.ExchangeFanout, amqp.ExchangeHeaders:
		default:
			return fmt.Errorf("%w: exchange %s: Kind %q is not topic, direct, fanout or headers", ferrytype.ErrInvalidConfig, e.Name, e.Kind)
		}
	}
	for i := range t.Queues {
		if err := t.Queues[i].withDefaults().validate(); err != nil {
			return err
		}
	}
	for i, b := range t.Bindings {
		if b.Queue == "" {
			return fmt.Errorf("%w: Topology.Bindings[%d].Queue is empty", ferrytype.ErrInvalidConfig, i)
		}
		if b.Exchange == "" && defaultExchange == "" {
			return fmt.Errorf("%w: Topology.Bindings[%d].Exchange is empty", ferrytype.ErrInvalidConfig, i)
		}
		if len(b.RoutingKey) > 255 {
			return fmt.Errorf("%w: Topology.Bindings[%d].RoutingKey is longer than 255 bytes", ferrytype.ErrInvalidConfig, i)
		}
	}
	return nil
}
