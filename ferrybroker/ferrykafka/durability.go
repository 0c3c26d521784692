package ferrykafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

var _ ferrybroker.DurabilityReader = (*Publisher)(nil)

// Durability reads from the brokers what their acknowledgement of a record
// is worth for each of Config.Topics, one row per topic ("topic orders"):
// the smallest replica count among the topic's partitions, the fewest
// in-sync replicas right now, the topic's effective min.insync.replicas
// (its own setting, or the brokers' default) and the acks the client
// produces with.
//
//   - acks all, min.insync.replicas 2 or more and replication factor 2 or
//     more is ferrybroker.DurabilityReplicated: the leader acknowledges a
//     record once every in-sync replica holds it, and refuses it
//     (NOT_ENOUGH_REPLICAS) when fewer than min.insync.replicas are in
//     sync, so an acknowledged record is on at least min.insync.replicas
//     brokers. Replication factor 2
//     with min.insync.replicas 2 loses no acknowledged record either, but
//     one broker down stops the writes: Settings says so.
//   - acks 1 (the leader's), replication factor 1, or min.insync.replicas
//     1 is ferrybroker.DurabilitySingle: the in-sync set may shrink to the
//     leader alone, which then acknowledges by itself.
//   - a topic that does not exist, or that the brokers do not describe
//     (not authorized, no min.insync.replicas reported), is
//     ferrybroker.DurabilityUnknown.
//
// Kafka acknowledges a record once it is in the page cache of the brokers
// that must hold it, and fsyncs later (log.flush.interval.messages is
// unbounded by default): replication is its durability, and every row says
// so. A topic whose flush.messages is 1 fsyncs each record as it is
// appended. A topic that allows unclean leader elections says so: a
// replica out of sync may then become the leader and drop acknowledged
// records. With no Topics, Durability returns one row of
// DurabilityUnknown, "topics (none named)". It changes nothing and creates
// no topic. An error means the brokers could not be asked; it names no
// password.
func (p *Publisher) Durability(ctx context.Context) ([]ferrybroker.Durability, error) {
	p.mu.Lock()
	closed, g := p.closed, p.cur
	p.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("kafka publisher: %w", ferrytype.ErrClosed)
	}
	acks := acksAll
	if a, ok := g.cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && a == kgo.LeaderAck() {
		acks = acksLeader
	}
	var topics []string
	for _, t := range p.cfg.Topics {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return []ferrybroker.Durability{{
			Destination: "topics (none named)",
			Level:       ferrybroker.DurabilityUnknown,
			Settings:    "acks " + acks.String() + "; the events name their topics, none of which was read",
			Fix:         "name the topics (--topics) so ferry can read their replication",
		}}, nil
	}

	facts, err := p.topicFacts(ctx, g.cl, topics)
	if err != nil {
		return nil, err
	}
	rows := make([]ferrybroker.Durability, len(facts))
	for i := range facts {
		facts[i].acks = acks
		rows[i] = facts[i].rate()
		rows[i].Settings = ferrytype.RedactSecrets(rows[i].Settings, p.secrets...)
	}
	return rows, nil
}

