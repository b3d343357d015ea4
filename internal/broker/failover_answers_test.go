package broker

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// TestMirrorNamesDifferInRequestAndResponse: a follower's refusal must list
// every entry the request named, also where the request's list has another
// name than the response's (an empty list looks like success to clients).
func TestMirrorNamesDifferInRequestAndResponse(t *testing.T) {
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version = 4
	dt.TopicNames = []string{"a", "b"}
	dtr := dt.ResponseKind().(*kmsg.DeleteTopicsResponse)
	mirror(reflect.ValueOf(dt).Elem(), reflect.ValueOf(dtr).Elem(), errNotController)
	if len(dtr.Topics) != 2 || *dtr.Topics[1].Topic != "b" || dtr.Topics[1].ErrorCode != errNotController {
		t.Fatalf("DeleteTopics v4 refusal: %+v", dtr.Topics)
	}

	tx := kmsg.NewPtrDescribeTransactionsRequest()
	tx.TransactionalIDs = []string{"t1"}
	txr := tx.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	mirror(reflect.ValueOf(tx).Elem(), reflect.ValueOf(txr).Elem(), errNotLeaderOrFollower)
	if len(txr.TransactionStates) != 1 || txr.TransactionStates[0].TransactionalID != "t1" || txr.TransactionStates[0].ErrorCode != errNotLeaderOrFollower {
		t.Fatalf("DescribeTransactions refusal: %+v", txr.TransactionStates)
	}
}

// TestReady: /health/ready is true for a single node and a serving leader,
// and for a follower only while the leader counts it in the ISR.
func TestReady(t *testing.T) {
	if !(&Broker{}).Ready() {
		t.Fatal("a single node is not ready")
	}
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, Role: "follower", ClientAddress: "127.0.0.1:9093",
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}}}
	b := &Broker{cfg: cfg, nodeID: 2}
	b.repl = newReplica(b)
	b.repl.mu.Lock()
	b.repl.isr = []int32{1}
	b.repl.mu.Unlock()
	if b.Ready() {
		t.Fatal("a follower outside the ISR is ready")
	}
	b.repl.mu.Lock()
	b.repl.isr = []int32{1, 2}
	b.repl.mu.Unlock()
	if !b.Ready() {
		t.Fatal("a follower in the ISR is not ready")
	}
	b.repl.role.v.Store(int32(roleServing))
	if !b.Ready() {
		t.Fatal("a serving leader is not ready")
	}
}

