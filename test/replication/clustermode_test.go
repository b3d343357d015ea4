package replication_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/moonmq/moonmq/internal/cli"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/recordbatch"
	mstatus "github.com/moonmq/moonmq/internal/status"
)

// twoGroups starts a cluster of two failover groups in process: g1 of
// brokers 1-3 and g2 of brokers 4-6, with the metadata log on brokers 1, 2
// and 4, each broker's Cluster block passed through opts. It returns the
// brokers by id.
func twoGroups(t *testing.T, opts ...func(*config.Cluster)) map[int]*node {
	tl := &testLog{t: t}
	t.Cleanup(func() { tl.mu.Lock(); tl.done = true; tl.mu.Unlock() })
	ns := map[int]*node{}
	groups := map[string][]int{"g1": {1, 2, 3}, "g2": {4, 5, 6}}
	for _, ids := range groups {
		for _, id := range ids {
			cfg := config.Default()
			cfg.Port = freePort(t)
			cfg.Host = "127.0.0.1"
			cfg.MetricsPort = freePort(t)
			cfg.MetricsHost = "127.0.0.1"
			cfg.DataDir = t.TempDir()
			cfg.Replication = &config.Replication{
				Enabled: true, ReplicaId: id, Role: "follower",
				ReplicateHost: "127.0.0.1", ReplicatePort: freePort(t),
				Token: token, AckTimeout: 5, IsrLagSeconds: 5,
				Failover: config.Failover{Enabled: true},
			}
			if id == ids[0] {
				cfg.Replication.Role = "leader"
			}
			ns[id] = &node{id: id, cfg: cfg}
		}
	}
	var voters []config.MetadataVoter
	for _, id := range []int{1, 2, 4} {
		voters = append(voters, config.MetadataVoter{Id: id, Address: ns[id].replAddr()})
	}
	for group, ids := range groups {
		for _, id := range ids {
			n := ns[id]
			r := n.cfg.Replication
			r.ClientAddress = n.addr()
			for _, o := range ids {
				if o != id {
					r.Peers = append(r.Peers, config.Peer{Id: o, Address: ns[o].replAddr(), ClientAddress: ns[o].addr()})
				}
			}
			n.cfg.Cluster = &config.Cluster{Enabled: true, Experimental: true, ClusterId: "test-cluster",
				BrokerId: id, GroupId: group, MetadataVoters: voters}
			for _, o := range opts {
				o(n.cfg.Cluster)
			}
			if err := n.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for id := 1; id <= 6; id++ {
		ns[id].start(t, tl)
	}
	t.Cleanup(func() {
		for _, n := range ns {
			if n.in != nil {
				n.in.Close()
			}
		}
	})
	// Both groups registered and serving before a test creates anything:
	// placement deals partitions over the live groups only, so a topic
	// created while g2 was still starting would go wholly to g1.
	adm := kadm.NewClient(client(t, ns[1].addr()))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		bs, err := adm.ListBrokers(ctx)
		cancel()
		if err == nil && len(bs) == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker 1 lists %d of 6 brokers: %v", len(bs), err)
		}
	}
	return ns
}

// createTopic creates topic with partitions through the broker at seed,
// retrying while the groups elect their leaders and register (creation
// fails with a retriable error until then).
func createTopic(t *testing.T, seed, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(client(t, seed))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		resp, err := adm.CreateTopic(context.Background(), partitions, -1, nil, topic)
		if err == nil && (resp.Err == nil || errors.Is(resp.Err, kerr.TopicAlreadyExists)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic %s through %s: %v %v", topic, seed, err, resp.Err)
		}
	}
}

