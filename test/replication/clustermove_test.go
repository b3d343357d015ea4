package replication_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/moonmq/moonmq/internal/cli"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/coordinator"
)

// movePartition asks the broker at seed to move topic's partition to the
// brokers of one group (AlterPartitionReassignments) and fails the test
// on a refusal.
func movePartition(t *testing.T, seed, topic string, partition int32, replicas []int32) {
	t.Helper()
	cl := client(t, seed)
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: topic,
		Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: partition, Replicas: replicas}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("move %s/%d to %v: %v", topic, partition, replicas, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("move %s/%d to %v: %v", topic, partition, replicas, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("move %s/%d to %v: %v %v", topic, partition, replicas, err, rp.ErrorMessage)
			}
		}
	}
}

// partitionLeader is a partition's leader and leader epoch in Metadata
// from the broker at seed.
func partitionLeader(t *testing.T, seed, topic string, partition int32) (int32, int32) {
	t.Helper()
	cl := client(t, seed)
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 {
		return -1, -1
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == partition {
			return p.Leader, p.LeaderEpoch
		}
	}
	return -1, -1
}

// moves lists the moves in progress through the broker at seed.
func moves(t *testing.T, seed string) int {
	t.Helper()
	cl := client(t, seed)
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1
	}
	n := 0
	for _, t := range resp.Topics {
		n += len(t.Partitions)
	}
	return n
}

