// Package cluster_test runs replication groups of real moonmq processes on
// loopback (internal/testcluster) and checks the replication guarantees
// (acknowledged records survive, the group serves again after a failover)
// under kills, pauses and restarts with franz-go clients. Every test is skipped
// with -short.
package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// Patience for elections, ISR changes and reads: generous, because CI
// machines are loaded; no test relies on a step taking this long.
const (
	electWithin = 60 * time.Second
	isrWithin   = 60 * time.Second
	readWithin  = 60 * time.Second
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts broker processes")
	}
}

// createTopic creates a topic with rf = the group size and waits until the
// serving leader has it.
func createTopic(t *testing.T, c *testcluster.Cluster, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm := c.Admin()
	ctx := testcluster.Context(t, readWithin)
	for {
		resp, err := adm.CreateTopic(ctx, partitions, int16(len(c.Replicas)), configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ack is one acknowledged record of a load producer.
type ack struct {
	seq    int
	offset int64
	value  string
}

// loadProducer produces one record at a time to one partition, in
// sequence, and remembers what was acknowledged. Failed sends are retried
// as new records: their outcome is unknown, they are not counted.
type loadProducer struct {
	t      *testing.T
	cl     *kgo.Client
	prefix string

	mu     sync.Mutex
	acked  []ack
	failed int
	errs   map[string]int

	stop chan struct{}
	done chan struct{}
}

func startLoad(t *testing.T, cl *kgo.Client, topic string, partition int32, prefix string, sendTimeout time.Duration) *loadProducer {
	p := &loadProducer{t: t, cl: cl, prefix: prefix, errs: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			v := fmt.Sprintf("%s-%06d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}).First()
			cancel()
			p.mu.Lock()
			if err != nil {
				p.failed++
				p.errs[err.Error()]++
			} else {
				p.acked = append(p.acked, ack{seq: i, offset: r.Offset, value: v})
			}
			p.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *loadProducer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		// Stuck in a send that never ends; closing the client ends it.
		p.t.Errorf("producer %s: a send did not end within 2 minutes of the stop", p.prefix)
	}
}

// Stop ends the load and returns what was acknowledged, in send order.
func (p *loadProducer) Stop() []ack {
	p.halt()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("producer %s: %d acknowledged, %d failed %v", p.prefix, len(p.acked), p.failed, p.errs)
	return slices.Clone(p.acked)
}

func (p *loadProducer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// waitMore waits until n more records than now are acknowledged.
func (p *loadProducer) waitMore(n int, within time.Duration) {
	p.t.Helper()
	want := p.count() + n
	if err := testcluster.Poll(within, func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.acked) >= want, fmt.Sprintf("%d acknowledged, %d failed %v", len(p.acked), p.failed, p.errs)
	}); err != nil {
		p.t.Fatalf("producer %s: want %d acknowledged: %v", p.prefix, want, err)
	}
}

// readPartition reads one partition from offset 0 until it has every
// offset below end, through a client seeded with every replica (so from
// the serving leader).
func readPartition(t *testing.T, c *testcluster.Cluster, topic string, partition int32, end int64) []*kgo.Record {
	t.Helper()
	cl := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(0)}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readWithin)
	defer cancel()
	var out []*kgo.Record
	next := int64(0)
	for next < end {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s-%d: read up to offset %d within %v, want every offset below %d", topic, partition, next, readWithin, end)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			next = r.Offset + 1
		})
	}
	return out
}

// produceN produces n records one at a time and fails the test if one is
// not acknowledged.
func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, prefix string, n int) []ack {
	t.Helper()
	var out []ack
	for i := range n {
		v := fmt.Sprintf("%s-%06d", prefix, i)
		r, err := produceSync(t, cl, readWithin, &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}).First()
		if err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
		out = append(out, ack{seq: i, offset: r.Offset, value: v})
	}
	return out
}

// produceSync is ProduceSync bounded by within. An idempotent producer
// does not give up on a batch that may have been sent, whatever its
// context says; a broker that never answers must fail the test, not hang
// it.
func produceSync(t *testing.T, cl *kgo.Client, within time.Duration, recs ...*kgo.Record) kgo.ProduceResults {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	done := make(chan kgo.ProduceResults, 1)
	go func() { done <- cl.ProduceSync(ctx, recs...) }()
	select {
	case res := <-done:
		return res
	case <-time.After(within + 30*time.Second):
		t.Fatalf("a produce of %d records neither succeeded nor failed within %v", len(recs), within+30*time.Second)
		return nil
	}
}

// endOffset is the largest acknowledged offset plus one.
func endOffset(acks ...[]ack) int64 {
	end := int64(0)
	for _, as := range acks {
		for _, a := range as {
			end = max(end, a.offset+1)
		}
	}
	return end
}

// checkAcked fails unless every acknowledged record is in recs at its
// offset, exactly once among recs, and the acknowledgements of one
// producer, in send order, have increasing offsets.
func checkAcked(t *testing.T, recs []*kgo.Record, acks ...[]ack) {
	t.Helper()
	byOffset := map[int64]string{}
	times := map[string]int{}
	last := int64(-1)
	for _, r := range recs {
		if r.Offset <= last {
			t.Fatalf("read offset %d after %d", r.Offset, last)
		}
		last = r.Offset
		byOffset[r.Offset] = string(r.Value)
		times[string(r.Value)]++
	}
	n := 0
	for _, as := range acks {
		prev := int64(-1)
		for _, a := range as {
			if a.offset <= prev {
				t.Fatalf("%s acknowledged at offset %d, after an earlier send acknowledged at %d", a.value, a.offset, prev)
			}
			prev = a.offset
			if got := byOffset[a.offset]; got != a.value || times[a.value] != 1 {
				t.Fatalf("acknowledged %s at offset %d; offset %d holds %q, and %s was read %d times", a.value, a.offset, a.offset, got, a.value, times[a.value])
			}
			n++
		}
	}
	t.Logf("%d acknowledged records read back exactly once, in order (%d records read)", n, len(recs))
}

// values returns the record values with prefix.
func values(recs []*kgo.Record, prefix string) []string {
	var out []string
	for _, r := range recs {
		if strings.HasPrefix(string(r.Value), prefix) {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// position is the serving leader's view (st) of replica id's durable log
// end of topic-partition.
func position(st status.Replication, id int, topic string, partition int32) (int64, bool) {
	fp, ok := st.Followers[strconv.Itoa(id)]
	if !ok {
		return 0, false
	}
	off, ok := fp.Partitions[fmt.Sprintf("%s-%d", topic, partition)]
	return off, ok
}

// listEnd is the partition's log end as the serving leader answers it.
func listEnd(t *testing.T, adm *kadm.Client, topic string, partition int32) int64 {
	t.Helper()
	ctx := testcluster.Context(t, readWithin)
	for {
		lo, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			if o, ok := lo.Lookup(topic, partition); ok && o.Err == nil {
				return o.Offset
			} else if ok {
				err = o.Err
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("list end offset of %s-%d: %v", topic, partition, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
