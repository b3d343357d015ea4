package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// TestPausedFollowerLeavesISRAndReturns pauses a follower with SIGSTOP
// under acks=all load: it must leave the ISR (IsrLagSeconds is 1), acks=all
// must go on with the other two, and after SIGCONT it must catch up and be
// back in the ISR, without an election, and with every acknowledged record
// in place.
func TestPausedFollowerLeavesISRAndReturns(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "pause"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	epoch := mustStatus(t, l).Epoch
	createTopic(t, c, topic, 1, nil)
	load := startLoad(t, c.Client(kgo.RequiredAcks(kgo.AllISRAcks())), topic, 0, "v", 30*time.Second)
	load.waitMore(50, readWithin)

	f, other := c.Others(l)[0], c.Others(l)[1]
	f.Pause()
	paused := time.Now()
	c.WaitISR(isrWithin, l.ID, other.ID)
	t.Logf("%v left the ISR %v after SIGSTOP", f, time.Since(paused).Round(time.Millisecond))
	load.waitMore(50, readWithin)

	f.Resume()
	resumed := time.Now()
	c.WaitISR(isrWithin, 1, 2, 3)
	t.Logf("%v back in the ISR %v after SIGCONT", f, time.Since(resumed).Round(time.Millisecond))
	load.waitMore(50, readWithin)
	acks := load.Stop()

	if now, st := c.ServingLeader(); now != l || st.Epoch != epoch {
		t.Errorf("the pause changed the leadership: %v leads in epoch %d, was %v in epoch %d", now, st.Epoch, l, epoch)
	}
	end := listEnd(t, c.Admin(), topic, 0)
	waitCaughtUp(t, c, topic, 1, end)
	checkAcked(t, readPartition(t, c, topic, 0, end), acks)
}

// TestPausedLeaderIsReplacedAndStepsDown pauses the serving leader with
// SIGSTOP under acks=all load (a hung machine whose sockets stay open):
// the others elect a leader that serves; after SIGCONT the old leader
// must step down, follow the new one and rejoin the ISR, and every
// acknowledged record must be there exactly once, in order.
func TestPausedLeaderIsReplacedAndStepsDown(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "hung"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	// A paused broker keeps its connections open and answers nothing:
	// only the client's request timeout ends a request in flight to it.
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(3*time.Second), kgo.RequestTimeoutOverhead(2*time.Second))
	load := startLoad(t, cl, topic, 0, "v", 30*time.Second)
	load.waitMore(50, readWithin)

	l.Pause()
	paused := time.Now()
	l2 := c.Leader(electWithin, l)
	t.Logf("%v serves %v after %v was paused", l2, time.Since(paused).Round(time.Millisecond), l)
	load.waitMore(50, readWithin)

	l.Resume()
	c.WaitFor(electWithin, "the old leader following the new one", func() (bool, string) {
		st, err := l.Status()
		if err != nil {
			return false, err.Error()
		}
		return st.Role == "follower" && st.Leader == int32(l2.ID), fmt.Sprintf("old leader: role %s, leader %d", st.Role, st.Leader)
	})
	c.WaitISR(isrWithin, 1, 2, 3)
	load.waitMore(20, readWithin)
	acks := load.Stop()
	end := listEnd(t, c.Admin(), topic, 0)
	waitCaughtUp(t, c, topic, 1, end)
	checkAcked(t, readPartition(t, c, topic, 0, end), acks)
}