// TestClusterMovePartitionUnderLoad: a partition moves from one group to
// the other and back while an idempotent acks=all producer writes to it.
// Each move ends with the other group's leader serving the partition at a
// higher leader epoch, no move listed, every acknowledged record stored
// once at its acknowledged offset, in order, and the copy the old owner
// held dropped.
func TestClusterMovePartitionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic = "moving"
	createTopic(t, ns[1].addr(), topic, 2)
	owners := ownersOf(t, ns[1].addr(), topic, 2)
	g1, g2 := []int32{1, 2, 3}, []int32{4, 5, 6}
	inG1 := func(id int32) bool { return id >= 1 && id <= 3 }
	home, away := g1, g2
	if !inG1(owners[0]) {
		home, away = g2, g1
	}

	// The producer: one record at a time per batch, acks=all,
	// idempotent, to partition 0, until stopped.
	type acked struct {
		value  string
		offset int64
	}
	var mu sync.Mutex
	var got []acked
	var failed int
	prod := client(t, ns[2].addr(), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1000),
		kgo.RecordDeliveryTimeout(60*time.Second))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			v := strconv.Itoa(i)
			var pwg sync.WaitGroup
			// A few in flight at once, as a pipelined producer has.
			for j := 0; j < 4; j++ {
				pwg.Add(1)
				vv := v + "." + strconv.Itoa(j)
				prod.Produce(context.Background(), &kgo.Record{Value: []byte(vv), Partition: 0}, func(r *kgo.Record, err error) {
					defer pwg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						return
					}
					got = append(got, acked{vv, r.Offset})
				})
			}
			pwg.Wait()
		}
	}()
	// The tail: a consumer reading partition 0 as it is written, its
	// long polls (franz-go waits up to 5 s) open across the cut-overs.
	// Told OFFSET_OUT_OF_RANGE it would skip to the end: every offset
	// must come, in order.
	tail := client(t, ns[4].addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	var tailNext atomic.Int64
	var tailGap atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			tail.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				if want := tailNext.Load(); r.Offset != want && tailGap.Load() == nil {
					tailGap.Store(fmt.Sprintf("the tail consumer read offset %d after %d", r.Offset, want-1))
				}
				tailNext.Store(r.Offset + 1)
			})
		}
	}()
	// The source's leader long-polls partition 0 at its end until it
	// answers that another group leads it: a poll open across the
	// cut-over must not be told OFFSET_OUT_OF_RANGE when the old owner
	// drops its copy, which librdkafka's consumers take as a reason to
	// skip to the end.
	var rawGap atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		rawTail(t, ctx, ns[int(owners[0])].addr(), owners[0], topic, func(msg string) { rawGap.CompareAndSwap(nil, msg) })
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	waitAcked := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ackedCount() < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d records acknowledged, want %d", ackedCount(), n)
			}
		}
	}
	waitAcked(300)

	moveAndWait := func(to []int32, viaCLI bool) {
		t.Helper()
		_, before := partitionLeader(t, ns[1].addr(), topic, 0)
		start := ackedCount()
		if viaCLI {
			// moonmq cluster move, as an operator would, waiting.
			group := "g1"
			if !inG1(to[0]) {
				group = "g2"
			}
			var out, errOut bytes.Buffer
			if code := cli.Cluster(context.Background(), []string{"move", topic + "/0", group, "--wait", "--bootstrap", ns[3].addr()}, &out, &errOut); code != 0 {
				t.Fatalf("moonmq cluster move: exit %d: %s%s", code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "moved "+topic+"/0 to "+group) {
				t.Fatalf("moonmq cluster move printed %q", out.String())
			}
		} else {
			movePartition(t, ns[3].addr(), topic, 0, to)
		}
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			l, e := partitionLeader(t, ns[5].addr(), topic, 0)
			if inG1(l) == inG1(to[0]) && l >= 0 && moves(t, ns[1].addr()) == 0 {
				if e <= before {
					t.Fatalf("after the move, leader %d at epoch %d, not above %d", l, e, before)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition 0 not moved to %v: leader %d, %d moves listed", to, l, moves(t, ns[1].addr()))
			}
		}
		waitAcked(start + 300) // the producer goes on at the new owner
	}
	moveAndWait(away, false)
	moveAndWait(home, true)
	stop()
	wg.Wait()
	if g := tailGap.Load(); g != nil {
		t.Fatal(g)
	}
	if g := rawGap.Load(); g != nil {
		t.Fatal(g)
	}
	if tailNext.Load() < int64(ackedCount())/2 {
		t.Fatalf("the tail consumer read up to offset %d of %d acknowledged records", tailNext.Load(), ackedCount())
	}

	// Both groups whole again: a group that handed the partition over
	// and dropped its copy keeps its followers in sync.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		whole := true
		var isrs [][]int32
		for _, g := range [][]int32{g1, g2} {
			_, st := groupStatus(t, ns[int(g[0])].addr())
			isrs = append(isrs, st)
			whole = whole && len(st) == 3
		}
		if whole {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the groups' ISRs after the moves: %v, want every replica in each", isrs)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		t.Errorf("%d produces failed", failed)
	}
	want := map[int64]string{}
	for _, a := range got {
		if v, dup := want[a.offset]; dup {
			t.Fatalf("offset %d acknowledged for %q and %q", a.offset, v, a.value)
		}
		want[a.offset] = a.value
	}
	// Read partition 0 back from its start through a broker of the
	// group it moved away from and back.
	cons := client(t, ns[6].addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[string]int64{}
	next := int64(0)
	for len(seen) < len(want) {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d acknowledged records", len(seen), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next {
				t.Fatalf("record at offset %d, want %d: the log has a gap or goes back", r.Offset, next)
			}
			next++
			if o, dup := seen[string(r.Value)]; dup {
				t.Fatalf("%q stored twice, at %d and %d", r.Value, o, r.Offset)
			}
			seen[string(r.Value)] = r.Offset
		})
	}
	for off, v := range want {
		if o, ok := seen[v]; !ok || o != off {
			t.Fatalf("%q acknowledged at offset %d, read at %d (found %v)", v, off, o, ok)
		}
	}
	t.Logf("%d records acknowledged over two moves", len(want))
}

// rawTail long-polls partition 0 of topic on broker id (at seed) at the
// partition's end, round after round, until the broker answers that it no
// longer leads the partition or ctx ends; an answer of OFFSET_OUT_OF_RANGE
// for an offset it gave as its high watermark goes to fail.
func rawTail(t *testing.T, ctx context.Context, seed string, id int32, topic string, fail func(string)) {
	cl := client(t, seed)
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return
	}
	fetch := func(offset int64, wait int32) (*kmsg.FetchResponseTopicPartition, error) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = wait, 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, td[topic].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, offset, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
		if err != nil {
			return nil, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return nil, fmt.Errorf("fetch answered %d topics", len(resp.Topics))
		}
		return &resp.Topics[0].Partitions[0], nil
	}
	offset := int64(0)
	for ctx.Err() == nil {
		p, err := fetch(offset, 10_000)
		switch {
		case err != nil:
			continue
		case p.ErrorCode == kerr.NotLeaderForPartition.Code:
			return
		case p.ErrorCode == kerr.OffsetOutOfRange.Code:
			fail(fmt.Sprintf("broker %d answered a fetch at offset %d, its high watermark, with OFFSET_OUT_OF_RANGE", id, offset))
			return
		case p.ErrorCode == 0:
			offset = max(offset, p.HighWatermark)
		}
	}
}

