package interop

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
)

// kgoGroupReader runs a kafka-go group Reader that fetches, records and
// synchronously commits every message.
type kgoGroupReader struct {
	name   string
	r      *kafka.Reader
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	got   []kafka.Message
	parts map[int]bool
	errs  []error
}

func startKafkaGoGroupReader(t *testing.T, addr, groupID, topic, name string) *kgoGroupReader {
	t.Helper()
	tl := newTestLog(t, "kafka-go "+name+": ")
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           []string{addr},
		GroupID:           groupID,
		Topic:             topic,
		MinBytes:          1,
		MaxBytes:          64 << 10,
		MaxWait:           200 * time.Millisecond,
		HeartbeatInterval: 300 * time.Millisecond,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  200 * time.Millisecond,
		CommitInterval:    0, // CommitMessages commits synchronously
		StartOffset:       kafka.FirstOffset,
		Logger:            tl,
		ErrorLogger:       tl,
	})
	ctx, cancel := context.WithCancel(context.Background())
	g := &kgoGroupReader{name: name, r: r, cancel: cancel, done: make(chan struct{}), parts: map[int]bool{}}
	go func() {
		defer close(g.done)
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					g.mu.Lock()
					g.errs = append(g.errs, fmt.Errorf("FetchMessage: %w", err))
					g.mu.Unlock()
				}
				return
			}
			g.mu.Lock()
			g.got = append(g.got, m)
			g.parts[m.Partition] = true
			g.mu.Unlock()
			if err := r.CommitMessages(ctx, m); err != nil && ctx.Err() == nil {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Errorf("CommitMessages %d/%d: %w", m.Partition, m.Offset, err))
				g.mu.Unlock()
			}
		}
	}()
	return g
}

func (g *kgoGroupReader) close(t *testing.T) {
	t.Helper()
	g.cancel()
	<-g.done
	if err := g.r.Close(); err != nil {
		t.Errorf("%s: Close: %v", g.name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, err := range g.errs {
		t.Errorf("%s: %v", g.name, err)
	}
}

func (g *kgoGroupReader) keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ks []string
	for _, m := range g.got {
		ks = append(ks, string(m.Key))
	}
	return ks
}

// writeKafkaGoKeys writes one record per key; key "x-i" goes to partition
// i%partitions.
func writeKafkaGoKeys(t *testing.T, ctx context.Context, addr, topic string, keys []string) {
	t.Helper()
	w := &kafka.Writer{
		Addr:  kafka.TCP(addr),
		Topic: topic,
		Balancer: kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
			s := string(m.Key)
			i, err := strconv.Atoi(s[strings.LastIndexByte(s, '-')+1:])
			if err != nil {
				panic(err)
			}
			return partitions[i%len(partitions)]
		}),
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		MaxAttempts:  1,
	}
	var msgs []kafka.Message
	for _, k := range keys {
		msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte("v-" + k)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaGoConsumerGroup: two kafka-go group readers split a 4-partition
// topic and commit; a restarted reader continues after the commits.
func TestKafkaGoConsumerGroup(t *testing.T) {
	in := startBroker(t)
	addr := in.Addr()
	ctx := ctxTimeout(t, 30*time.Second)
	const topic, groupID, partitions = "kafkago-group", "kafkago-group-1", int32(4)
	saramaCreateTopic(t, addr, topic, partitions)
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig(sarama.V2_8_0_0))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	a := startKafkaGoGroupReader(t, addr, groupID, topic, "reader-a")
	b := startKafkaGoGroupReader(t, addr, groupID, topic, "reader-b")
	// Both readers are in one Stable generation, each with partitions,
	// before any record exists.
	var assigned map[string][]int32
	waitFor(t, 20*time.Second, "a Stable group with both readers assigned", func() bool {
		ds, err := adm.DescribeConsumerGroups([]string{groupID})
		if err != nil || len(ds) != 1 || ds[0].State != "Stable" || len(ds[0].Members) != 2 {
			return false
		}
		assigned = map[string][]int32{}
		for id, md := range ds[0].Members {
			as, err := md.GetMemberAssignment()
			if err != nil {
				t.Fatalf("member %s: assignment: %v", id, err)
			}
			if as == nil || len(as.Topics[topic]) == 0 {
				return false
			}
			assigned[id] = as.Topics[topic]
		}
		return true
	})
	owner := map[int32]string{}
	for id, ps := range assigned {
		for _, p := range ps {
			if o, dup := owner[p]; dup {
				t.Fatalf("partition %d assigned to both %s and %s", p, o, id)
			}
			owner[p] = id
		}
	}
	if len(owner) != int(partitions) {
		t.Fatalf("assignment %v does not cover all %d partitions", assigned, partitions)
	}
	t.Logf("assignment: %v", assigned)

	all := keyRange("kg", 0, 200)
	writeKafkaGoKeys(t, ctx, addr, topic, all)
	ends := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		ends[p] = int64(len(all)) / int64(partitions)
	}
	waitFor(t, 20*time.Second, "all 200 records read and committed", func() bool {
		seen := map[string]bool{}
		for _, k := range append(a.keys(), b.keys()...) {
			seen[k] = true
		}
		if len(seen) != len(all) {
			return false
		}
		got := committedOffsets(t, adm, groupID, topic, partitions)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	})
	a.mu.Lock()
	pa := a.parts
	a.mu.Unlock()
	b.mu.Lock()
	pb := b.parts
	b.mu.Unlock()
	if len(pa) == 0 || len(pb) == 0 || len(pa)+len(pb) != int(partitions) {
		t.Errorf("reader-a read partitions %v, reader-b %v; want two non-empty disjoint halves", pa, pb)
	}
	for p := range pa {
		if pb[p] {
			t.Errorf("partition %d was read by both readers of one generation", p)
		}
	}
	if n := len(a.keys()) + len(b.keys()); n != len(all) {
		t.Errorf("the readers got %d records between them, want each of %d exactly once", n, len(all))
	}
	a.close(t)
	b.close(t)
	if got := committedOffsets(t, adm, groupID, topic, partitions); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Fatalf("committed offsets after both readers closed: %v, want %v", got, ends)
	}

	// A restarted reader resumes after the commits: it gets only new records.
	c := startKafkaGoGroupReader(t, addr, groupID, topic, "reader-c")
	waitFor(t, 20*time.Second, "reader-c to join", func() bool {
		ds, err := adm.DescribeConsumerGroups([]string{groupID})
		return err == nil && len(ds) == 1 && ds[0].State == "Stable" && len(ds[0].Members) == 1
	})
	late := keyRange("late", 0, 10)
	writeKafkaGoKeys(t, ctx, addr, topic, late)
	for i := range late {
		ends[int32(i)%partitions]++
	}
	waitFor(t, 15*time.Second, "reader-c to read 10 records", func() bool { return len(c.keys()) >= len(late) })
	waitFor(t, 10*time.Second, "reader-c's commits", func() bool {
		return fmt.Sprint(committedOffsets(t, adm, groupID, topic, partitions)) == fmt.Sprint(ends)
	})
	c.close(t)
	got := c.keys()
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(late) {
		t.Errorf("reader-c got %v, want exactly %v", got, late)
	}
}
