package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
)

// kafkaDest is a bench's destination on Kafka: a topic of its own with the
// brokers' default partitions and replication factor. Kafka cannot empty a
// topic cheaply, so purge remembers the end offsets of its partitions as
// the baseline: count counts the records past it and consume reads from it.
type kafkaDest struct {
	url     string
	cc      ferrykafka.ClientConfig
	cl      *kgo.Client // metadata, topic administration and offsets
	adm     *kadm.Client
	topic   string
	created bool
	about   string // version and partitions, for the report

	mu       sync.Mutex
	baseline map[int32]int64 // partition → end offset at the last purge
}

func openKafka(ctx context.Context, rawURL, name string) (*kafkaDest, error) {
	cc, err := ferrykafka.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(cc.Opts(), kgo.ClientID("ferry-bench"))...)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("kafka client for %s: %w", cc, err), rawURL)
	}
	d := &kafkaDest{url: rawURL, cc: cc, cl: cl, adm: kadm.NewClient(cl), topic: "ferrybench." + name}
	fail := func(err error) (*kafkaDest, error) {
		d.close()
		return nil, ferrytype.RedactError(err, rawURL)
	}
	if err := cl.Ping(ctx); err != nil {
		return fail(fmt.Errorf("connect to %s: %w", cc, err))
	}
	res, err := d.adm.CreateTopic(ctx, -1, -1, nil, d.topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fail(fmt.Errorf("create topic %s: %w", d.topic, err))
	}
	d.created = true
	version := "(version unknown)"
	if vs, err := d.adm.ApiVersions(ctx); err == nil {
		for _, v := range vs.Sorted() {
			if v.Err == nil {
				version = v.VersionGuess()
				break
			}
		}
	}
	d.about = fmt.Sprintf("kafka %s, topic of %d partition(s), replication factor %d", version, res.NumPartitions, res.ReplicationFactor)
	return d, nil
}

// producer returns a bare franz-go producer for the bench's records:
// idempotent (franz-go's default), acks from every in-sync replica, no
// linger, at most window records awaiting their acks.
func (d *kafkaDest) producer(id string, window int) (*kgo.Client, error) {
	opts := append(d.cc.Opts(), kgo.ClientID(id), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.DefaultProduceTopic(d.topic))
	if window > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(window))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, ferrytype.RedactError(err, d.url)
	}
	return cl, nil
}

func (d *kafkaDest) publisher(ctx context.Context) (ferrybroker.Publisher, error) {
	p, err := ferrykafka.Dial(ctx, d.url, &ferrykafka.Config{Topics: []string{d.topic}})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ends returns the end offset of each of the topic's partitions.
func (d *kafkaDest) ends(ctx context.Context) (map[int32]int64, error) {
	listed, err := d.adm.ListEndOffsets(ctx, d.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of topic %s: %w", d.topic, err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// purge remembers the topic's end offsets as the baseline.
func (d *kafkaDest) purge(ctx context.Context) error {
	ends, err := d.ends(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.baseline = ends
	return nil
}

func (d *kafkaDest) count(ctx context.Context) (int, error) {
	ends, err := d.ends(ctx)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for p, end := range ends {
		n += end - d.baseline[p]
	}
	return int(n), nil
}

func (d *kafkaDest) close() {
	if d.created {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = d.adm.DeleteTopics(ctx, d.topic)
	}
	d.cl.Close()
}

// record is a bench event as the relay's publisher writes it: key the
// aggregate id, value the payload, ferry's metadata headers.
func (d *kafkaDest) record(id, aggregate string) *kgo.Record {
	m := &ferrytype.Message{ID: id, Type: "OrderPaid", AggregateType: "order", AggregateID: aggregate, Sequence: 1,
		CreatedAt: time.Now()}
	r := &kgo.Record{Topic: d.topic, Value: Payload}
	if aggregate != "" {
		r.Key = []byte(aggregate)
	}
	for _, kv := range ferrybroker.MetadataHeaders(m) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	return r
}

// raw produces n records like the relay's (ten per aggregate key, the
// payload and ferry's headers) with a bare franz-go producer, pipelined
// with at most window records awaiting their acks.
func (d *kafkaDest) raw(ctx context.Context, n, window int) (time.Duration, error) {
	cl, err := d.producer("ferry-bench-raw", window)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return 0, ferrytype.RedactError(err, d.url)
	}
	aggregates := max(n/10, 1)
	records := make([]*kgo.Record, n)
	run := time.Now().UnixNano()
	for i := range records {
		records[i] = d.record(fmt.Sprintf("raw-%d-%d", run, i), strconv.Itoa(i%aggregates))
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	for _, r := range records {
		wg.Add(1)
		// Produce waits while window records await their acks.
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				once.Do(func() { first = err })
			}
			wg.Done()
		})
	}
	wg.Wait()
	took := time.Since(start)
	if first != nil {
		return 0, fmt.Errorf("raw produce: %w", first)
	}
	return took, nil
}

// consume reads the topic's partitions from the baseline (from their ends
// when there is none) with a plain franz-go consumer, in no group.
func (d *kafkaDest) consume(ctx context.Context, fn func(id string, at time.Time)) (func(), error) {
	d.mu.Lock()
	from := d.baseline
	d.mu.Unlock()
	if from == nil {
		var err error
		if from, err = d.ends(ctx); err != nil {
			return nil, err
		}
	}
	offsets := map[int32]kgo.Offset{}
	for p, o := range from {
		offsets[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(append(d.cc.Opts(), kgo.ClientID("ferry-bench-consumer"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{d.topic: offsets}), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, ferrytype.RedactError(err, d.url)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			at := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == ferrybroker.HeaderEventID {
						fn(string(h.Value), at)
						return
					}
				}
			})
		}
	}()
	return func() { cancel(); <-done; cl.Close() }, nil
}

// plain opens a bare franz-go producer of its own: publish produces a
// batch and waits for every ack.
func (d *kafkaDest) plain(context.Context) (func(context.Context, []plainRow) error, func(), error) {
	cl, err := d.producer("ferry-bench-plain", 0)
	if err != nil {
		return nil, nil, err
	}
	publish := func(ctx context.Context, rows []plainRow) error {
		records := make([]*kgo.Record, len(rows))
		for i, r := range rows {
			records[i] = &kgo.Record{Topic: r.dest, Value: []byte(r.payload),
				Headers: []kgo.RecordHeader{{Key: ferrybroker.HeaderEventID, Value: []byte(r.id)}}}
		}
		return cl.ProduceSync(ctx, records...).FirstErr()
	}
	return publish, cl.Close, nil
}

func (d *kafkaDest) relayArgs() []string {
	return []string{"--broker-url", d.url, "--topics", d.topic, "--declare"}
}

func (d *kafkaDest) version() string { return d.about }