// groupStatus is the leader and ISR of the group of the broker at seed,
// from the leader epoch and ISR Metadata gives its internal topics'
// partitions that the group owns (every group owns some).
func groupStatus(t *testing.T, seed string) (int32, []int32) {
	t.Helper()
	cl := client(t, seed)
	req := kmsg.NewPtrMetadataRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, nil
	}
	var group string
	for _, b := range resp.Brokers {
		if fmt.Sprintf("%s:%d", b.Host, b.Port) == seed && b.Rack != nil {
			group = *b.Rack
		}
	}
	rackOf := map[int32]string{}
	for _, b := range resp.Brokers {
		if b.Rack != nil {
			rackOf[b.NodeID] = *b.Rack
		}
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.Leader >= 0 && rackOf[p.Leader] == group {
				return p.Leader, p.ISR
			}
		}
	}
	return -1, nil
}

// txnWriter runs transactions of perTxn records, spread over partitions
// 0 and 1 of its producer's topic, until stopped, and tallies what was
// committed and aborted.
type txnWriter struct {
	mu                 sync.Mutex
	committed, aborted map[string]bool
	// between is a pause after each record of a transaction: long
	// transactions.
	between time.Duration
}

// runTransactions starts a transactional producer's loop on wg until ctx
// ends; its records are "name.i.j".
func (w *txnWriter) runTransactions(t *testing.T, ctx context.Context, wg *sync.WaitGroup, prod *kgo.Client, name string, perTxn int) {
	w.mu.Lock()
	if w.committed == nil {
		w.committed, w.aborted = map[string]bool{}, map[string]bool{}
	}
	w.mu.Unlock()
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			if err := prod.BeginTransaction(); err != nil {
				t.Errorf("%s: begin: %v", name, err)
				return
			}
			var vals []string
			var failed error
			for j := range perTxn {
				v := fmt.Sprintf("%s.%d.%d", name, i, j)
				vals = append(vals, v)
				pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				failed = prod.ProduceSync(pctx, &kgo.Record{Value: []byte(v), Partition: int32(j % 2)}).FirstErr()
				cancel()
				if failed != nil {
					break
				}
				time.Sleep(w.between)
			}
			ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := prod.EndTransaction(ectx, kgo.TransactionEndTry(failed == nil))
			cancel()
			w.mu.Lock()
			for _, v := range vals {
				switch {
				case err == nil && failed == nil:
					w.committed[v] = true
				case err == nil:
					w.aborted[v] = true
				}
			}
			w.mu.Unlock()
			if err != nil {
				t.Logf("%s: transaction %d ended with %v (produce: %v)", name, i, err, failed)
			}
		}
	})
}

// count is how many records were committed so far.
func (w *txnWriter) count() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.committed) }

// waitCommits waits until n more records are committed.
func (w *txnWriter) waitCommits(t *testing.T, n int, what string) {
	t.Helper()
	before := w.count()
	for deadline := time.Now().Add(30 * time.Second); w.count() < before+n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d records committed, then only %d", what, before, w.count())
		}
	}
}

// checkReadCommitted reads partitions 0 and 1 of topic read_committed
// through seed, once the writers stopped: every committed record once, no
// aborted one.
func (w *txnWriter) checkReadCommitted(t *testing.T, seed, topic string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	cons := client(t, seed, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[string]int{}
	for got := 0; got < len(w.committed); {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			var missing []string
			for v := range w.committed {
				if seen[v] == 0 {
					missing = append(missing, v)
				}
			}
			slices.Sort(missing)
			t.Fatalf("read %d of %d committed records; missing %v", got, len(w.committed), missing)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			if w.committed[string(r.Value)] && seen[string(r.Value)] == 1 {
				got++
			}
		})
	}
	for v, n := range seen {
		if n > 1 || w.aborted[v] {
			t.Fatalf("%q read %d times (aborted: %v)", v, n, w.aborted[v])
		}
	}
}