// TestOffsetForLeaderEpochOlderEpochUnclamped: right after a failover the
// new leader's high watermark lags; the end of an older epoch must not be
// clamped to it (consumers then saw a false truncation and re-read records:
// found by the fault harness), while the current epoch's end is.
func TestOffsetForLeaderEpochOlderEpochUnclamped(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	b := &Broker{cfg: cfg, fs: vfs.Default, log: slog.Default(), nodeID: 1, topics: map[string]*topic{}}
	b.flush = newFlusher(b)
	tp := &topic{name: "t", id: newUUID(), dir: filepath.Join(dir, "t")}
	tp.settings = resolveSettings(&cfg, nil)
	p, err := b.openPartition(tp, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tp.partitions = []*partition.Partition{p}
	b.topics["t"] = tp
	for epoch := int32(1); epoch <= 2; epoch++ {
		for i := 0; i < 5; i++ {
			batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
			if _, err := p.Log().Append(batch, epoch); err != nil {
				t.Fatal(err)
			}
			if epoch == 1 && i == 2 {
				// The high watermark lags: it covers offsets 0-2 only,
				// below the end of epoch 1 (offset 5).
				if _, err := p.Log().Sync(); err != nil {
					t.Fatal(err)
				}
				p.Recommit()
			}
		}
	}
	b.epoch.Store(2)
	if hw := p.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d, want the lagging 3", hw)
	}
	ask := func(epoch int32) (int32, int64) {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version = 3
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = 2, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		out := b.handleOffsetForLeaderEpoch(req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
		if out.ErrorCode != 0 {
			t.Fatalf("epoch %d: error %d", epoch, out.ErrorCode)
		}
		return out.LeaderEpoch, out.EndOffset
	}
	if e, end := ask(1); e != 1 || end != 5 {
		t.Fatalf("end of the older epoch 1: epoch %d offset %d, want 1 and 5 (not clamped to the high watermark 3)", e, end)
	}
	if e, end := ask(2); e != 2 || end != 3 {
		t.Fatalf("end of the current epoch 2: epoch %d offset %d, want 2 and the high watermark 3", e, end)
	}
}

// TestWaitEndsWhenLeadershipEnds: an acks=all wait (and a coordinator's
// wait for its own write) on a replica that stopped leading ends with
// NOT_LEADER_OR_FOLLOWER (NOT_COORDINATOR for coordinators) as soon as
// stepDown wakes it, instead of waiting out its timeout for a high
// watermark that will not move again: EndTxn handlers held a stopping
// leader for their full 10 s.
func TestWaitEndsWhenLeadershipEnds(t *testing.T) {
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 1, Failover: config.Failover{Enabled: true}}
	b := &Broker{cfg: cfg, nodeID: 1, log: slog.New(slog.DiscardHandler)}
	b.repl = newReplica(b)
	b.repl.role.v.Store(int32(rolePromoting))
	p := committedPartition(t, b, 5)
	done := make(chan *kmsg.ProduceResponseTopicPartition)
	go func() {
		res := &kmsg.ProduceResponseTopicPartition{}
		b.waitAcked(t.Context(), []produceWait{{p: p, end: 10, result: res}}, 3*time.Second)
		done <- res
	}()
	b.repl.role.v.Store(int32(roleIdle)) // what stepDown does before it wakes everybody
	var res *kmsg.ProduceResponseTopicPartition
	for res == nil {
		p.Wake()
		select {
		case res = <-done:
		case <-time.After(10 * time.Millisecond):
		}
	}
	if res.ErrorCode != errNotLeaderOrFollower {
		t.Fatalf("acks=all wait after losing leadership answered %d, want NOT_LEADER_OR_FOLLOWER", res.ErrorCode)
	}
	if err := b.waitOwn(t.Context(), p, 10); !errors.Is(err, errStoppedLeading) || coordinatorCode(err) != errNotCoordinator {
		t.Fatalf("coordinator wait after losing leadership: %v (code %d), want NOT_COORDINATOR", err, coordinatorCode(err))
	}
	// An internal write refused before its append because the replica
	// no longer serves (a commit that arrived as leadership ended) is
	// NOT_COORDINATOR too, not a storage error.
	if c := coordinatorCode(errNotServing); c != errNotCoordinator {
		t.Fatalf("coordinator write refused for not serving: code %d, want NOT_COORDINATOR", c)
	}
}

// TestWaitNeverEndsInSuccessUnacknowledged: an acks=all wait that ends
// because its connection (or the broker) is closing must not answer
// success for records the high watermark does not cover: a stopping
// leader's answers could still reach clients before the sockets closed,
// and the fault harness saw such "acknowledged" records lost (seed 30).
func TestWaitNeverEndsInSuccessUnacknowledged(t *testing.T) {
	for _, failover := range []bool{false, true} {
		cfg := config.Default()
		b := &Broker{cfg: cfg, nodeID: 1, log: slog.New(slog.DiscardHandler)}
		wait := b.waitAcked
		if failover {
			b.cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 1, Failover: config.Failover{Enabled: true}}
			b.repl = newReplica(b)
			b.repl.role.v.Store(int32(rolePromoting)) // still leading
		}
		p := committedPartition(t, b, 5)
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // the connection closed
		res := &kmsg.ProduceResponseTopicPartition{}
		wait(ctx, []produceWait{{p: p, end: 10, result: res}}, time.Minute)
		if res.ErrorCode == 0 {
			t.Fatalf("failover=%v: a wait cut short by its context answered success below the high watermark", failover)
		}
		// Covered: success.
		res = &kmsg.ProduceResponseTopicPartition{}
		wait(ctx, []produceWait{{p: p, end: 5, result: res}}, time.Minute)
		if res.ErrorCode != 0 {
			t.Fatalf("failover=%v: a covered write answered %d", failover, res.ErrorCode)
		}
	}
}