func mustStatus(t *testing.T, r *testcluster.Replica) status.Replication {
	t.Helper()
	st, err := r.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFollowerBehindRetentionIsReset kills a follower, lets retention on
// the leader delete every segment the follower still has, and restarts it:
// the follower must be reset to the leader's log start (counted in its
// status), catch up, rejoin the ISR and hold the leader's records.
func TestFollowerBehindRetentionIsReset(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t, testcluster.WithServer("RetentionCheckMs", 200))
	const topic = "ret"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	seg, keep := "1024", "2048"
	createTopic(t, c, topic, 1, map[string]*string{"segment.bytes": &seg, "retention.bytes": &keep})
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	first := produceN(t, all, topic, 0, "first", 20)
	waitCaughtUp(t, c, topic, 1, endOffset(first))

	f := c.Others(l)[0]
	f.Kill()
	adm := c.Admin()
	ctx := testcluster.Context(t, readWithin)
	start := int64(0)
	for i := 0; start <= endOffset(first); i++ {
		produceN(t, all, topic, 0, fmt.Sprintf("more%d", i), 20)
		lo, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := lo.Lookup(topic, 0)
		start = o.Offset
		if ctx.Err() != nil {
			t.Fatalf("the leader's log start stayed at %d, want past %d", start, endOffset(first))
		}
	}
	t.Logf("the leader's log start is %d; the killed follower's log ends at %d", start, endOffset(first))
	c.WaitISR(isrWithin, c.Others(f)[0].ID, c.Others(f)[1].ID)

	f.Start()
	c.WaitISR(isrWithin, 1, 2, 3)
	last := produceN(t, all, topic, 0, "last", 10)
	end := endOffset(last)
	waitCaughtUp(t, c, topic, 1, end)
	if st := mustStatus(t, f); st.Follower == nil || st.Follower.Resets == 0 {
		t.Fatalf("the restarted follower reports no reset: %+v", st.Follower)
	}
	checkAcked(t, readPartition(t, c, topic, 0, end), last)

	for _, r := range c.Replicas {
		r.Stop(30 * time.Second)
	}
	ref := c.Others(f)[0]
	want, wantStart, wantEnd := decoded(t, ref, topic)
	got, gotStart, gotEnd := decoded(t, f, topic)
	if gotStart <= endOffset(first) || gotEnd != wantEnd {
		t.Fatalf("%v's log is [%d, %d), %v's [%d, %d); want it reset past %d", f, gotStart, gotEnd, ref, wantStart, wantEnd, endOffset(first))
	}
	for off, v := range got {
		if want[off] != v && off >= wantStart {
			t.Fatalf("%v holds %q at offset %d, %v %q", f, v, off, ref, want[off])
		}
	}
}

// decoded reads a stopped replica's stored partition 0 as offset → value.
func decoded(t *testing.T, r *testcluster.Replica, topic string) (map[int64]string, int64, int64) {
	t.Helper()
	data, start, end, err := r.ReadLog(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := testcluster.DecodeLog(data)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, rec := range recs {
		out[rec.Offset] = string(rec.Value)
	}
	return out, start, end
}

// TestTwoOfThreeDeadNoReplicaServes kills two of three replicas, once
// leaving the leader alone and once leaving a follower alone: the survivor
// must not serve, and an acks=all producer gets errors only. When the
// replicas return, every record acknowledged before is there.
func TestTwoOfThreeDeadNoReplicaServes(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "minority"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()))
	before := produceN(t, all, topic, 0, "before", 20)

	fs := c.Others(l)
	for _, f := range fs {
		f.Kill()
	}
	noneServes(t, c, topic, "alone-leader")

	fs[0].Start()
	l2 := c.Leader(electWithin)
	mid := produceN(t, all, topic, 0, "mid", 20)
	l2.Kill()
	noneServes(t, c, topic, "alone-follower")

	c.StartAll()
	c.Leader(electWithin)
	after := produceN(t, all, topic, 0, "after", 10)
	checkAcked(t, readPartition(t, c, topic, 0, endOffset(after)), before, mid, after)
}

// TestMetadataNamesALeaderThroughAnElection kills the serving leader and
// asks the other two replicas for metadata, back to back, until one of
// them serves: while the election runs each answer names a leader (the
// dead one, or the one taking over), never none, as Kafka's metadata
// goes on naming the old leader until a new one is chosen. sarama fails
// a record at once on "no leader", and three such failures open its
// producer's circuit breaker for ten seconds.
func TestMetadataNamesALeaderThroughAnElection(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "named"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	others := c.Others(l)
	c.WaitFor(readWithin, "the followers to name the leader", func() (bool, string) {
		for _, r := range others {
			if got := namedLeader(t, r, topic); got != int32(l.ID) {
				return false, fmt.Sprintf("%v names %d", r, got)
			}
		}
		return true, ""
	})
	l.Kill()
	killed := time.Now()
	var answers, none int
	var newLeader *testcluster.Replica
	for newLeader == nil {
		if time.Since(killed) > electWithin {
			t.Fatalf("no replica serves %v after the leader was killed", electWithin)
		}
		for _, r := range others {
			answers++
			if namedLeader(t, r, topic) < 0 {
				none++
			}
		}
		if r, _ := c.ServingLeader(); r != nil && r != l {
			newLeader = r
		}
	}
	took := time.Since(killed)
	t.Logf("%v serves %v after the kill; %d metadata answers meanwhile, %d naming no leader", newLeader, took.Round(time.Millisecond), answers, none)
	// Past the grace (2 s after a replica finds no leader) naming none is
	// right: a majority may be gone. An election within 2 s of the kill
	// ended inside every replica's grace.
	if none > 0 && took < 2*time.Second {
		t.Fatalf("%d of %d metadata answers named no leader during an election of %v", none, answers, took.Round(time.Millisecond))
	}
}