// ownersOf waits until Metadata from the broker at seed names a leader for
// every partition of topic and returns each partition's leader.
func ownersOf(t *testing.T, seed, topic string, partitions int) []int32 {
	t.Helper()
	adm := kadm.NewClient(client(t, seed))
	deadline := time.Now().Add(60 * time.Second)
	for {
		td, err := adm.ListTopics(context.Background(), topic)
		if err == nil && td[topic].Err == nil && len(td[topic].Partitions) == partitions {
			leaders := make([]int32, partitions)
			ok := true
			for _, p := range td[topic].Partitions {
				leaders[p.Partition] = p.Leader
				ok = ok && p.Leader >= 0 && p.Err == nil
			}
			if ok {
				return leaders
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s through %s: no leader for every partition: %v %+v", topic, seed, err, td)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterTwoGroupsSplitATopic: a topic created through any broker is
// split between the two groups; Metadata from any broker lists all six
// brokers and names, for each partition, the leader of the group owning
// it; a producer bootstrapped on one broker writes every partition, and a
// consumer bootstrapped on a broker of the other group reads them all back
// with a consumer group whose coordinator lives in one of the groups.
func TestClusterTwoGroupsSplitATopic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	const topic, parts = "split", 4
	createTopic(t, ns[5].addr(), topic, parts)

	leaders := ownersOf(t, ns[3].addr(), topic, parts)
	inGroup := func(id int32, ids ...int32) bool { return slices.Contains(ids, id) }
	var g1, g2 int
	for _, l := range leaders {
		switch {
		case inGroup(l, 1, 2, 3):
			g1++
		case inGroup(l, 4, 5, 6):
			g2++
		default:
			t.Fatalf("leader %d of a partition is no broker", l)
		}
	}
	if g1 == 0 || g2 == 0 {
		t.Fatalf("partition leaders %v: the topic is not split between the groups", leaders)
	}

	// /stats and /metrics of a broker of each group name each
	// partition's owner group and its leader.
	statsOwners(t, ns[2], topic, leaders)
	statsOwners(t, ns[5], topic, leaders)

	// Every broker answers Metadata with all six brokers.
	for id := 1; id <= 6; id++ {
		md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, client(t, ns[id].addr()))
		if err != nil {
			t.Fatalf("metadata from broker %d: %v", id, err)
		}
		if len(md.Brokers) != 6 {
			deadline := time.Now().Add(30 * time.Second)
			for len(md.Brokers) != 6 && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				md, _ = kmsg.NewPtrMetadataRequest().RequestWith(ctx, client(t, ns[id].addr()))
			}
			if len(md.Brokers) != 6 {
				t.Fatalf("broker %d lists %d brokers, want 6: %+v", id, len(md.Brokers), md.Brokers)
			}
		}
		if md.ClusterID == nil || *md.ClusterID != "test-cluster" {
			t.Fatalf("broker %d names cluster %v", id, md.ClusterID)
		}
	}

	// A broker of the group that does not own a partition refuses a
	// produce to it and names the owner's leader (KIP-951).
	for p, l := range leaders {
		other := 1
		if inGroup(l, 1, 2, 3) {
			other = 4
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 10, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Records = oneBatch(t, []byte("refused"))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		cl := client(t, ns[other].addr())
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Broker(other).Request(ctx, req)
		if err != nil {
			t.Fatalf("produce to broker %d: %v", other, err)
		}
		pr := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if pr.ErrorCode != kerr.NotLeaderForPartition.Code || pr.CurrentLeader.LeaderID != l {
			t.Fatalf("produce of partition %d to broker %d: code %d leader %d, want NOT_LEADER_OR_FOLLOWER naming %d",
				p, other, pr.ErrorCode, pr.CurrentLeader.LeaderID, l)
		}
		brokers := resp.(*kmsg.ProduceResponse).Brokers
		if len(brokers) != 1 || brokers[0].NodeID != l || brokers[0].Port != int32(ns[int(l)].cfg.Port) {
			t.Fatalf("produce to broker %d: endpoints %+v, want broker %d's", other, brokers, l)
		}

		// A fetch of it is refused the same way by two brokers of that
		// group (a leader's and a follower's answers differ in code).
		tmd := kmsg.NewPtrMetadataRequest()
		tmd.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
		tmdr, err := tmd.RequestWith(ctx, cl)
		if err != nil || len(tmdr.Topics) != 1 {
			t.Fatalf("metadata of %s: %v", topic, err)
		}
		for _, asked := range []int{other, other + 1} {
			fr := kmsg.NewPtrFetchRequest()
			fr.Version, fr.ReplicaID, fr.MaxBytes = 16, -1, 1<<20
			ft := kmsg.NewFetchRequestTopic()
			ft.TopicID = tmdr.Topics[0].TopicID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = int32(p), -1, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
			fr.Topics = append(fr.Topics, ft)
			fcl := client(t, ns[asked].addr())
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, fcl); err != nil {
				t.Fatal(err)
			}
			fresp, err := fcl.Broker(asked).Request(ctx, fr)
			if err != nil {
				t.Fatalf("fetch from broker %d: %v", asked, err)
			}
			f := fresp.(*kmsg.FetchResponse)
			fpr := f.Topics[0].Partitions[0]
			if fpr.ErrorCode != kerr.NotLeaderForPartition.Code || fpr.CurrentLeader.LeaderID != l ||
				len(f.Brokers) != 1 || f.Brokers[0].NodeID != l {
				t.Fatalf("fetch of partition %d from broker %d: code %d leader %d endpoints %+v, want NOT_LEADER_OR_FOLLOWER naming %d",
					p, asked, fpr.ErrorCode, fpr.CurrentLeader.LeaderID, f.Brokers, l)
			}
		}
		break
	}

	// moonmq cluster status shows both groups and each partition's owner.
	var out, errOut bytes.Buffer
	if code := cli.Cluster(ctx, []string{"status", "--bootstrap", ns[6].addr()}, &out, &errOut); code != 0 {
		t.Fatalf("moonmq cluster status: exit %d: %s", code, errOut.String())
	}
	status := out.String()
	for _, want := range []string{"Cluster: test-cluster ", "Brokers: 6 Groups: 2", "Group: g1 Leader: ", "Group: g2 Leader: "} {
		if !strings.Contains(status, want) {
			t.Fatalf("moonmq cluster status lacks %q:\n%s", want, status)
		}
	}
	for p, l := range leaders {
		g := "g1"
		if l >= 4 {
			g = "g2"
		}
		if want := fmt.Sprintf("Partition: %s/%d Group: %s Leader: %d ", topic, p, g, l); !strings.Contains(status, want) {
			t.Fatalf("moonmq cluster status lacks %q:\n%s", want, status)
		}
	}
	// Every broker answered DescribeLogDirs: each partition's lag names
	// its group's two other brokers, in bytes.
	if lags := regexp.MustCompile(`(?m) Lag: \d+=\d+,\d+=\d+$`).FindAllString(status, -1); len(lags) != len(leaders) {
		t.Fatalf("moonmq cluster status: %d partition lines with a lag for both other brokers, want %d:\n%s", len(lags), len(leaders), status)
	}

	// moonmq topic describe names each partition's owner group too.
	out.Reset()
	if code := cli.Topic(ctx, []string{"describe", "--bootstrap", ns[2].addr(), topic}, &out, &errOut); code != 0 {
		t.Fatalf("moonmq topic describe: exit %d: %s", code, errOut.String())
	}
	for p, l := range leaders {
		g := "g1"
		if l >= 4 {
			g = "g2"
		}
		if want := fmt.Sprintf("Partition: %d Group: %s Leader: %d ", p, g, l); !strings.Contains(out.String(), want) {
			t.Fatalf("moonmq topic describe lacks %q:\n%s", want, out.String())
		}
	}

	// A producer that knows only broker 3 writes every partition.
	const n = 400
	prod := client(t, ns[3].addr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
	}
	if err := prod.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce through broker 3: %v", err)
	}
	perPart := map[int32]int{}
	for _, r := range recs {
		perPart[r.Partition]++
	}
	if len(perPart) != parts {
		t.Fatalf("records went to partitions %v, want all %d", perPart, parts)
	}

	// A consumer group bootstrapped on broker 6 reads everything.
	cons := client(t, ns[6].addr(), kgo.ConsumeTopics(topic), kgo.ConsumerGroup("readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	seen := map[string]bool{}
	cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
	defer ccancel()
	for len(seen) < n {
		fs := cons.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("consumed %d of %d records", len(seen), n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if err := cons.CommitUncommittedOffsets(cctx); err != nil {
		t.Fatalf("commit through the group coordinator: %v", err)
	}
	offs, err := kadm.NewClient(client(t, ns[2].addr())).FetchOffsets(cctx, "readers")
	if err != nil {
		t.Fatalf("fetch the group's offsets through broker 2: %v", err)
	}
	var committed int64
	offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
	if committed != n {
		t.Fatalf("the group committed %d records in all, want %d: %+v", committed, n, offs)
	}

	// Admin changes through one group are seen through the other.
	adm1 := kadm.NewClient(client(t, ns[1].addr()))
	if _, err := adm1.CreatePartitions(cctx, 2, topic); err != nil {
		t.Fatalf("create partitions through broker 1: %v", err)
	}
	ownersOf(t, ns[5].addr(), topic, parts+2)
	if _, err := adm1.AlterTopicConfigs(cctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("3600000")}}, topic); err != nil {
		t.Fatalf("alter configs through broker 1: %v", err)
	}
	adm6 := kadm.NewClient(client(t, ns[6].addr()))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rc, err := adm6.DescribeTopicConfigs(cctx, topic)
		if err == nil {
			if c, err := rc.On(topic, nil); err == nil && hasConfig(c, "retention.ms", "3600000") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the config change through broker 1 is not seen through broker 6: %v %+v", err, rc)
		}
	}
	if _, err := adm1.DeleteTopics(cctx, topic); err != nil {
		t.Fatalf("delete topic through broker 1: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		td, err := adm6.ListTopics(cctx)
		if err == nil && !td.Has(topic) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker 6 still lists the deleted topic: %v", err)
		}
	}
}

// oneBatch is a record batch of one record.
func oneBatch(t *testing.T, value []byte) []byte {
	t.Helper()
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1},
		[]recordbatch.Record{{Value: value, Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(fmt.Errorf("encode a batch: %w", err))
	}
	return b
}

// TestClusterGroupFailsOverAlone: when the leader of one group stops, that
// group elects another and publishes it; every broker then names the new
// leader for that group's partitions, the other group's leader stays, and
// producing to every partition goes on with nothing acknowledged lost.
func TestClusterGroupFailsOverAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic, parts = "failover", 4
	createTopic(t, ns[2].addr(), topic, parts)
	before := ownersOf(t, ns[3].addr(), topic, parts)
	produce := func(seed string, from, n int) {
		t.Helper()
		var values []string
		for i := from; i < from+n; i++ {
			values = append(values, strconv.Itoa(i))
		}
		produceValues(t, seed, topic, values)
	}
	produce(ns[3].addr(), 0, 200)

	// Stop the leader of g2 (the group of broker 4, 5, 6).
	var g2Leader int32 = -1
	for _, l := range before {
		if l >= 4 {
			g2Leader = l
		}
	}
	if g2Leader < 0 {
		t.Fatalf("no partition of %s in g2: leaders %v", topic, before)
	}
	ns[int(g2Leader)].in.Close()
	ns[int(g2Leader)].in = nil

	// Every partition has a leader again, g2's is another broker, g1's is
	// the same.
	var after []int32
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		after = ownersOf(t, ns[1].addr(), topic, parts)
		moved := true
		for p := range after {
			if before[p] == g2Leader && (after[p] == g2Leader || after[p] < 4) {
				moved = false
			}
		}
		if moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders before %v, after %v: g2 did not fail over from %d", before, after, g2Leader)
		}
	}
	for p := range after {
		if before[p] < 4 && after[p] != before[p] {
			t.Fatalf("partition %d of g1 changed leader from %d to %d when g2's leader stopped", p, before[p], after[p])
		}
	}
	produce(ns[1].addr(), 200, 200)

	// Everything acknowledged is there, read through a broker of g1.
	readValues(t, ns[2].addr(), topic, 400, nil)
}