// topicFacts reads the partitions of topics from a metadata request of
// their own (fresh, not the client's cache, and never creating a topic
// whatever the client's AllowAutoTopicCreation) and their configs with
// kadm.
func (p *Publisher) topicFacts(ctx context.Context, cl *kgo.Client, topics []string) ([]topicFacts, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	meta, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, p.redact(fmt.Errorf("read the partitions of topics %s: %w", strings.Join(topics, ", "), stated(err)))
	}
	facts := make([]topicFacts, len(topics))
	for i, t := range topics {
		facts[i] = topicFacts{topic: t, metaErr: errors.New("the brokers did not answer for it")}
	}
	for _, mt := range meta.Topics {
		if mt.Topic == nil {
			continue
		}
		i := slices.Index(topics, *mt.Topic)
		if i < 0 {
			continue
		}
		f := &facts[i]
		f.metaErr = kerr.ErrorForCode(mt.ErrorCode)
		f.missing = mt.ErrorCode == kerr.UnknownTopicOrPartition.Code
		for _, mp := range mt.Partitions {
			f.partitions++
			rf := len(mp.Replicas)
			if f.partitions == 1 || rf < f.rf {
				f.rf = rf
			}
			f.maxRF = max(f.maxRF, rf)
			if f.partitions == 1 || len(mp.ISR) < f.isr {
				f.isr, f.isrOf = len(mp.ISR), rf
			}
		}
	}

	var ask []string
	for _, f := range facts {
		if f.metaErr == nil && f.partitions > 0 {
			ask = append(ask, f.topic)
		}
	}
	if len(ask) == 0 {
		return facts, nil
	}
	cfgs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, ask...)
	if ae, ok := errors.AsType[*kadm.AuthError](err); ok {
		// Not allowed to describe some topic's configs: each row
		// says so, with what the metadata told.
		for i := range facts {
			facts[i].cfgErr = ae
		}
		return facts, nil
	}
	if err != nil {
		return nil, p.redact(fmt.Errorf("read the configs of topics %s: %w", strings.Join(ask, ", "), stated(err)))
	}
	for i := range facts {
		f := &facts[i]
		if !slices.Contains(ask, f.topic) {
			continue
		}
		rc, err := cfgs.On(f.topic, nil)
		switch {
		case err != nil:
			f.cfgErr = err
			continue
		case rc.Err != nil:
			f.cfgErr = rc.Err
			if rc.ErrMessage != "" {
				f.cfgErr = fmt.Errorf("%w: %s", rc.Err, rc.ErrMessage)
			}
			continue
		}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case "min.insync.replicas":
				if n, err := strconv.Atoi(strings.TrimSpace(*c.Value)); err == nil {
					f.minISR = n
				}
			case "unclean.leader.election.enable":
				f.unclean = strings.EqualFold(strings.TrimSpace(*c.Value), "true")
			case "flush.messages":
				if n, err := strconv.ParseInt(strings.TrimSpace(*c.Value), 10, 64); err == nil {
					f.flushMessages = n
				}
			}
		}
	}
	return facts, nil
}

// producerAcks is the acks the client produces with: kgo.NoAck() is
// refused by New.
type producerAcks int

const (
	acksAll    producerAcks = iota // kgo.AllISRAcks(), acks=all (-1)
	acksLeader                     // kgo.LeaderAck(), acks=1
)

func (a producerAcks) String() string {
	if a == acksLeader {
		return "1 (the leader's)"
	}
	return "all"
}

// topicFacts is what the brokers said of one topic.
type topicFacts struct {
	topic         string
	acks          producerAcks
	missing       bool  // UNKNOWN_TOPIC_OR_PARTITION
	metaErr       error // the metadata's error for the topic
	partitions    int
	rf, maxRF     int   // the fewest and the most replicas of a partition
	isr, isrOf    int   // the fewest in-sync replicas of a partition, and that partition's replicas
	minISR        int   // the effective min.insync.replicas; 0: not read
	flushMessages int64 // the effective flush.messages; 0: not reported (Kafka's default: unbounded)
	unclean       bool  // unclean.leader.election.enable is true
	cfgErr        error // why the configs were not read
}

// The fixes of a weak row.
const (
	fixCreate = "create the topic with replication factor 3 and min.insync.replicas 2 " +
		"(kafka-topics --create --topic %s --replication-factor 3 --config min.insync.replicas=2), " +
		"acks all (ferry's default)"
	fixRF     = "give the topic replication factor 3 (recreate it, or add replicas with kafka-reassign-partitions)"
	fixMinISR = "set min.insync.replicas 2 (kafka-configs --alter --entity-type topics --entity-name %s " +
		"--add-config min.insync.replicas=2)"
	fixAcks = "produce with acks all (ferry's default: the client sets kgo.RequiredAcks(kgo.LeaderAck()))"
)