// noneServes waits until no running replica serves, then checks that a
// burst of acks=all records is refused (none acknowledged) and that still
// none serves.
func noneServes(t *testing.T, c *testcluster.Cluster, topic, prefix string) {
	t.Helper()
	c.WaitFor(electWithin, "state where no replica serves", func() (bool, string) {
		for _, r := range c.Up() {
			if st, err := r.Status(); err != nil || st.Role == "leader" {
				return false, fmt.Sprintf("%v: role %q, err %v", r, st.Role, err)
			}
		}
		return true, ""
	})
	// No running replica names a leader once it has noticed the loss
	// (an election timeout): naming the dead one would send clients to
	// dial it instead of retrying.
	c.WaitFor(electWithin, "every replica to name no leader", func() (bool, string) {
		for _, r := range c.Up() {
			if l := namedLeader(t, r, topic); l >= 0 {
				return false, fmt.Sprintf("%v names replica %d the leader", r, l)
			}
		}
		return true, ""
	})
	// Not idempotent: an idempotent producer never gives up on a batch
	// that may have been sent.
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(5*time.Second))
	recs := make([]*kgo.Record, 5)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "%s-%06d", prefix, i)}
	}
	ctx := testcluster.Context(t, 10*time.Second)
	done := make(chan kgo.ProduceResults, 1)
	go func() { done <- cl.ProduceSync(ctx, recs...) }()
	var res kgo.ProduceResults
	select {
	case res = <-done:
	case <-time.After(readWithin):
		t.Fatalf("a produce with a majority dead neither failed nor succeeded within %v", readWithin)
	}
	var acked []int64
	for _, r := range res {
		if r.Err == nil {
			acked = append(acked, r.Record.Offset)
		}
	}
	if len(acked) > 0 {
		t.Fatalf("%d of %d records acknowledged with a majority dead (offsets %v)", len(acked), len(recs), acked)
	}
	t.Logf("with %d of %d replicas up, produce fails: %v", len(c.Up()), len(c.Replicas), res.FirstErr())
	for _, r := range c.Up() {
		if st := mustStatus(t, r); st.Role == "leader" {
			t.Fatalf("%v serves with a majority dead: %+v", r, st)
		}
	}
}

// TestFiveReplicasSurviveLeaderAndFollowerKill kills the leader and a
// follower of a group of five at once under acks=all load: the other
// three elect a leader and serve, nothing acknowledged is lost, and the
// two killed replicas rejoin the ISR after a restart.
func TestFiveReplicasSurviveLeaderAndFollowerKill(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t, testcluster.WithReplicas(5))
	const topic = "five"
	l := c.WaitISR(isrWithin, 1, 2, 3, 4, 5)
	createTopic(t, c, topic, 1, nil)
	load := startLoad(t, c.Client(kgo.RequiredAcks(kgo.AllISRAcks())), topic, 0, "v", 30*time.Second)
	load.waitMore(50, readWithin)

	f := c.Others(l)[0]
	killed := time.Now()
	l.Kill()
	f.Kill()
	l2 := c.Leader(electWithin, l, f)
	t.Logf("%v serves %v after the kill of %v (leader) and %v", l2, time.Since(killed).Round(time.Millisecond), l, f)
	load.waitMore(50, readWithin)
	var rest []int
	for _, r := range c.Others(l, f) {
		rest = append(rest, r.ID)
	}
	c.WaitISR(isrWithin, rest...)
	acks := load.Stop()
	checkAcked(t, readPartition(t, c, topic, 0, endOffset(acks)), acks)

	l.Start()
	f.Start()
	c.WaitISR(isrWithin, 1, 2, 3, 4, 5)
	end := listEnd(t, c.Admin(), topic, 0)
	waitCaughtUp(t, c, topic, 1, end)
}

// namedLeader is the leader r's own Metadata gives for partition 0 of topic
// (-1 for none).
func namedLeader(t *testing.T, r *testcluster.Replica, topic string) int32 {
	t.Helper()
	one, err := kgo.NewClient(kgo.SeedBrokers(r.ClientAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := one.SeedBrokers()[0].Request(testcluster.Context(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Metadata from %v: %v", r, err)
	}
	for _, mt := range resp.(*kmsg.MetadataResponse).Topics {
		for _, mp := range mt.Partitions {
			if mp.Partition == 0 {
				return mp.Leader
			}
		}
	}
	return -1
}