// TestClusterTransactionSpansGroups: a transaction over every partition of
// a topic split between two groups is all or nothing for read_committed
// readers: the coordinator's group writes the markers of the other
// group's partitions there, and that group checks the producer's first
// batch on each partition with the coordinator.
func TestClusterTransactionSpansGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	const topic, parts = "txn-split", 4
	createTopic(t, ns[5].addr(), topic, parts)
	leaders := ownersOf(t, ns[4].addr(), topic, parts)
	t.Logf("partition leaders %v", leaders)

	prod := client(t, ns[6].addr(), kgo.TransactionalID("spans-groups"), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	txn := func(name string, commit bool) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for p := range int32(parts) {
			for i := range 5 {
				r := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", name, p, i)}
				if err := prod.ProduceSync(tctx, r).FirstErr(); err != nil {
					t.Fatalf("%s: produce to partition %d (leader %d): %v", name, p, leaders[p], err)
				}
			}
		}
		if err := prod.EndTransaction(tctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("%s: end transaction (commit %v): %v", name, commit, err)
		}
	}
	txn("committed", true)
	txn("aborted", false)
	txn("committed2", true)

	// read_committed, through a broker of the other group than the
	// producer's: every committed record, no aborted one, and every
	// partition readable to its end (no transaction left open).
	cons := client(t, ns[1].addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ends, err := kadm.NewClient(cons).ListEndOffsets(tctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < 2*parts*5; {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d committed records (end offsets %v)", len(got), 2*parts*5, ends)
		}
		pctx, pcancel := context.WithTimeout(tctx, time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if strings.HasPrefix(v, "aborted") {
				t.Fatalf("read_committed read aborted record %s", v)
			}
			got[v] = true
		})
	}
	for p := range int32(parts) {
		for _, name := range []string{"committed", "committed2"} {
			for i := range 5 {
				if v := fmt.Sprintf("%s-%d-%d", name, p, i); !got[v] {
					t.Fatalf("committed record %s (partition %d, leader %d) not read", v, p, leaders[p])
				}
			}
		}
	}
	// The last stable offset of every partition reached its end: no
	// partition of either group holds an open transaction.
	lso := kmsg.NewPtrListOffsetsRequest()
	lso.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(parts) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	lso.Topics = append(lso.Topics, rt)
	shards := cons.RequestSharded(tctx, lso)
	for _, sh := range shards {
		if sh.Err != nil {
			t.Fatalf("ListOffsets read_committed: %v", sh.Err)
		}
		for _, tr := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, pr := range tr.Partitions {
				end, _ := ends.Lookup(topic, pr.Partition)
				if pr.ErrorCode != 0 || pr.Offset != end.Offset {
					t.Fatalf("partition %d: last stable offset %d (code %d), end %d: a transaction is left open", pr.Partition, pr.Offset, pr.ErrorCode, end.Offset)
				}
			}
		}
	}
}

