package shop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
)

// KafkaTopics are the topics the shop's relay publishes to: each event's
// Destination is its topic.
var KafkaTopics = []string{RouteCreated, RoutePaid}

// ParkTopic is the Kafka topic where a consumer group parks records.
func ParkTopic(group string) string { return "shop.parked." + group }

// KafkaPartitions is the number of partitions of each shop topic
// SetupKafka creates: enough for the two points consumers to share the
// paid orders.
const KafkaPartitions = 4

// Kafka consumer group timings: shorter than ferrykafka's 10s defaults,
// so that the partitions of a consumer killed by the chaos suite go to the
// other member within a few seconds. The revoke timeout stays below the
// rebalance timeout.
const (
	kafkaSessionTimeout   = 3 * time.Second
	kafkaRebalanceTimeout = 4 * time.Second
	kafkaHeartbeat        = 300 * time.Millisecond
	kafkaRevokeTimeout    = 2 * time.Second
)

// consumerGroups are the shop's consumer groups, which are also its roles.
var consumerGroups = []string{"points", "sms"}

// SetupKafka creates the shop's topics (KafkaTopics and each group's park
// topic) with KafkaPartitions partitions and a replication factor of 1,
// where they do not exist.
func SetupKafka(ctx context.Context, url string) error {
	adm, cl, err := kafkaAdmin(url)
	if err != nil {
		return err
	}
	defer cl.Close()
	topics := append([]string{}, KafkaTopics...)
	for _, g := range consumerGroups {
		topics = append(topics, ParkTopic(g))
	}
	resp, err := adm.CreateTopics(ctx, KafkaPartitions, 1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create the shop's topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

func kafkaAdmin(url string) (*kadm.Client, *kgo.Client, error) {
	cc, err := ferrykafka.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(cc.Opts()...)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl, nil
}

// KafkaQuiet reports whether both consumer groups committed every record
// of the paid orders' topic: nothing is left to handle.
func KafkaQuiet(ctx context.Context, url string) (bool, error) {
	adm, cl, err := kafkaAdmin(url)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	ends, err := adm.ListEndOffsets(ctx, RoutePaid)
	if err != nil {
		return false, err
	}
	if err := ends.Error(); err != nil {
		return false, err
	}
	for _, g := range consumerGroups {
		committed, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			return false, err
		}
		quiet := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			c, ok := committed.Lookup(o.Topic, o.Partition)
			if !ok || c.Err != nil || c.At < o.Offset {
				quiet = false
			}
		})
		if !quiet {
			return false, nil
		}
	}
	return true, nil
}

// ParkedRecord is a record a consumer group parked.
type ParkedRecord struct {
	ID   string // the Ferry-Event-Id header
	Body []byte
}

// KafkaParked reads every record of each group's park topic. A record
// parked twice (a crash between the copy and the commit) is there twice,
// with one event id.
func KafkaParked(ctx context.Context, url string) (map[string][]ParkedRecord, error) {
	adm, cl, err := kafkaAdmin(url)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string][]ParkedRecord{}
	for _, g := range consumerGroups {
		topic := ParkTopic(g)
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return nil, err
		}
		if err := ends.Error(); err != nil {
			return nil, err
		}
		var total int64
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if total == 0 {
			continue
		}
		cc, _ := ferrykafka.ParseURL(url)
		rd, err := kgo.NewClient(append(cc.Opts(), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))...)
		if err != nil {
			return nil, err
		}
		for int64(len(out[g])) < total {
			fetches := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				rd.Close()
				return nil, fmt.Errorf("read %s: %d of %d records: %w", topic, len(out[g]), total, ctx.Err())
			}
			fetches.EachRecord(func(r *kgo.Record) {
				p := ParkedRecord{Body: r.Value}
				for _, h := range r.Headers {
					if h.Key == ferrybroker.HeaderEventID {
						p.ID = string(h.Value)
						break
					}
				}
				out[g] = append(out[g], p)
			})
		}
		rd.Close()
	}
	return out, nil
}

// consumeKafka starts a Kafka consumer of the paid orders' topic in the
// role's group, parking to the group's park topic.
func consumeKafka(ctx context.Context, o ConsumerOptions, h ferrybroker.Handler, conc int) (*ferrykafka.Consumer, error) {
	c, err := ferrykafka.DialConsumer(ctx, o.BrokerURL, OnlyPaid(h), &ferrykafka.ConsumerConfig{
		Group: o.Role, Topics: []string{RoutePaid}, ParkTopic: ParkTopic(o.Role), Concurrency: conc,
		Retry:         ferrybroker.RetryPolicy{MaxDeliveries: 15, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
		RevokeTimeout: kafkaRevokeTimeout, FaultPoint: o.FaultPoint,
		ClientOpts: []kgo.Opt{kgo.ClientID("shop-" + o.Role), kgo.SessionTimeout(kafkaSessionTimeout),
			kgo.RebalanceTimeout(kafkaRebalanceTimeout), kgo.HeartbeatInterval(kafkaHeartbeat),
			kgo.FetchMaxWait(200 * time.Millisecond)},
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}