// TestClusterMoveWaitsForTransactions: partition 0 moves to the other
// group and back and there again while two transactional producers write
// it and partition 1 (which stays) without pause: one with transactions
// v2 (KIP-890: Produce v12 adds the partition), one with the older
// protocol (AddPartitionsToTxn, as kafkajs, librdkafka and Kafka 3.x
// clients do). Every committed transaction is read whole and once
// read_committed, and no aborted one is read.
func TestClusterMoveWaitsForTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic = "moving-txn"
	createTopic(t, ns[1].addr(), topic, 2)
	owners := ownersOf(t, ns[1].addr(), topic, 2)
	home, away := []int32{1, 2, 3}, []int32{4, 5, 6}
	if owners[0] >= 4 {
		home, away = away, home
	}
	var w txnWriter
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	produce := func(name string, opts ...kgo.Opt) {
		prod := client(t, ns[2].addr(), append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.TransactionalID(name),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(10 * time.Second)}, opts...)...)
		w.runTransactions(t, ctx, &wg, prod, name, 6)
	}
	produce("v2")
	produce("v1", kgo.MaxVersions(kversion.V3_9_0()))
	w.waitCommits(t, 60, "before the moves")
	for i, to := range [][]int32{away, home, away} {
		movePartition(t, ns[3].addr(), topic, 0, to)
		waitMoved(t, ns, topic, 0, to)
		w.waitCommits(t, 60, fmt.Sprintf("after move %d", i+1))
	}
	stop()
	wg.Wait()
	w.checkReadCommitted(t, ns[6].addr(), topic)
	t.Logf("%d records committed, %d aborted, across three moves", len(w.committed), len(w.aborted))
}

// TestClusterMoveWaitsForLongTransactions: two producers keep
// transactions of about 12 s open on the moving partition back to back,
// staggered by half of that, so that at any moment one of them has more
// than a fence's 5 s wait left to run; each retries a refused produce
// every 20 ms. The
// source refuses new transactions from the target's first ask until the
// fence, across the asks, so the open one ends and the move completes.
// (When the refusal ended with each ask, the waiting producer began its
// transaction in the gap before the next ask, every time, and the move
// never completed.) Every committed transaction is read whole, once.
func TestClusterMoveWaitsForLongTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic = "moving-long-txn"
	createTopic(t, ns[1].addr(), topic, 2)
	owners := ownersOf(t, ns[1].addr(), topic, 2)
	away := []int32{4, 5, 6}
	if owners[0] >= 4 {
		away = []int32{1, 2, 3}
	}
	w := txnWriter{between: 4 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 2 {
		name := fmt.Sprintf("long%d", i)
		prod := client(t, ns[2].addr(), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(name),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second),
			kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
			kgo.MetadataMinAge(20*time.Millisecond)) // a refused produce refreshes metadata first
		w.runTransactions(t, ctx, &wg, prod, name, 3) // on partitions 0, 1, 0
		time.Sleep(6 * time.Second)
	}
	movePartition(t, ns[3].addr(), topic, 0, away)
	began := time.Now()
	waitMoved(t, ns, topic, 0, away)
	t.Logf("moved in %v", time.Since(began).Round(100*time.Millisecond))
	w.waitCommits(t, 3, "after the move")
	stop()
	wg.Wait()
	w.checkReadCommitted(t, ns[6].addr(), topic)
	t.Logf("%d records committed, %d aborted", len(w.committed), len(w.aborted))
}