// TestClusterTransactionAcrossFailovers: a transaction over both groups
// commits whole when the other group's leader stops before the commit
// (its markers wait for the new leader), and when the coordinator's group
// leader stops before the commit (the new coordinator finishes it).
func TestClusterTransactionAcrossFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	const topic, parts = "txn-failover", 4
	createTopic(t, ns[2].addr(), topic, parts)
	leaders := ownersOf(t, ns[3].addr(), topic, parts)
	// Seeds in both groups, so the client survives either leader's stop.
	seeds := []string{ns[2].addr(), ns[3].addr(), ns[5].addr(), ns[6].addr()}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("across-failovers"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	tctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey = 1, "across-failovers"
	fcr, err := fc.RequestWith(tctx, prod)
	if err != nil || fcr.ErrorCode != 0 {
		t.Fatalf("find the transaction coordinator: %v %d", err, fcr.ErrorCode)
	}
	coordGroup := func(id int32) int { return int(id-1) / 3 }
	cg := coordGroup(fcr.NodeID)
	t.Logf("partition leaders %v, transaction coordinator %d (group g%d)", leaders, fcr.NodeID, cg+1)

	produceAll := func(name string) {
		t.Helper()
		for p := range int32(parts) {
			r := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%s-%d", name, p)}
			if err := prod.ProduceSync(tctx, r).FirstErr(); err != nil {
				t.Fatalf("%s: produce to partition %d: %v", name, p, err)
			}
		}
	}
	leaderOf := func(g int) int {
		for _, l := range ownersOf(t, seeds[0], topic, parts) {
			if coordGroup(l) == g {
				return int(l)
			}
		}
		t.Fatalf("no partition led in group g%d", g+1)
		return 0
	}
	stop := func(id int) {
		t.Helper()
		for i, s := range seeds {
			if s == ns[id].addr() {
				seeds = append(seeds[:i:i], seeds[i+1:]...)
				break
			}
		}
		ns[id].in.Close()
		ns[id].in = nil
		t.Logf("stopped broker %d", id)
	}

	// The other group's leader stops before the commit.
	produceAll("first")
	stop(leaderOf(1 - cg))
	if err := prod.EndTransaction(tctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit with the other group failing over: %v", err)
	}

	// The coordinator's group leader stops before the commit.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceAll("second")
	stop(leaderOf(cg))
	if err := prod.EndTransaction(tctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit with the coordinator's group failing over: %v", err)
	}

	cons := client(t, seeds[0], kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]bool{}
	for deadline := time.Now().Add(60 * time.Second); len(got) < 2*parts; {
		if time.Now().After(deadline) {
			t.Fatalf("read_committed read %v, want both transactions on all %d partitions", got, parts)
		}
		pctx, pcancel := context.WithTimeout(tctx, time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
	}
}

// TestClusterTopicRecreatedWhileGroupDown: a topic deleted and created
// again under its name while a group has no leader is replaced in that
// group once it elects one. The new leader was a follower; its copy of
// the topic carries the metadata index its old leader's manifest gave
// it, which tells it that its own metadata copy has seen the topic go.
// Without that it cannot tell a re-created topic from one its copy has
// not caught up to, keeps the old one, and serves the old incarnation's
// records under the new one.
func TestClusterTopicRecreatedWhileGroupDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	const topic, parts = "recreated", 4
	produce := func(prefix string, n int) {
		t.Helper()
		var values []string
		for i := range n {
			values = append(values, fmt.Sprintf("%s-%d", prefix, i))
		}
		produceValues(t, ns[1].addr(), topic, values)
	}
	createTopic(t, ns[1].addr(), topic, parts)
	if owners := ownersOf(t, ns[1].addr(), topic, parts); !slices.ContainsFunc(owners, func(l int32) bool { return l >= 4 }) {
		t.Fatalf("no partition of %s in g2: leaders %v", topic, owners)
	}
	produce("old", 40)

	// Every broker of g2 holds the topic with the index its leader's
	// metadata copy held it at.
	metaIndex := func(n *node) uint64 {
		data, err := os.ReadFile(filepath.Join(n.cfg.DataDir, "topics", topic, "topic.json"))
		if err != nil {
			return 0
		}
		var m struct{ MetaIndex uint64 }
		if json.Unmarshal(data, &m) != nil {
			return 0
		}
		return m.MetaIndex
	}
	for _, id := range []int{4, 5, 6} {
		for deadline := time.Now().Add(30 * time.Second); metaIndex(ns[id]) == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("broker %d's copy of %s has no metadata index", id, topic)
			}
		}
	}

	// g2 loses its quorum (the metadata log keeps brokers 1 and 2), and
	// the topic is deleted and created again meanwhile.
	ns[4].stop()
	ns[5].stop()
	adm := kadm.NewClient(client(t, ns[1].addr()))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := adm.DeleteTopics(ctx, topic)
		if err == nil && resp[topic].Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete topic through broker 1: %v %+v", err, resp)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := adm.CreateTopic(ctx, parts, -1, nil, topic)
		if err == nil && resp.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic %s again through broker 1: %v %v", topic, err, resp.Err)
		}
	}

	// g2 elects a leader again; every partition of the new topic has one.
	tl := &testLog{t: t}
	t.Cleanup(func() { tl.mu.Lock(); tl.done = true; tl.mu.Unlock() })
	ns[5].start(t, tl)
	owners := ownersOf(t, ns[1].addr(), topic, parts)
	if !slices.ContainsFunc(owners, func(l int32) bool { return l >= 4 }) {
		t.Fatalf("no partition of the new %s in g2: leaders %v", topic, owners)
	}
	produce("new", 40)

	// Read through g2: the new incarnation's records and nothing else.
	readValues(t, ns[6].addr(), topic, 40, func(r *kgo.Record) {
		if !strings.HasPrefix(string(r.Value), "new-") {
			t.Fatalf("partition %d offset %d of the re-created topic holds %q, a record of the deleted one", r.Partition, r.Offset, r.Value)
		}
	})
}

