package replication_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
)

// failoverGroup builds three failover-mode replicas; replica 1 has Role
// leader, so it leads first.
func failoverGroup(t *testing.T) ([]*node, *testLog) {
	return failoverGroupWith(t, nil)
}

// failoverGroupWith is failoverGroup with edit applied to every replica's
// config before it is validated.
func failoverGroupWith(t *testing.T, edit func(*config.Server)) ([]*node, *testLog) {
	tl := &testLog{t: t}
	t.Cleanup(func() { tl.mu.Lock(); tl.done = true; tl.mu.Unlock() })
	ns := make([]*node, 3)
	for i := range ns {
		cfg := config.Default()
		cfg.Port = freePort(t)
		cfg.Host = "127.0.0.1"
		cfg.MetricsPort = 0
		cfg.DataDir = t.TempDir()
		cfg.Replication = &config.Replication{
			Enabled: true, ReplicaId: i + 1, Role: "follower",
			ReplicateHost: "127.0.0.1", ReplicatePort: freePort(t),
			Token: token, AckTimeout: 2, IsrLagSeconds: 1,
			Failover: config.Failover{Enabled: true},
		}
		if i == 0 {
			cfg.Replication.Role = "leader"
		}
		ns[i] = &node{id: i + 1, cfg: cfg}
	}
	for _, n := range ns {
		r := n.cfg.Replication
		r.ClientAddress = n.addr()
		for _, o := range ns {
			if o != n {
				r.Peers = append(r.Peers, config.Peer{Id: o.id, Address: o.replAddr(), ClientAddress: o.addr()})
			}
		}
		if edit != nil {
			edit(&n.cfg)
		}
		if err := n.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range ns {
		n.start(t, tl)
	}
	t.Cleanup(func() {
		for _, n := range ns {
			if n.in != nil {
				n.in.Close()
			}
		}
	})
	return ns, tl
}

// servingLeader waits until one of the running replicas reports itself
// the serving leader, with every running replica agreeing.
func servingLeader(t *testing.T, ns []*node, not int, within time.Duration) *node {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range ns {
			if n.in == nil || n.id == not {
				continue
			}
			st := status(t, n)
			raft, _ := st["raft"].(map[string]any)
			if st["role"] == "leader" && raft["serving"] == true {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no serving leader within %v", within)
	return nil
}

// waitISRCommitted waits until leader's Raft log holds an ISR, so that
// the other replicas may be elected.
func waitISRCommitted(t *testing.T, leader *node) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for raftISR(t, leader) == nil {
		if time.Now().After(deadline) {
			t.Fatal("no ISR committed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFailover(t *testing.T) {
	ns, _ := failoverGroup(t)
	ctx := context.Background()
	const topic = "events"
	first := servingLeader(t, ns, 0, 60*time.Second)
	if first.id != 1 {
		t.Fatalf("replica %d leads first; want 1 (the only one with Role leader)", first.id)
	}
	waitISRCommitted(t, first)

	seeds := []string{ns[0].addr(), ns[1].addr(), ns[2].addr()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	acked := map[int64]string{} // offset -> value
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			v := fmt.Sprintf("value-%d", i)
			r, err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).First()
			cancel()
			if err != nil {
				t.Logf("record %d not acknowledged: %v", i, err)
				continue
			}
			if old, dup := acked[r.Offset]; dup {
				t.Fatalf("offset %d acknowledged for %q and %q", r.Offset, old, v)
			}
			acked[r.Offset] = v
		}
	}
	produce(0, 100)

	start := time.Now()
	first.stop()
	second := servingLeader(t, ns, first.id, 60*time.Second)
	t.Logf("replica %d serves after %v", second.id, time.Since(start))
	produce(100, 100)
	if len(acked) < 150 {
		t.Fatalf("only %d of 200 records acknowledged", len(acked))
	}

	// Every acknowledged record is on the new leader, once, in order.
	// Seeded with the running replicas: it reads from whichever leads.
	var running []string
	for _, n := range ns {
		if n.in != nil {
			running = append(running, n.addr())
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(running...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var maxAcked int64 = -1
	for off := range acked {
		maxAcked = max(maxAcked, off)
	}
	got := map[int64]string{}
	seen := map[string]int{}
	last := int64(-1)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for last < maxAcked {
		fs := cons.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("consumed up to %d; want %d", last, maxAcked)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Fatalf("offset %d after %d", r.Offset, last)
			}
			last = r.Offset
			got[r.Offset] = string(r.Value)
			seen[string(r.Value)]++
		})
	}
	for off, v := range acked {
		if got[off] != v {
			t.Fatalf("offset %d: got %q, acknowledged %q", off, got[off], v)
		}
		if seen[v] != 1 {
			t.Fatalf("%q read %d times", v, seen[v])
		}
	}

	// The old leader comes back as a follower of the new one and catches up.
	first.start(t, &testLog{t: t, done: true})
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The current leader (a spurious election on a loaded machine may
		// have moved it).
		second = servingLeader(t, ns, first.id, 30*time.Second)
		st := status(t, first)
		_, wantEnd, err1 := second.in.Broker.ReadLog(topic, 0)
		_, gotEnd, err2 := first.in.Broker.ReadLog(topic, 0)
		if st["role"] == "follower" && st["leader"] == float64(second.id) && err1 == nil && err2 == nil && gotEnd == wantEnd {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old leader did not rejoin: status %v, end %d vs %d", st, gotEnd, wantEnd)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want, _, _ := second.in.Broker.ReadLog(topic, 0)
	have, _, _ := first.in.Broker.ReadLog(topic, 0)
	if string(want) != string(have) {
		t.Fatal("the rejoined replica's log differs from the leader's")
	}

	// ElectLeaders (kafka-leader-election --election-type PREFERRED),
	// sent to a follower, hands the leadership back to the preferred
	// replica, the lowest id, which Metadata lists first.
	adm := kadm.NewClient(cons)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := adm.ElectLeaders(rctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		cancel()
		if err == nil && res[topic][0].Err == nil {
			break
		}
		if err == nil && errors.Is(res[topic][0].Err, kerr.ElectionNotNeeded) && servingLeader(t, ns, 0, time.Second).id == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ElectLeaders: %v %v", err, res[topic][0])
		}
	}
	if l := servingLeader(t, ns, 0, 30*time.Second); l.id != 1 {
		t.Fatalf("replica %d leads after the preferred election, want 1", l.id)
	}

	// A leader that loses its majority stops serving and closes every
	// client connection.
	second = servingLeader(t, ns, 0, 30*time.Second)
	conn, err := net.Dial("tcp", second.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted before the step-down
	for _, n := range ns {
		if n != second {
			n.stop()
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client connection still open after losing the majority: %v", err)
	}
	if st := status(t, second); st["role"] != "follower" {
		t.Fatalf("replica %d without a majority: role %v", second.id, st["role"])
	}
}

// TestFailoverDropsDeadLeaderFromISR: the new leader proposes the old,
// silent leader out of the ISR at once (replication.WithSilentRemoval)
// rather than after IsrLagSeconds, so acks=all works again right after a
// failover. IsrLagSeconds is far longer than the test's deadlines: only
// the silent-member rule can shrink the ISR here.
func TestFailoverDropsDeadLeaderFromISR(t *testing.T) {
	ns, _ := failoverGroupWith(t, func(c *config.Server) {
		c.Replication.IsrLagSeconds = 600
		c.Replication.AckTimeout = 30
	})
	first := servingLeader(t, ns, 0, 60*time.Second)
	waitISR(t, first, []int{1, 2, 3}, 60*time.Second)
	ctx := context.Background()
	cl := client(t, first.addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, "after-failover"); err != nil {
		t.Fatal(err)
	}
	if code := produceCode(t, cl, first.id, "after-failover", -1); code != 0 {
		t.Fatalf("produce before the failover: error %d", code)
	}

	first.stop()
	second := servingLeader(t, ns, first.id, 60*time.Second)
	var want []int
	for _, n := range ns {
		if n != first {
			want = append(want, n.id)
		}
	}
	waitISR(t, second, want, 60*time.Second)
	cl2 := client(t, second.addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if code := produceCode(t, cl2, second.id, "after-failover", -1); code != 0 {
		t.Fatalf("acks=all produce on the new leader: error %d", code)
	}
}