// TestClusterAutoBalance: with Cluster.AutoBalance, groups that own two
// partitions each are not balanced when both of g1's take every write:
// the balancer, weighing bytes and append rates as well as counts, moves
// one of them to g2 (and one of g2's idle ones back), one move at a time,
// while the writes go on; every acknowledged record is read back.
func TestClusterAutoBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t, func(c *config.Cluster) { c.AutoBalance = true })
	const topic = "hot"
	cl := client(t, ns[1].addr())
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p := range int32(4) {
		replicas := []int32{1, 2, 3}
		if p >= 2 {
			replicas = []int32{4, 5, 6}
		}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: p, Replicas: replicas})
	}
	req.Topics = append(req.Topics, rt)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		if err == nil && len(resp.Topics) == 1 {
			if e := kerr.ErrorForCode(resp.Topics[0].ErrorCode); e == nil || errors.Is(e, kerr.TopicAlreadyExists) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s over g1 and g2: %v", topic, err)
		}
	}
	inG2 := func() (hot, all int) {
		for p, l := range ownersOf(t, ns[4].addr(), topic, 4) {
			if l >= 4 {
				all++
				if p < 2 {
					hot++
				}
			}
		}
		return hot, all
	}
	if hot, all := inG2(); hot != 0 || all != 2 {
		t.Fatalf("placed with %d hot partitions and %d in all in g2, want 0 and 2", hot, all)
	}
	// Writes to partitions 0 and 1 only, 4 KiB a record, as fast as
	// acks=all lets one producer go.
	prod := client(t, ns[2].addr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var acked []string
	var failed error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pad := strings.Repeat("x", 4096)
		for i := 0; ctx.Err() == nil; i++ {
			v := fmt.Sprintf("hot-%06d", i)
			err := prod.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(v + pad)}).FirstErr()
			mu.Lock()
			if err == nil {
				acked = append(acked, v)
			} else if ctx.Err() == nil {
				failed = err
			}
			mu.Unlock()
			if failed != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		hot, all := inG2()
		if hot == 1 && all == 2 && moves(t, ns[1].addr()) == 0 {
			break
		}
		mu.Lock()
		err := failed
		mu.Unlock()
		if err != nil {
			t.Fatalf("producing while the balancer moved partitions: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("g2 owns %d of the two hot partitions and %d in all: the automatic balance did not even out the load", hot, all)
		}
	}
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 100 {
		t.Fatalf("only %d records acknowledged while balancing", len(acked))
	}
	missing := map[string]bool{}
	for _, v := range acked {
		missing[v] = true
	}
	cons := client(t, ns[5].addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(missing) > 0 {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("%d of %d acknowledged records not read back after the moves", len(missing), len(acked))
		}
		fs.EachRecord(func(r *kgo.Record) { delete(missing, string(r.Value[:min(len(r.Value), 10)])) })
	}
}

// coordinatorHome waits until Metadata names a leader for the partition
// of the coordinators' topic name that holds key and returns it, its
// leader and the topic's partition count.
func coordinatorHome(t *testing.T, seed, name, key string) (part, leader int32, n int) {
	t.Helper()
	adm := kadm.NewClient(client(t, seed))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		td, err := adm.ListTopicsWithInternal(context.Background(), name)
		if err == nil && td[name].Err == nil && len(td[name].Partitions) > 0 {
			n = len(td[name].Partitions)
			part = coordinator.PartitionFor(key, n)
			if l := td[name].Partitions[part].Leader; l >= 0 {
				return part, l, n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader for %s's partition of %s: %v", key, name, err)
		}
	}
}

// waitMoved waits until the partition's leader is in to's group and no
// move is listed.
func waitMoved(t *testing.T, ns map[int]*node, topic string, part int32, to []int32) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		l, _ := partitionLeader(t, ns[5].addr(), topic, part)
		if (l >= 4) == (to[0] >= 4) && l >= 0 && moves(t, ns[1].addr()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d not moved to %v: leader %d", topic, part, to, l)
		}
	}
}