// statsOwners checks that n's /stats names, for every partition of topic,
// the owner group of the leader in leaders (g1 is brokers 1-3), that
// leader, and whether n's group is the owner; and that /metrics exports
// the same owner.
func statsOwners(t *testing.T, n *node, topic string, leaders []int32) {
	t.Helper()
	base := "http://" + n.in.MetricsAddr()
	groupOf := func(id int32) string {
		if id <= 3 {
			return "g1"
		}
		return "g2"
	}
	mine := groupOf(int32(n.id))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var stats mstatus.Stats
		var problems []string
		resp, err := http.Get(base + "/stats")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&stats)
			resp.Body.Close()
		}
		if err != nil {
			problems = append(problems, err.Error())
		}
		seen := 0
		for _, p := range stats.Partitions {
			if p.Topic != topic {
				continue
			}
			seen++
			want := leaders[p.Partition]
			o := p.Owner
			if o == nil || o.Group != groupOf(want) || o.Leader != want || o.Local != (o.Group == mine) || !slices.Contains(o.ISR, want) {
				problems = append(problems, fmt.Sprintf("partition %d: owner %+v, want group %s led by %d", p.Partition, o, groupOf(want), want))
			}
		}
		if seen != len(leaders) {
			problems = append(problems, fmt.Sprintf("/stats lists %d partitions of %s, want %d", seen, topic, len(leaders)))
		}
		// The metadata log as this broker sees it: a leader among the
		// voters (1, 2, 4), and a copy applied.
		if r := stats.Replication; r == nil || r.Metadata == nil || !slices.Contains([]int32{1, 2, 4}, r.Metadata.Leader) ||
			r.Metadata.Applied == 0 || r.Metadata.Voter != slices.Contains([]int{1, 2, 4}, n.id) || r.Metadata.Error != "" {
			var m any
			if r != nil {
				m = r.Metadata
			}
			problems = append(problems, fmt.Sprintf("metadata log status %+v", m))
		}
		if len(problems) == 0 {
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !regexp.MustCompile(`(?m)^moonmq_metadata_leader [124]$`).Match(body) {
				t.Fatalf("/metrics of broker %d lacks moonmq_metadata_leader naming a voter", n.id)
			}
			lines := []string{"moonmq_metadata_failed 0"}
			for p, l := range leaders {
				lines = append(lines, fmt.Sprintf(`moonmq_partition_owner_info{local="%t",owner_group="%s",partition="%d",topic="%s"} 1`, groupOf(l) == mine, groupOf(l), p, topic))
			}
			for _, line := range lines {
				if !strings.Contains(string(body), line) {
					t.Fatalf("/metrics of broker %d lacks %s", n.id, line)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/stats of broker %d: %s", n.id, strings.Join(problems, "; "))
		}
	}
}