// rate classifies f (see Publisher.Durability).
func (f *topicFacts) rate() ferrybroker.Durability {
	d := ferrybroker.Durability{Destination: "topic " + f.topic, Level: ferrybroker.DurabilityUnknown}
	switch {
	case f.missing:
		d.Settings = "the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION); acks " + f.acks.String()
		d.Fix = fmt.Sprintf(fixCreate, f.topic)
		return d
	case f.metaErr != nil:
		d.Settings = fmt.Sprintf("the brokers do not describe the topic: %v; acks %s", f.metaErr, f.acks)
		if errors.Is(f.metaErr, kerr.TopicAuthorizationFailed) {
			d.Fix = "let ferry's user describe the topic (ACL Describe on topic " + f.topic + ")"
		}
		return d
	case f.partitions == 0:
		d.Settings = "the brokers describe no partition of the topic; acks " + f.acks.String()
		return d
	}

	var s []string
	rf := fmt.Sprintf("replication factor %d", f.rf)
	if f.maxRF != f.rf {
		rf += fmt.Sprintf(" (%d on some partitions)", f.maxRF)
	}
	s = append(s, rf)
	if f.minISR > 0 {
		s = append(s, fmt.Sprintf("min.insync.replicas %d", f.minISR))
	} else if f.cfgErr != nil {
		s = append(s, fmt.Sprintf("min.insync.replicas not read (%v)", f.cfgErr))
	} else {
		s = append(s, "min.insync.replicas not reported")
	}
	s = append(s, fmt.Sprintf("in sync %d/%d", f.isr, f.isrOf), "acks "+f.acks.String())
	settings := strings.Join(s, ", ")

	var notes, fix []string
	switch {
	case f.acks == acksLeader || f.rf < 2 || f.minISR == 1:
		d.Level = ferrybroker.DurabilitySingle
	case f.minISR >= 2:
		d.Level = ferrybroker.DurabilityReplicated
	}
	if f.acks == acksAll {
		switch {
		case f.minISR > f.rf:
			notes = append(notes, "min.insync.replicas is above the replication factor: every write is refused (NOT_ENOUGH_REPLICAS)")
		case f.minISR > 0 && f.isr < f.minISR:
			notes = append(notes, "fewer replicas in sync than min.insync.replicas: writes are refused "+
				"(NOT_ENOUGH_REPLICAS) until they catch up")
		case f.minISR == 1:
			notes = append(notes, "with min.insync.replicas 1 the in-sync replicas may shrink to the leader alone, "+
				"which then acknowledges by itself")
		case f.minISR >= 2 && f.minISR == f.rf:
			notes = append(notes, fmt.Sprintf("one replica out of sync stops the writes (NOT_ENOUGH_REPLICAS) "+
				"until it catches up: replication factor %d keeps them going", f.rf+1))
		}
	} else {
		notes = append(notes, "the leader acknowledges before any follower holds the record")
	}
	if f.unclean {
		notes = append(notes, "unclean.leader.election.enable: a replica out of sync may become the leader and "+
			"drop acknowledged records")
	}
	switch {
	case f.flushMessages == 1:
		notes = append(notes, "each replica fsyncs a record as it appends it (flush.messages 1)")
	case f.flushMessages > 1 && f.flushMessages < math.MaxInt64:
		notes = append(notes, fmt.Sprintf("acknowledged when in the replicas' page cache, fsynced every %d records "+
			"(flush.messages): replication is the durability", f.flushMessages))
	case f.acks == acksLeader:
		notes = append(notes, "acknowledged when in the leader's page cache, fsynced later: replication is the durability")
	default:
		notes = append(notes, "acknowledged when in the replicas' page cache, fsynced later: replication is the durability")
	}
	d.Settings = settings + "; " + strings.Join(notes, "; ")

	if d.Level == ferrybroker.DurabilityReplicated {
		return d
	}
	if f.rf < 3 {
		fix = append(fix, fixRF)
	}
	switch {
	case f.minISR == 1:
		fix = append(fix, fmt.Sprintf(fixMinISR, f.topic))
	case f.minISR == 0 && f.cfgErr != nil && errors.Is(f.cfgErr, kerr.TopicAuthorizationFailed):
		fix = append(fix, "let ferry's user describe the topic's configs (ACL DescribeConfigs on topic "+f.topic+
			") to read min.insync.replicas")
	case f.minISR == 0:
		fix = append(fix, fmt.Sprintf("check that min.insync.replicas is 2 or more (kafka-configs --describe "+
			"--all --entity-type topics --entity-name %s)", f.topic))
	}
	if f.acks == acksLeader {
		fix = append(fix, fixAcks)
	}
	d.Fix = strings.Join(fix, "; ")
	return d
}