// TestClusterMoveCoordinators: the partitions of __consumer_offsets and
// __transaction_state that hold a consumer group and a transactional id
// move to the other group and back, while a transactional producer and
// the group's consumer run. The group's committed offsets are there at
// each new owner, the consumer goes on committing through it, and every
// committed transaction is read whole and once, no aborted one.
func TestClusterMoveCoordinators(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic, tid = "coord-moving", "coord-moving-tx"
	createTopic(t, ns[1].addr(), topic, 2)
	ownersOf(t, ns[1].addr(), topic, 2)

	// The transactional producer, from before the moves to the end.
	prod := client(t, ns[2].addr(), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(tid),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(10*time.Second))
	var w txnWriter
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	w.runTransactions(t, ctx, &wg, prod, "tx", 4)
	w.waitCommits(t, 40, "before the moves")

	// A consumer group whose partition of __consumer_offsets is the
	// one of a group with fixed commits: both move together.
	const fixed = "coord-moving-fixed"
	adm := kadm.NewClient(client(t, ns[3].addr()))
	want := kadm.Offsets{}
	want.AddOffset(topic, 0, 7, -1)
	want.AddOffset(topic, 1, 11, -1)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := adm.CommitOffsets(context.Background(), fixed, want)
		if err == nil && resp.Error() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit %s: %v %v", fixed, err, resp.Error())
		}
	}
	offPart, offLeader, offN := coordinatorHome(t, ns[1].addr(), "__consumer_offsets", fixed)
	stPart, stLeader, _ := coordinatorHome(t, ns[1].addr(), "__transaction_state", tid)
	consumerGroup := ""
	for i := 0; consumerGroup == ""; i++ {
		if g := fmt.Sprintf("coord-moving-cg-%d", i); coordinator.PartitionFor(g, offN) == offPart {
			consumerGroup = g
		}
	}
	cons := client(t, ns[6].addr(), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(consumerGroup),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.AutoCommitInterval(200*time.Millisecond))
	consumed := map[string]int{}
	var cmu sync.Mutex
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			cmu.Lock()
			fs.EachRecord(func(r *kgo.Record) { consumed[string(r.Value)]++ })
			cmu.Unlock()
		}
	})

	g1, g2 := []int32{1, 2, 3}, []int32{4, 5, 6}
	other := func(leader int32) []int32 {
		if leader >= 4 {
			return g1
		}
		return g2
	}
	offTo, stTo := other(offLeader), other(stLeader)
	for round := range 2 {
		movePartition(t, ns[3].addr(), "__consumer_offsets", offPart, offTo)
		movePartition(t, ns[3].addr(), "__transaction_state", stPart, stTo)
		waitMoved(t, ns, "__consumer_offsets", offPart, offTo)
		waitMoved(t, ns, "__transaction_state", stPart, stTo)
		w.waitCommits(t, 40, fmt.Sprintf("after move %d", round+1))
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got, err := adm.FetchOffsets(context.Background(), fixed)
			o0, _ := got.Lookup(topic, 0)
			o1, _ := got.Lookup(topic, 1)
			if err == nil && got.Error() == nil && o0.At == 7 && o1.At == 11 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("move %d: %s's offsets at the new owner: %v %v %+v %+v", round+1, fixed, err, got.Error(), o0, o1)
			}
		}
		offTo, stTo = other(offTo[0]), other(stTo[0])
	}
	stop()
	wg.Wait()

	// The consumer group committed through the moves: its offsets at the
	// final owner are past the start.
	got, err := adm.FetchOffsets(context.Background(), consumerGroup)
	if err != nil || got.Error() != nil {
		t.Fatalf("fetch %s's offsets: %v %v", consumerGroup, err, got.Error())
	}
	var sum int64
	got.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum <= 0 {
		t.Fatalf("%s committed nothing through the moves: %+v", consumerGroup, got)
	}

	w.checkReadCommitted(t, ns[4].addr(), topic)
	cmu.Lock()
	t.Logf("%d records committed, %d aborted, the group read %d distinct, committed offsets summing to %d, across two moves of each coordinator's partition",
		len(w.committed), len(w.aborted), len(consumed), sum)
	cmu.Unlock()
}