// produceValues produces one record per value, round robin over topic's
// partitions, through the broker at seed, and fails unless every one is
// acknowledged.
func produceValues(t *testing.T, seed, topic string, values []string) {
	t.Helper()
	cl := client(t, seed, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s through %s: %v", topic, seed, err)
	}
}

// readValues reads topic from its start through the broker at seed until
// want distinct values were seen, calling check (if set) on each record.
func readValues(t *testing.T, seed, topic string, want int, check func(*kgo.Record)) {
	t.Helper()
	cons := client(t, seed, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(seen) < want {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d acknowledged records of %s through %s", len(seen), want, topic, seed)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if check != nil {
				check(r)
			}
			seen[string(r.Value)] = true
		})
	}
}

// TestClusterSecurityHoldsInEveryGroup: ACLs and SCRAM users changed
// through a broker of one group hold on every broker of every group (the
// metadata log carries them): an ACL created through g1 is listed and
// enforced through g2 and deleted through g2; a user created through g2
// logs in to g1, and from then on every broker asks for a login.
func TestClusterSecurityHoldsInEveryGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	const topic = "guarded"
	createTopic(t, ns[1].addr(), topic, 2)
	produceValues(t, ns[1].addr(), topic, []string{"a", "b"})

	// Deny the anonymous principal reading the topic, through a follower
	// of g1.
	deny := kadm.NewACLs().Topics(topic).Deny("User:ANONYMOUS").DenyHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(client(t, ns[2].addr())).CreateACLs(ctx, deny)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("CreateAcls through broker 2: %v %+v", err, res)
	}
	// Each broker applies the metadata log on its own: wait for all six.
	waitDeny := func(op string, want int) {
		t.Helper()
		for id := 1; id <= 6; id++ {
			adm := kadm.NewClient(client(t, ns[id].addr()))
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				d, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny).Deny().DenyHosts())
				if err == nil && len(d) == 1 && d[0].Err == nil && len(d[0].Described) == want &&
					(want == 0 || d[0].Described[0].Principal == "User:ANONYMOUS" && d[0].Described[0].Permission == kmsg.ACLPermissionTypeDeny) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("DescribeAcls through broker %d after the %s: %v %+v, want %d deny", id, op, err, d, want)
				}
			}
		}
	}
	waitDeny("create through broker 2", 1)
	// Enforced by g2 too: broker 5 refuses the read.
	lo, err := kadm.NewClient(client(t, ns[5].addr())).ListEndOffsets(ctx, topic)
	if err == nil {
		err = lo.Error()
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("ListOffsets of %s through broker 5 under a deny: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
	}
	// Deleted through g2, gone everywhere.
	del, err := kadm.NewClient(client(t, ns[6].addr())).DeleteACLs(ctx, deny)
	if err != nil || len(del) != 1 || del[0].Err != nil || len(del[0].Deleted) != 1 {
		t.Fatalf("DeleteAcls through broker 6: %v %+v", err, del)
	}
	waitDeny("delete through broker 6", 0)
	readValues(t, ns[3].addr(), topic, 2, nil)

	// A user created through g2 logs in to g1.
	up, err := kadm.NewClient(client(t, ns[4].addr())).AlterUserSCRAMs(ctx, nil,
		[]kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha256, Password: "pw", Iterations: 4096}})
	if err != nil || up.Error() != nil {
		t.Fatalf("AlterUserScramCredentials through broker 4: %v %v", err, up.Error())
	}
	login := kgo.SASL(scram.Auth{User: "alice", Pass: "pw"}.AsSha256Mechanism())
	for _, id := range []int{1, 3, 5} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			_, err := kadm.NewClient(client(t, ns[id].addr(), login)).ListBrokers(ctx)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice, created through broker 4, cannot log in to broker %d: %v", id, err)
			}
		}
	}
	// Broker 2 has not been waited on: it may apply the user's record a
	// moment later, but from then on it must refuse.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		anon := client(t, ns[2].addr(), kgo.RequestRetries(0))
		if _, err := kadm.NewClient(anon).ListBrokers(ctx); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("broker 2 still answers a client that did not log in, 30 s after a user was created in the cluster")
		}
	}
}

