package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describe848 asks the coordinator for a KIP-848 group's members and their
// current assignments (partitions per member, sorted).
func describe848(t *testing.T, cl *kgo.Client, groupID string) (state string, members map[string][]int32) {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{groupID}
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		t.Fatalf("ConsumerGroupDescribe %s: error %d", groupID, g.ErrorCode)
	}
	members = map[string][]int32{}
	for _, m := range g.Members {
		var ps []int32
		for _, tp := range m.Assignment.TopicPartitions {
			ps = append(ps, tp.Partitions...)
		}
		slices.Sort(ps)
		members[m.MemberID] = ps
	}
	return g.State, members
}

// TestConsumerGroupProtocol runs franz-go consumers on the KIP-848 protocol
// (ServerSideBalancer): the broker assigns partitions, members join and
// leave while records flow, no record is lost, the assignment converges to
// disjoint sets covering every partition, and after a broker restart a new
// member resumes from the committed offsets.
func TestConsumerGroupProtocol(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "kip848", 4, nil)
	prod := client(t, in.Addr(), kgo.DefaultProduceTopic("kip848"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produce := func(from, to int) { produceNumbers(t, prod, from, to) }
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	consumer := func(addr, name string, balancer kgo.GroupBalancer) *kgo.Client {
		return client(t, addr, kgo.ConsumerGroup("g848"), kgo.ConsumeTopics("kip848"),
			kgo.ServerSideBalancer(), kgo.Balancers(balancer),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(name),
			kgo.AutoCommitInterval(100*time.Millisecond))
	}
	start := func(cl *kgo.Client, stop <-chan struct{}) { pollUntilStopped(ctx, &wg, cl, stop, &mu, seen) }
	waitSeen := func(n int) { t.Helper(); waitDistinct(t, &mu, seen, n) }
	admin := client(t, in.Addr())
	// waitStable waits until the group is Stable with want members whose
	// assignments are disjoint and cover all four partitions.
	waitStable := func(want int) map[string][]int32 {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			state, members := describe848(t, admin, "g848")
			var all []int32
			for _, ps := range members {
				all = append(all, ps...)
			}
			slices.Sort(all)
			if state == "Stable" && len(members) == want && slices.Equal(all, []int32{0, 1, 2, 3}) {
				return members
			}
			if time.Now().After(deadline) {
				t.Fatalf("group did not converge to %d members owning partitions 0-3 once each: state %s, members %v", want, state, members)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	stop1, stop2 := make(chan struct{}), make(chan struct{})
	c1 := consumer(in.Addr(), "c1", kgo.RangeBalancer())
	start(c1, stop1)
	produce(0, 200)
	waitSeen(200)
	if m := waitStable(1); len(m) != 1 {
		t.Fatalf("one member: %v", m)
	}
	c2 := consumer(in.Addr(), "c2", kgo.RangeBalancer())
	start(c2, stop2)
	if m := waitStable(2); len(m) != 2 {
		t.Fatalf("two members: %v", m)
	} else {
		for id, ps := range m {
			if len(ps) != 2 {
				t.Fatalf("range assignor gave member %s %v of 4 partitions, want 2", id, ps)
			}
		}
	}
	produce(200, 400)
	waitSeen(400)
	close(stop1) // c1 leaves: c2 takes every partition
	waitStable(1)
	produce(400, 500)
	waitSeen(500)
	close(stop2)
	wg.Wait()
	mu.Lock()
	for v, n := range seen {
		if n > 1 {
			// Redelivery after a rebalance is allowed (at-least-once),
			// but not in a steady group: records 200-499 were produced
			// while the assignment was stable.
			var i int
			fmt.Sscan(v, &i)
			if i >= 200 {
				t.Errorf("record %s consumed %d times while the group was stable", v, n)
			}
		}
	}
	mu.Unlock()

	adm := kadm.NewClient(admin)
	committed, err := adm.FetchOffsets(ctxT(t), "g848")
	if err != nil {
		t.Fatal(err)
	}
	ends, _ := adm.ListEndOffsets(ctxT(t), "kip848")
	ends.Each(func(e kadm.ListedOffset) {
		c, _ := committed.Lookup("kip848", e.Partition)
		if c.At != e.Offset {
			t.Errorf("partition %d: committed %d, end %d", e.Partition, c.At, e.Offset)
		}
	})

	// Restart: membership is gone, offsets are not.
	in.Close()
	in = startBroker(t, dir)
	prod = client(t, in.Addr(), kgo.DefaultProduceTopic("kip848"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produce(500, 540)
	mu.Lock()
	clear(seen)
	mu.Unlock()
	stop3 := make(chan struct{})
	start(consumer(in.Addr(), "c3", kgo.StickyBalancer()), stop3)
	waitSeen(40)
	time.Sleep(300 * time.Millisecond) // anything older would show up now
	close(stop3)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for v := range seen {
		var i int
		fmt.Sscan(v, &i)
		if i < 500 {
			t.Fatalf("after the restart the group re-read record %s: it did not resume from its committed offsets", v)
		}
	}
}