// TestClusterDrainGroup: `moonmq cluster drain g2` moves every partition
// of g2, the coordinators' included, to g1 while a producer writes; g2
// then takes no new partition and no move, its brokers are stopped, and
// the cluster goes on with everything acknowledged readable once, the
// committed offsets and the transactional id still served.
func TestClusterDrainGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t, func(c *config.Cluster) { c.CoordinatorPartitions = 4 })
	const topic, group, tid = "draining", "drain-g", "drain-tx"
	createTopic(t, ns[1].addr(), topic, 4)
	ownersOf(t, ns[1].addr(), topic, 4)

	adm := kadm.NewClient(client(t, ns[1].addr()))
	offs := kadm.Offsets{}
	offs.AddOffset(topic, 0, 3, -1)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := adm.CommitOffsets(context.Background(), group, offs)
		if err == nil && resp.Error() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit: %v %v", err, resp.Error())
		}
	}
	txp := client(t, ns[2].addr(), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(tid))
	txn := func(v string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txp.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("transactional produce %s: %v", v, err)
		}
		if err := txp.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit %s: %v", v, err)
		}
	}
	txn("tx-before")

	var mu sync.Mutex
	acked := map[string]bool{}
	failed := 0
	prod := client(t, ns[1].addr(), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			v := fmt.Sprintf("r%d", i)
			err := prod.ProduceSync(context.Background(), &kgo.Record{Value: []byte(v)}).FirstErr()
			mu.Lock()
			if err == nil {
				acked[v] = true
			} else {
				failed++
			}
			mu.Unlock()
		}
	})
	waitAcks := func(n int) {
		t.Helper()
		mu.Lock()
		before := len(acked)
		mu.Unlock()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := len(acked)
			mu.Unlock()
			if got >= before+n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d acknowledged, %d before", got, before)
			}
		}
	}
	waitAcks(100)

	var out, errOut bytes.Buffer
	if code := cli.Cluster(context.Background(), []string{"drain", "g2", "--bootstrap", ns[3].addr()}, &out, &errOut); code != 0 {
		t.Fatalf("moonmq cluster drain g2: %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "drained: g2 owns no partition") {
		t.Fatalf("drain said:\n%s%s", out.String(), errOut.String())
	}
	waitAcks(50)

	// Nothing is g2's, and nothing new goes there.
	md, err := adm.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, td := range md.Topics {
		for _, p := range td.Partitions {
			if p.Leader >= 4 {
				t.Fatalf("%s/%d is still g2's (leader %d) after the drain", td.Topic, p.Partition, p.Leader)
			}
		}
	}
	createTopic(t, ns[1].addr(), "after-drain", 3)
	for p, l := range ownersOf(t, ns[1].addr(), "after-drain", 3) {
		if l >= 4 {
			t.Fatalf("after-drain/%d placed on the draining g2 (leader %d)", p, l)
		}
	}
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: topic,
		Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0, Replicas: []int32{4, 5, 6}}}}}
	if resp, err := req.RequestWith(context.Background(), client(t, ns[1].addr())); err != nil || resp.ErrorCode == 0 && resp.Topics[0].Partitions[0].ErrorCode == 0 {
		t.Fatalf("a move onto the draining g2 was not refused: %v %+v", err, resp)
	}

	// Remove g2: its brokers stop; the cluster goes on.
	for _, id := range []int{4, 5, 6} {
		ns[id].stop()
	}
	waitAcks(100)
	txn("tx-after")
	stop()
	wg.Wait()

	got, err := adm.FetchOffsets(context.Background(), group)
	if o, _ := got.Lookup(topic, 0); err != nil || got.Error() != nil || o.At != 3 {
		t.Fatalf("%s's committed offset after the drain: %v %v %+v", group, err, got.Error(), o)
	}
	rd := client(t, ns[2].addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	mu.Lock()
	defer mu.Unlock()
	want := len(acked) + 2
	seen := map[string]int{}
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for n := 0; n < want; {
		fs := rd.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d records after the drain", n, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			seen[v]++
			if (acked[v] || v == "tx-before" || v == "tx-after") && seen[v] == 1 {
				n++
			}
		})
	}
	for v, n := range seen {
		if n > 1 {
			t.Fatalf("%s read %d times", v, n)
		}
	}
	t.Logf("%d acknowledged (%d failed) across the drain and the removal of g2:\n%s", len(acked), failed, out.String())
}

// TestClusterSpreadsLeadership: brokers 1 and 4, 2 and 5, 3 and 6 share
// machines, and both groups start led from the first. With
// Cluster.AutoBalance one group's leadership moves to a member on another
// machine, while an idempotent producer writes to both groups: every
// acknowledged record is read back once.
func TestClusterSpreadsLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	machine := func(id int) string { return fmt.Sprintf("m%d", (id-1)%3) }
	ns := twoGroups(t, func(c *config.Cluster) { c.AutoBalance, c.Machine = true, machine(c.BrokerId) })
	const topic = "leaders"
	createTopic(t, ns[1].addr(), topic, 2)
	ownersOf(t, ns[1].addr(), topic, 2)
	leaderOf := func(n *node) int {
		l, _ := status(t, n)["leader"].(float64)
		return int(l)
	}
	if l1, l2 := leaderOf(ns[2]), leaderOf(ns[5]); machine(l1) != machine(l2) {
		t.Logf("the groups started led from different machines (%d, %d)", l1, l2)
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	prod := client(t, ns[3].addr(), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			v := fmt.Sprintf("r%d", i)
			if prod.ProduceSync(context.Background(), &kgo.Record{Value: []byte(v)}).FirstErr() == nil {
				mu.Lock()
				acked[v] = true
				mu.Unlock()
			}
		}
	})
	var l1, l2 int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		l1, l2 = leaderOf(ns[2]), leaderOf(ns[5])
		if l1 > 0 && l2 > 0 && machine(l1) != machine(l2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the groups' leaders %d and %d still share machine %s", l1, l2, machine(l1))
		}
	}
	// The transfers go to the groups' preferred leaders, the replicas
	// Metadata lists first (which `moonmq cluster balance` elects too).
	adm := kadm.NewClient(client(t, ns[1].addr()))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		td, err := adm.ListTopics(context.Background(), topic)
		preferred := err == nil && len(td[topic].Partitions) == 2
		for _, p := range td[topic].Partitions {
			preferred = preferred && p.Leader == p.Replicas[0]
		}
		if preferred {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders are not the preferred replicas: %v %v", err, td[topic].Partitions)
		}
	}
	time.Sleep(2 * time.Second) // writes after the transfer
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	rd := client(t, ns[6].addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[string]int{}
	for n := 0; n < len(acked); {
		fs := rd.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d acknowledged records", n, len(acked))
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			seen[v]++
			if acked[v] && seen[v] == 1 {
				n++
			}
		})
	}
	for v, n := range seen {
		if n > 1 {
			t.Fatalf("%s read %d times", v, n)
		}
	}
	t.Logf("leaders %d (%s) and %d (%s); %d acknowledged across the transfer", l1, machine(l1), l2, machine(l2), len(acked))
}