// TestClusterManualAssignment: a manual replica assignment (what
// kafka-topics --replica-assignment sends) places each partition in the
// group of the brokers it lists; an assignment that mixes groups, names an
// unknown broker or skips a partition is refused.
func TestClusterManualAssignment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx := context.Background()
	cl := client(t, ns[3].addr())
	create := func(topic string, assignment map[int32][]int32) *kmsg.CreateTopicsResponseTopic {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
		for p, rs := range assignment {
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: p, Replicas: rs})
		}
		req.Topics = append(req.Topics, rt)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && len(resp.Topics) == 1 {
				out := resp.Topics[0]
				if e := kerr.ErrorForCode(out.ErrorCode); e == nil || !kerr.IsRetriable(e) && !errors.Is(e, kerr.BrokerNotAvailable) {
					return &out
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("create %s: %v %+v", topic, err, resp)
			}
		}
	}
	if out := create("placed", map[int32][]int32{0: {4, 5, 6}, 1: {1, 2, 3}, 2: {5}}); out.ErrorCode != 0 {
		t.Fatalf("create with an assignment: %s %v", kerr.ErrorForCode(out.ErrorCode), out.ErrorMessage)
	}
	leaders := ownersOf(t, ns[1].addr(), "placed", 3)
	if leaders[0] < 4 || leaders[1] > 3 || leaders[2] < 4 {
		t.Fatalf("leaders %v of partitions assigned to g2, g1 and g2", leaders)
	}
	for name, a := range map[string]map[int32][]int32{
		"mixed":   {0: {1, 4}},
		"unknown": {0: {99}},
		"gap":     {0: {1}, 2: {1}},
	} {
		out := create(name, a)
		if out.ErrorCode != kerr.InvalidReplicaAssignment.Code || out.ErrorMessage == nil {
			t.Fatalf("create %s with assignment %v: %s %v, want INVALID_REPLICA_ASSIGNMENT with a message", name, a, kerr.ErrorForCode(out.ErrorCode), out.ErrorMessage)
		}
	}
}

// TestClusterOtherGroupsListedWithoutMetadataLeader: while the metadata log
// has no leader nobody can renew a lease, and a broker goes on telling its
// clients of the other groups' brokers instead of letting their leases run
// out: a client bootstrapped in one group still reaches a partition of
// the other group after that group failed over, past the lease duration.
// An idempotent producer starts meanwhile, on a spare block of producer
// ids.
func TestClusterOtherGroupsListedWithoutMetadataLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	const topic, parts = "no-meta-leader", 4
	createTopic(t, ns[1].addr(), topic, parts)
	leaders := ownersOf(t, ns[3].addr(), topic, parts)
	target := int32(-1)
	for p, l := range leaders {
		if l >= 4 {
			target = int32(p)
			break
		}
	}
	if target < 0 {
		t.Fatalf("no partition in group g2: leaders %v", leaders)
	}
	// Voters 2 (a follower of g1) and 4 (of g2) stop: voter 1 alone has
	// no quorum. g1 keeps serving; g2 elects a leader among 5 and 6
	// if 4 led it.
	ns[2].stop()
	ns[4].stop()
	time.Sleep(10*time.Second + 3*time.Second) // past metanode.DefaultLeaseDuration

	md, err := kadm.NewClient(client(t, ns[3].addr())).BrokerMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	listed := map[int32]bool{}
	for _, b := range md.Brokers {
		listed[b.NodeID] = true
	}
	if !listed[5] || !listed[6] {
		t.Fatalf("broker 3 lists %v without a metadata leader; want g2's brokers 5 and 6 among them", md.Brokers.NodeIDs())
	}

	// Idempotent, as clients are by default: its producer id comes from
	// the spare block g1's leader took while the metadata log had a
	// leader.
	prod := client(t, ns[3].addr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, &kgo.Record{Partition: target, Value: []byte("through g1")}).FirstErr(); err != nil {
		t.Fatalf("produce to partition %d of g2 through g1's broker 3: %v", target, err)
	}
}

