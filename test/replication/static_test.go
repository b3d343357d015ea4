// Package replication_test runs a static replication group (a leader and
// two followers) in process, on loopback, with real HTTP log shipping and
// real files, and drives it with franz-go.
package replication_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/app"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

const token = "secret"

// freePort returns a loopback port no other pick in this test binary got.
func freePort(t *testing.T) int { return freeport.Must(t) }

type node struct {
	id  int
	cfg config.Server
	in  *app.Instance
}

func (n *node) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.cfg.Port) }

func (n *node) replAddr() string {
	return fmt.Sprintf("127.0.0.1:%d", n.cfg.Replication.ReplicatePort)
}

type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// group builds a leader (id 1) and two followers (ids 2, 3).
func group(t *testing.T, lagMax int64) []*node {
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
			Token: token, AckTimeout: 1, LagMax: lagMax,
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
		if err := n.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range ns {
		n.start(t, tl)
	}
	t.Cleanup(func() {
		for i := len(ns) - 1; i >= 0; i-- { // followers first
			if ns[i].in != nil {
				ns[i].in.Close()
			}
		}
	})
	return ns
}

func (n *node) start(t *testing.T, tl *testLog) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", n.id)
	in, err := app.Start(n.cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	n.in = in
}

func (n *node) stop() {
	n.in.Close()
	n.in = nil
}

func client(t *testing.T, seed string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seed)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// status reads a replica's /replication/status.
func status(t *testing.T, n *node) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.replAddr()+"/replication/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("status %s: %v", body, err)
	}
	return out
}