// TestClusterBalanceElectsPreferredLeaders: both groups start led from
// one machine; Metadata lists each group's preferred leader first (one
// per machine), and `moonmq cluster balance` hands g2's leadership to its
// preferred replica with ElectLeaders, so the leaders end on two
// machines. Asked again, preferred or unclean, ElectLeaders has nothing
// to do; the records written before are all there.
func TestClusterBalanceElectsPreferredLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	machine := func(id int32) string { return fmt.Sprintf("m%d", (id-1)%3) }
	ns := twoGroups(t, func(c *config.Cluster) { c.Machine = machine(int32(c.BrokerId)) })
	const topic = "elect"
	createTopic(t, ns[1].addr(), topic, 2)
	leaders := ownersOf(t, ns[1].addr(), topic, 2)
	if machine(leaders[0]) != machine(leaders[1]) {
		t.Fatalf("the groups started led from different machines: %v", leaders)
	}
	var values []string
	for i := range 50 {
		values = append(values, fmt.Sprintf("e%03d", i))
	}
	produceValues(t, ns[2].addr(), topic, values)

	adm := kadm.NewClient(client(t, ns[3].addr()))
	preferred := map[int32]int32{} // partition -> Metadata's first replica
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		td, err := adm.ListTopics(context.Background(), topic)
		if err == nil && len(td[topic].Partitions) == 2 {
			for p, pd := range td[topic].Partitions {
				preferred[p] = pd.Replicas[0]
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metadata of %s: %v", topic, err)
		}
	}
	if machine(preferred[0]) == machine(preferred[1]) {
		t.Fatalf("preferred leaders %v share a machine", preferred)
	}

	var out, errOut bytes.Buffer
	code := cli.Cluster(context.Background(), []string{"balance", "--sample", "0", "--bootstrap", ns[1].addr()}, &out, &errOut)
	t.Logf("moonmq cluster balance: exit %d\n%s%s", code, out.String(), errOut.String())
	if code != 0 || !strings.Contains(out.String(), "its preferred replica") {
		t.Fatalf("balance exit %d, no leadership moved", code)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		leaders = ownersOf(t, ns[6].addr(), topic, 2)
		if leaders[0] == preferred[0] && leaders[1] == preferred[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders %v, want the preferred %v", leaders, preferred)
		}
	}
	res, err := adm.ElectLeaders(context.Background(), kadm.ElectPreferredReplica, nil)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if r := res[topic][p]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
			t.Fatalf("ElectLeaders again on %s/%d: %v, want ELECTION_NOT_NEEDED", topic, p, r.Err)
		}
	}
	res, err = adm.ElectLeaders(context.Background(), kadm.ElectLiveReplica, kadm.TopicsSet{topic: {0: {}}})
	if err != nil || !errors.Is(res[topic][0].Err, kerr.ElectionNotNeeded) {
		t.Fatalf("unclean election of a led partition: %v %v, want ELECTION_NOT_NEEDED", err, res[topic][0].Err)
	}
	readValues(t, ns[4].addr(), topic, len(values), nil)
}
