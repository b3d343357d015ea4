package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/cli"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// TestClusterGroupJoinsLater: a third group started beside a running
// cluster of two registers, is listed by every broker, and takes
// partitions of the topics created from then on (it holds the fewest);
// its partitions are served through brokers of the other groups as well,
// and what the first two groups held is untouched until a balance moves
// some of it: `moonmq cluster balance`, run while a producer writes,
// spreads a topic placed wholly in g1 over the three groups without
// losing or repeating an acknowledged record.
func TestClusterGroupJoinsLater(t *testing.T) {
	skipShort(t)
	c := testcluster.New(t, testcluster.WithGroups(3))
	for g := range 2 {
		for _, r := range c.InGroup(g) {
			r.Start()
		}
	}
	serving := func(groups int) {
		t.Helper()
		c.WaitFor(electWithin, fmt.Sprintf("%d groups serving with their whole ISR", groups), func() (bool, string) {
			for g := range groups {
				l, st := c.ServingLeaderOf(g)
				if l == nil || len(st.ISR) != 3 {
					return false, fmt.Sprintf("g%d: leader %v ISR %v", g+1, l, st.ISR)
				}
			}
			return true, ""
		})
	}
	serving(2)
	// Seeded with the first two groups' brokers only, as a client of the
	// cluster before the third group existed.
	var seeds []string
	for _, r := range append(c.InGroup(0), c.InGroup(1)...) {
		seeds = append(seeds, r.ClientAddr())
	}
	cl := c.Client(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	ctx := testcluster.Context(t, 5*time.Minute)
	create := func(topic string, partitions int32) {
		t.Helper()
		c.WaitFor(readWithin, "topic "+topic+" created", func() (bool, string) {
			resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
			if err == nil {
				err = resp.Err
			}
			return err == nil || errors.Is(err, kerr.TopicAlreadyExists), fmt.Sprint(err)
		})
	}
	// groupsOf waits until every partition of topic has a leader and
	// returns each partition's group.
	groupsOf := func(topic string, partitions int) map[int32]int {
		t.Helper()
		out := map[int32]int{}
		c.WaitFor(readWithin, "leaders of "+topic, func() (bool, string) {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				return false, err.Error()
			}
			td := md.Topics[topic]
			if len(td.Partitions) != partitions {
				return false, fmt.Sprintf("%d partitions listed", len(td.Partitions))
			}
			for _, p := range td.Partitions {
				if p.Leader < 0 {
					return false, fmt.Sprintf("%s/%d has no leader", topic, p.Partition)
				}
				out[p.Partition] = c.Replica(int(p.Leader)).Group
			}
			return true, ""
		})
		return out
	}
	create("before", 4)
	before := groupsOf("before", 4)
	acked := produceAll(t, cl, "before", 4, 10)

	for _, r := range c.InGroup(2) {
		r.Start()
	}
	serving(3)
	c.WaitFor(readWithin, "every broker listing the nine brokers", func() (bool, string) {
		for _, r := range c.Replicas {
			one := c.Client(kgo.SeedBrokers(r.ClientAddr()))
			bs, err := kadm.NewClient(one).ListBrokers(ctx)
			one.Close()
			if err != nil || len(bs) != 9 {
				return false, fmt.Sprintf("broker %d lists %d brokers: %v", r.ID, len(bs), err)
			}
		}
		return true, ""
	})

	create("after", 3)
	after := groupsOf("after", 3)
	inG3 := 0
	for _, g := range after {
		if g == 2 {
			inG3++
		}
	}
	t.Logf("groups (0 for g1) of the partitions: before %v, after %v", before, after)
	if inG3 < 2 {
		t.Fatalf("topic after is placed %v: the new group, holding no partition, should get at least two of three", after)
	}
	// Produced through the first groups' brokers (the client follows
	// Metadata to g3's leaders), read back through one broker of g1 and
	// one of g3.
	later := produceAll(t, cl, "after", 3, 10)
	for _, r := range []*testcluster.Replica{c.InGroup(0)[1], c.InGroup(2)[1]} {
		got := readValuesFrom(t, c, ctx, r.ClientAddr(), "after", len(later))
		for _, v := range later {
			if got[v] != 1 {
				t.Fatalf("through broker %d: %s read %d times", r.ID, v, got[v])
			}
		}
	}
	// The first groups' partitions did not move, and hold what they held.
	if now := groupsOf("before", 4); fmt.Sprint(now) != fmt.Sprint(before) {
		t.Fatalf("partitions of before moved from %v to %v", before, now)
	}
	got := readValuesFrom(t, c, ctx, c.InGroup(2)[0].ClientAddr(), "before", len(acked))
	for _, v := range acked {
		if got[v] != 1 {
			t.Fatalf("before: %s read %d times after the third group joined", v, got[v])
		}
	}

	// Balancing: a topic placed wholly in g1 by its replica assignment,
	// then `moonmq cluster balance` while a producer writes to every
	// partition of it. Balance weighs counts, bytes and append rates;
	// here the writes spread evenly over the new topic's six partitions
	// and the other topics hold little, so the groups end within one
	// partition of each other. Every acknowledged record is read
	// exactly once.
	var g1 []int32
	for _, r := range c.InGroup(0) {
		g1 = append(g1, int32(r.ID))
	}
	const skewedParts = 6
	c.WaitFor(readWithin, "topic skewed created in g1", func() (bool, string) {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "skewed", -1, -1
		for p := range int32(skewedParts) {
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: p, Replicas: g1})
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 {
			return false, fmt.Sprint(err)
		}
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		return err == nil || errors.Is(err, kerr.TopicAlreadyExists), fmt.Sprint(err)
	})
	if gs := groupsOf("skewed", skewedParts); len(gs) != skewedParts || gs[0] != 0 || gs[5] != 0 {
		t.Fatalf("skewed placed %v, want all in g1", gs)
	}
	prod := c.Client(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("skewed"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	var mu sync.Mutex
	var sent []string
	var failed error
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			v := fmt.Sprintf("skewed-%06d", i)
			if err := produceSync(t, prod, readWithin, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			mu.Lock()
			sent = append(sent, v)
			mu.Unlock()
		}
	}()
	var out, errOut bytes.Buffer
	code := cli.Cluster(ctx, []string{"balance", "--bootstrap", strings.Join(seeds, ",")}, &out, &errOut)
	stop()
	wg.Wait()
	t.Logf("moonmq cluster balance: exit %d\n%s%s", code, out.String(), errOut.String())
	if code != 0 || failed != nil {
		t.Fatalf("balance exit %d, producer error %v", code, failed)
	}
	counts := map[int]int{}
	for _, topic := range []struct {
		name string
		n    int
	}{{"before", 4}, {"after", 3}, {"skewed", skewedParts}} {
		for _, g := range groupsOf(topic.name, topic.n) {
			counts[g]++
		}
	}
	if lo, hi := min(counts[0], counts[1], counts[2]), max(counts[0], counts[1], counts[2]); hi-lo > 1 {
		t.Fatalf("partitions by group after balancing %v", counts)
	}
	if len(sent) < 10 {
		t.Fatalf("only %d records acknowledged while balancing", len(sent))
	}
	got = readValuesFrom(t, c, ctx, c.InGroup(1)[0].ClientAddr(), "skewed", len(sent))
	for _, v := range sent {
		if got[v] != 1 {
			t.Fatalf("skewed: %s read %d times after balancing", v, got[v])
		}
	}
}

// produceAll produces n records to each partition of topic (produceN) and
// returns their values.
func produceAll(t *testing.T, cl *kgo.Client, topic string, partitions int32, n int) []string {
	t.Helper()
	var out []string
	for p := range partitions {
		for _, a := range produceN(t, cl, topic, p, fmt.Sprintf("%s-%d", topic, p), n) {
			out = append(out, a.value)
		}
	}
	return out
}

// readValuesFrom reads topic from the start through the broker at seed
// only, until want distinct values arrived, and counts each value.
func readValuesFrom(t *testing.T, c *testcluster.Cluster, ctx context.Context, seed, topic string, want int) map[string]int {
	t.Helper()
	cons := c.Client(kgo.SeedBrokers(seed), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cons.Close()
	got := map[string]int{}
	rctx, cancel := context.WithTimeout(ctx, readWithin)
	defer cancel()
	for len(got) < want {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d values of %s through %s", len(got), want, topic, seed)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
	}
	return got
}