// waitIdentical waits until every follower holds byte for byte the
// leader's copy of every partition of topic.
func waitIdentical(t *testing.T, ns []*node, topic string, parts int32) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		diff := ""
		for p := int32(0); p < parts && diff == ""; p++ {
			want, wantEnd, err := ns[0].in.Broker.ReadLog(topic, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range ns[1:] {
				got, gotEnd, err := f.in.Broker.ReadLog(topic, p)
				if err != nil || gotEnd != wantEnd || !bytes.Equal(got, want) {
					diff = fmt.Sprintf("replica %d partition %d: end %d, leader end %d (err %v)", f.id, p, gotEnd, wantEnd, err)
					break
				}
			}
		}
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("followers did not converge: " + diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func produceSync(t *testing.T, cl *kgo.Client, topic string, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("value-%d", i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func rawProduce(t *testing.T, topic string, partition int32, timeoutMs int32) *kmsg.ProduceRequest {
	t.Helper()
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1},
		[]recordbatch.Record{{Key: []byte("k"), Value: []byte("raw"), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, timeoutMs
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestStaticReplication(t *testing.T) {
	ns := group(t, 0)
	leader := ns[0]
	ctx := context.Background()
	const topic = "orders"

	cl := client(t, leader.addr(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	produceSync(t, cl, topic, 0, 300)
	waitIdentical(t, ns, topic, 3)

	t.Run("follower refuses clients", func(t *testing.T) {
		fc := client(t, ns[1].addr())
		md, err := kadm.NewClient(fc).Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 3 {
			t.Fatalf("brokers %v, want all three replicas", md.Brokers)
		}
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader != 1 || len(p.Replicas) != 3 {
				t.Fatalf("partition %d: leader %d replicas %v, want leader 1 and three replicas", p.Partition, p.Leader, p.Replicas)
			}
		}
		resp, err := fc.Broker(2).Request(ctx, rawProduce(t, topic, 0, 5000))
		if err != nil {
			t.Fatal(err)
		}
		pr := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if pr.ErrorCode != 6 || pr.CurrentLeader.LeaderID != 1 {
			t.Fatalf("produce to a follower: error %d, current leader %d; want 6 and 1", pr.ErrorCode, pr.CurrentLeader.LeaderID)
		}
		fr := kmsg.NewPtrFetchRequest()
		fr.Version = 11 // by name: franz-go fills topic ids otherwise
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
		fr.MaxBytes = 1 << 20
		resp, err = fc.Broker(3).Request(ctx, fr)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != 6 {
			t.Fatalf("fetch from a follower: error %d, want 6", code)
		}
		// A client that only knows a follower finds the leader.
		produceSync(t, client(t, ns[2].addr(), kgo.RecordPartitioner(kgo.ManualPartitioner())), topic, 300, 30)
	})

	t.Run("stopped follower blocks acks=all", func(t *testing.T) {
		stopped := ns[2]
		before, beforeEnd, _ := stopped.in.Broker.ReadLog(topic, 0)
		stopped.stop()
		start := time.Now()
		resp, err := cl.Broker(1).Request(ctx, rawProduce(t, topic, 0, 10000))
		if err != nil {
			t.Fatal(err)
		}
		code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
		if took := time.Since(start); code != 7 || took < 900*time.Millisecond || took > 5*time.Second {
			t.Fatalf("acks=all with a follower down: error %d after %v; want REQUEST_TIMED_OUT after AckTimeout (1s)", code, took)
		}
		stopped.start(t, &testLog{t: t, done: true})
		after, afterEnd, _ := stopped.in.Broker.ReadLog(topic, 0)
		if afterEnd < beforeEnd || !bytes.HasPrefix(after, before) || beforeEnd == 0 {
			t.Fatalf("restarted follower lost its log: end %d, was %d", afterEnd, beforeEnd)
		}
		produceSync(t, cl, topic, 330, 30)
		waitIdentical(t, ns, topic, 3)
		st := status(t, stopped)
		fol, _ := st["follower"].(map[string]any)
		if resets, _ := fol["resets"].(float64); resets != 0 {
			t.Fatalf("restarted follower discarded its log: %v", st)
		}
		if st["leader"].(float64) != 1 {
			t.Fatalf("status: %v", st)
		}
	})

	// Consumers (connected through a follower) read everything from the
	// leader: the high watermark covers what was acknowledged.
	cc := client(t, ns[1].addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	seen := 0
	for seen < 360 && cctx.Err() == nil {
		fs := cc.PollFetches(cctx)
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != "raw" {
				seen++
			}
		})
	}
	if seen != 360 {
		t.Fatalf("consumed %d records, want 360", seen)
	}
	// Transactions: data, markers and coordinator state are copied too.
	tc := client(t, ns[1].addr(), kgo.TransactionalID("tx-1"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := tc.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceSync(t, tc, topic, 360, 6)
	if err := tc.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitIdentical(t, ns, topic, 3)
	waitIdentical(t, ns, "__transaction_state", 1)
	// Admin listings ask every replica; followers answer empty lists.
	if _, err := adm.ListGroups(ctx); err != nil {
		t.Fatalf("list groups across the group: %v", err)
	}
	st := status(t, leader)
	if st["role"] != "leader" || st["epoch"].(float64) != 1 {
		t.Fatalf("leader status: %v", st)
	}
	// Internal topics are copied too.
	waitIdentical(t, ns, "__producer_ids", 1)
}

// With LagMax above a follower's lag, the follower counts towards the high
// watermark: records it does not hold yet stay invisible to consumers.
func TestStaticLagMaxHoldsHighWatermark(t *testing.T) {
	ns := group(t, 1000)
	ctx := context.Background()
	const topic = "lag"
	// franz-go stamps its configured acks on every produce request.
	cl := client(t, ns[0].addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produceSync(t, cl, topic, 0, 3)
	waitIdentical(t, ns, topic, 3)
	hw := func() int64 {
		offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(topic, 0)
		return o.Offset
	}
	deadline := time.Now().Add(5 * time.Second)
	for hw() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("high watermark %d, want 1", hw())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ns[2].stop()
	start := time.Now()
	resp, err := cl.Broker(1).Request(ctx, rawProduce(t, topic, 0, 5000))
	if err != nil || resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode != 0 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("acks=1 produce: %v %v after %v", err, resp, time.Since(start))
	}
	time.Sleep(300 * time.Millisecond)
	if got := hw(); got != 1 {
		t.Fatalf("high watermark %d while follower 3 (within LagMax) lacks the record, want 1", got)
	}
	ns[2].start(t, &testLog{t: t, done: true})
	deadline = time.Now().Add(10 * time.Second)
	for hw() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("high watermark %d after the follower returned, want 2", hw())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