// keyCoordinatedIn returns the first key prefix-0, prefix-1, ... whose
// coordinator of the given FindCoordinator type (0 group, 1 transaction),
// asked through seed, is one of the brokers in group, and that broker.
func keyCoordinatedIn(t *testing.T, seed string, coordinatorType int8, prefix string, group []int32) (string, int32) {
	t.Helper()
	cl := client(t, seed)
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 200; {
		key := fmt.Sprintf("%s-%d", prefix, i)
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKey = coordinatorType, key
		resp, err := fc.RequestWith(context.Background(), cl)
		if err != nil || resp.ErrorCode != 0 {
			// The coordinators' topics are created on first use,
			// and the groups elect leaders: retry the same key.
			if time.Now().After(deadline) {
				t.Fatalf("FindCoordinator %q through %s: %v %v", key, seed, err, kerr.ErrorForCode(resp.ErrorCode))
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if slices.Contains(group, resp.NodeID) {
			return key, resp.NodeID
		}
		i++
	}
	t.Fatalf("no key %s-N among 200 is coordinated in group %v: the coordinators' partitions are not spread over the groups", prefix, group)
	return "", -1
}

// TestClusterCoordinatorsSpreadOverGroups: the coordinators' topics are
// spread over both groups, so consumer groups and transactional ids are
// coordinated in either. A consume-transform-produce loop whose
// transactional id is coordinated in g1 and whose consumer group is
// coordinated in g2 commits its offsets with its output: an aborted round
// moves neither, and the committed rounds leave each input record in the
// output exactly once, read_committed, with the group's offsets at the
// input's end.
func TestClusterCoordinatorsSpreadOverGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six brokers")
	}
	ns := twoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	g1, g2 := []int32{1, 2, 3}, []int32{4, 5, 6}
	const in, out, n = "ctp-in", "ctp-out", 40
	createTopic(t, ns[1].addr(), in, 4)
	createTopic(t, ns[4].addr(), out, 4)
	ownersOf(t, ns[2].addr(), in, 4)
	ownersOf(t, ns[5].addr(), out, 4)

	tid, tcoord := keyCoordinatedIn(t, ns[4].addr(), 1, "ctp-txn", g1)
	group, gcoord := keyCoordinatedIn(t, ns[1].addr(), 0, "ctp-group", g2)
	// Both kinds are spread: each group coordinates keys of each kind.
	keyCoordinatedIn(t, ns[1].addr(), 1, "other-txn", g2)
	other, _ := keyCoordinatedIn(t, ns[4].addr(), 0, "other-group", g1)
	t.Logf("transactional id %s coordinated by %d, consumer group %s by %d", tid, tcoord, group, gcoord)

	// A request about groups coordinated in both groups, sent to one
	// coordinator, is answered there for its own and NOT_COORDINATOR for
	// the other.
	var at *node
	for _, nd := range ns {
		if int32(nd.id) == gcoord {
			at = nd
		}
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{other, group}
	dresp, err := dg.RequestWith(ctx, client(t, at.addr()).Broker(int(gcoord)))
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int16{}
	for _, g := range dresp.Groups {
		codes[g.Group] = g.ErrorCode
	}
	if len(codes) != 2 || codes[group] != 0 || codes[other] != kerr.NotCoordinator.Code {
		t.Fatalf("DescribeGroups %v at %d: codes %v, want %s served and %s NOT_COORDINATOR", dg.Groups, gcoord, codes, group, other)
	}

	var values []string
	for i := range n {
		values = append(values, fmt.Sprintf("v%02d", i))
	}
	produceValues(t, ns[3].addr(), in, values)

	seeds := kgo.SeedBrokers(ns[1].addr(), ns[4].addr())
	session := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(seeds, kgo.TransactionalID(tid), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DefaultProduceTopic(out),
			kgo.TransactionTimeout(20*time.Second), kgo.RequireStableFetchOffsets())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	committedOffsets := func() int64 {
		t.Helper()
		offs, err := kadm.NewClient(client(t, ns[2].addr())).FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("fetch %s's offsets: %v", group, err)
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil {
				t.Fatalf("fetch %s's offset of %s/%d: %v", group, o.Topic, o.Partition, o.Err)
			}
			sum += o.At
		})
		return sum
	}
	// One round: poll what is there, write it transformed, end.
	round := func(s *kgo.GroupTransactSession, commit bool) int {
		t.Helper()
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		fs := s.PollFetches(pctx)
		pcancel()
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			prefix := "out-"
			if !commit {
				prefix = "aborted-"
			}
			recs = append(recs, &kgo.Record{Value: []byte(prefix + string(r.Value))})
		})
		if len(recs) > 0 {
			if err := s.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		committed, err := s.End(ctx, kgo.TransactionEndTry(commit))
		if err != nil {
			t.Fatalf("end the transaction (commit %v): %v", commit, err)
		}
		if commit && len(recs) > 0 && !committed {
			t.Fatal("the transaction was not committed")
		}
		return len(recs)
	}

	s := session()
	for got := 0; got == 0; {
		got = round(s, true)
	}
	before := committedOffsets()
	if before == 0 {
		t.Fatal("a committed round left the group's offsets at 0")
	}
	round(s, false)
	if after := committedOffsets(); after != before {
		t.Fatalf("an aborted round moved the group's offsets from %d to %d", before, after)
	}
	s.Close()

	// A new session starts from the committed offsets and finishes.
	s = session()
	defer s.Close()
	for deadline := time.Now().Add(60 * time.Second); committedOffsets() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the group's offsets reached %d of %d", committedOffsets(), n)
		}
		round(s, true)
	}

	// Each input once in the committed output, nothing of the abort.
	seen := map[string]int{}
	cons := client(t, ns[6].addr(), kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	// Until every value is in, and then a second more for any duplicate.
	var quiet time.Time
	for quiet.IsZero() || time.Now().Before(quiet) {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d output values: %v", len(seen), n, seen)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		if quiet.IsZero() && len(seen) >= n {
			quiet = time.Now().Add(time.Second)
		}
	}
	for _, v := range values {
		if seen["out-"+v] != 1 {
			t.Fatalf("output has out-%s %d times, want once (%v)", v, seen["out-"+v], seen)
		}
	}
	if len(seen) != n {
		t.Fatalf("output holds %d distinct values, want %d: %v", len(seen), n, seen)
	}
}
