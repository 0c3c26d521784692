package shop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
// other member sooner. 6s is the shortest session Kafka's brokers (and
// kfake) accept by default (group.min.session.timeout.ms). The revoke
// timeout stays below the rebalance timeout.
const (
	kafkaSessionTimeout   = 6 * time.Second
	kafkaRebalanceTimeout = 6 * time.Second
	kafkaHeartbeat        = 500 * time.Millisecond
	kafkaRevokeTimeout    = 3 * time.Second
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
	lag, err := KafkaLag(ctx, url)
	return err == nil && len(lag) == 0, err
}

// KafkaLag returns, for each consumer group that has not committed every
// record of the paid orders' topic, the partitions behind, as
// "partition P: committed C of E" (C is -1 where the group committed
// nothing). Empty: both groups are done.
func KafkaLag(ctx context.Context, url string) (map[string][]string, error) {
	adm, cl, err := kafkaAdmin(url)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := adm.ListEndOffsets(ctx, RoutePaid)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	lag := map[string][]string{}
	for _, g := range consumerGroups {
		committed, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			return nil, err
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			at := int64(-1)
			c, ok := committed.Lookup(o.Topic, o.Partition)
			if ok && c.Err == nil {
				at = c.At
			}
			if at < o.Offset {
				lag[g] = append(lag[g], fmt.Sprintf("partition %d: committed %d of %d", o.Partition, at, o.Offset))
			}
		})
	}
	return lag, nil
}

// ParkedRecord is a record a consumer group parked.
type ParkedRecord struct {
	ID   string // the Ferry-Event-Id header
	Body []byte
}

// KafkaParkOffsets are the end offsets of each group's park topic, by
// group and partition: KafkaParked reads the records parked since.
type KafkaParkOffsets map[string]map[int32]int64

// KafkaParkEnds returns the park topics' end offsets now.
func KafkaParkEnds(ctx context.Context, url string) (KafkaParkOffsets, error) {
	adm, cl, err := kafkaAdmin(url)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := KafkaParkOffsets{}
	for _, g := range consumerGroups {
		ends, err := adm.ListEndOffsets(ctx, ParkTopic(g))
		if err != nil {
			return nil, err
		}
		if err := ends.Error(); err != nil {
			return nil, err
		}
		out[g] = map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) { out[g][o.Partition] = o.Offset })
	}
	return out, nil
}

// KafkaParked reads the records of each group's park topic from the
// offsets in since (nil: from the start). A record parked twice (a crash
// between the copy and the commit) is there twice, with one event id.
func KafkaParked(ctx context.Context, url string, since KafkaParkOffsets) (map[string][]ParkedRecord, error) {
	ends, err := KafkaParkEnds(ctx, url)
	if err != nil {
		return nil, err
	}
	cc, err := ferrykafka.ParseURL(url)
	if err != nil {
		return nil, err
	}
	out := map[string][]ParkedRecord{}
	for _, g := range consumerGroups {
		topic := ParkTopic(g)
		var want int64
		from := map[int32]kgo.Offset{}
		for p, end := range ends[g] {
			start := since[g][p]
			if end > start {
				want += end - start
				from[p] = kgo.NewOffset().At(start)
			}
		}
		if want == 0 {
			continue
		}
		rd, err := kgo.NewClient(append(cc.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
			kgo.FetchMaxWait(200*time.Millisecond))...)
		if err != nil {
			return nil, err
		}
		for int64(len(out[g])) < want {
			fetches := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				rd.Close()
				return nil, fmt.Errorf("read %s: %d of %d records: %w", topic, len(out[g]), want, ctx.Err())
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
		ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: conc, Logger: EnvLogger(),
			Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 15, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 2 * time.Second}},
		Group: o.Role, Topics: []string{RoutePaid}, ParkTopic: ParkTopic(o.Role),
		RevokeTimeout: kafkaRevokeTimeout,
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

// EnvShopLog names the level (debug, info, warn, error) at which the
// shop's consumers, inboxes and payments middleware log to stderr; unset,
// they log nothing (the demo prints its own progress). The chaos harness's
// Options.Log receives what they write.
const EnvShopLog = "FERRY_SHOP_LOG"

// EnvLogger returns the logger EnvShopLog asks for, or one that discards.
func EnvLogger() *slog.Logger {
	var level slog.Level
	if v := os.Getenv(EnvShopLog); v == "" || level.UnmarshalText([]byte(v)) != nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
