package replication_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerGroupProtocolAcrossFailover: a KIP-848 group member (franz-go,
// ServerSideBalancer) keeps consuming across a failover. The new leader
// knows no members (membership is not replicated), so the member rejoins
// there, gets every partition again and resumes from the committed offsets
// replicated in __consumer_offsets: every acknowledged record is consumed,
// and none committed before the failover is consumed again.
func TestConsumerGroupProtocolAcrossFailover(t *testing.T) {
	ns, _ := failoverGroup(t)
	ctx := context.Background()
	const topic, group = "kip848", "g848"
	first := servingLeader(t, ns, 0, 60*time.Second)
	waitISRCommitted(t, first)
	seeds := []string{ns[0].addr(), ns[1].addr(), ns[2].addr()}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			v := fmt.Sprint(i)
			err := prod.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			cancel()
			if err == nil {
				acked[v] = true
			}
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	consumeUntil := func(want map[string]bool) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for {
			missing := 0
			for v := range want {
				if seen[v] == 0 {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			fs := cons.PollFetches(cctx)
			if cctx.Err() != nil {
				t.Fatalf("%d acknowledged records never consumed", missing)
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		}
	}
	produce(0, 150)
	consumeUntil(acked)
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// The member owns every partition on the first leader.
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	adm, err := kgo.NewClient(kgo.SeedBrokers(first.addr()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := req.RequestWith(ctx, adm)
	adm.Close()
	if err != nil || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Members) != 1 {
		t.Fatalf("ConsumerGroupDescribe on the leader: %v %+v", err, resp)
	}
	var parts []int32
	for _, tp := range resp.Groups[0].Members[0].Assignment.TopicPartitions {
		parts = append(parts, tp.Partitions...)
	}
	slices.Sort(parts)
	if !slices.Equal(parts, []int32{0, 1, 2}) {
		t.Fatalf("the only member owns %v, want [0 1 2]", parts)
	}

	first.stop()
	second := servingLeader(t, ns, first.id, 60*time.Second)
	t.Logf("replica %d serves", second.id)
	before := len(acked)
	produce(150, 300)
	if len(acked)-before < 100 {
		t.Fatalf("only %d of 150 records acknowledged after the failover", len(acked)-before)
	}
	consumeUntil(acked)
	for v, n := range seen {
		var i int
		fmt.Sscan(v, &i)
		if i < 150 && n > 1 {
			t.Fatalf("record %s, committed before the failover, consumed %d times", v, n)
		}
	}
}