// committedPartition is a partition of b holding n records, all of them
// committed (its high watermark is n), under b's policy and fence.
func committedPartition(t *testing.T, b *Broker, n int) *partition.Partition {
	t.Helper()
	l, err := storage.Open(t.TempDir(), storage.Options{RetentionMs: -1, RetentionBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte("x")}})
		if _, err := l.Append(batch, 0); err != nil {
			t.Fatal(err)
		}
	}
	p, err := partition.New(partition.Config{Topic: "t", Log: l, Policy: b.commitPolicy(), Fence: brokerFence{b, &placement{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if p.HighWatermark() != int64(n) {
		t.Fatalf("test partition's high watermark %d, want %d", p.HighWatermark(), n)
	}
	return p
}

// TestCoordinatorAnswersWhileNotServing: a replica that does not serve
// clients answers coordinator requests NOT_COORDINATOR (clients look the
// coordinator up again), and a leader still rebuilding its state
// COORDINATOR_LOAD_IN_PROGRESS (clients retry it), as Kafka's coordinators
// answer; a non-transactional InitProducerId is not a coordinator request.
func TestCoordinatorAnswersWhileNotServing(t *testing.T) {
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, Failover: config.Failover{Enabled: true},
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}}}
	b := &Broker{cfg: cfg, nodeID: 2, log: slog.New(slog.DiscardHandler)}
	b.repl = newReplica(b)
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "g"
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0}}}}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID = "tx"
	codeOf := func(req kmsg.Request) int16 {
		resp, refused := b.refuseOnFollower(protocol.Request{Body: req})
		if !refused {
			t.Fatalf("%s served on a follower", kmsg.NameForKey(req.Key()))
		}
		switch r := resp.(type) {
		case *kmsg.OffsetCommitResponse:
			return r.Topics[0].Partitions[0].ErrorCode
		case *kmsg.EndTxnResponse:
			return r.ErrorCode
		case *kmsg.InitProducerIDResponse:
			return r.ErrorCode
		}
		t.Fatalf("unexpected response %T", resp)
		return 0
	}
	for _, req := range []kmsg.Request{commit, end} {
		if c := codeOf(req); c != errNotCoordinator {
			t.Fatalf("follower: %s answered %d, want NOT_COORDINATOR", kmsg.NameForKey(req.Key()), c)
		}
	}
	b.repl.role.v.Store(int32(rolePromoting)) // promoted, rebuilding: not serving yet
	for _, req := range []kmsg.Request{commit, end} {
		if c := codeOf(req); c != errCoordinatorLoadProgress {
			t.Fatalf("rebuilding leader: %s answered %d, want COORDINATOR_LOAD_IN_PROGRESS", kmsg.NameForKey(req.Key()), c)
		}
	}
	if c := codeOf(kmsg.NewPtrInitProducerIDRequest()); c == errNotCoordinator || c == errCoordinatorLoadProgress {
		t.Fatalf("a non-transactional InitProducerId answered as a coordinator request (%d)", c)
	}
}

// TestBrokerListNamesLiveReplicas: the leader lists itself and the
// followers that fetched within liveWindow, not a dead one (the Java
// admin client's listGroups asks every listed broker and waited out its
// timeout on a dead replica).
func TestBrokerListNamesLiveReplicas(t *testing.T) {
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 1, Role: "leader", ClientAddress: "127.0.0.1:9092",
		Peers: []config.Peer{{Id: 2, Address: "127.0.0.1:9196", ClientAddress: "127.0.0.1:9093"},
			{Id: 3, Address: "127.0.0.1:9197", ClientAddress: "127.0.0.1:9094"}}}
	b := &Broker{cfg: cfg, nodeID: 1, log: slog.New(slog.DiscardHandler)}
	b.repl = newReplica(b)
	r := b.repl
	now := time.Now()
	r.mu.Lock()
	r.started = now.Add(-time.Minute)
	r.seen[2] = now
	r.seen[3] = now.Add(-max(liveWindow, r.isrLag()) - time.Second)
	r.mu.Unlock()
	var ids []int32
	for _, e := range r.endpoints() {
		ids = append(ids, e.id)
	}
	if !reflect.DeepEqual(ids, []int32{1, 2}) {
		t.Fatalf("broker list %v, want [1 2] (replica 3 last fetched over %v ago)", ids, max(liveWindow, r.isrLag()))
	}
	r.mu.Lock()
	r.started = now // just began leading: nobody has had time to fetch
	r.mu.Unlock()
	if n := len(r.endpoints()); n != 3 {
		t.Fatalf("a leader that just started lists %d brokers, want all 3", n)
	}
}
