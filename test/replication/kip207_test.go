package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listLatest asks replica n for the latest offset of partition 0 and
// returns the error code and offset.
func listLatest(t *testing.T, cl *kgo.Client, n *node, topic string) (int16, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(n.id).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	return p.ErrorCode, p.Offset
}

// TestListOffsetsLatestAfterFailover (KIP-207): a new leader whose high
// watermark has not reached its log end as of its promotion answers
// ListOffsets "latest" with OFFSET_NOT_AVAILABLE, so "latest" never goes
// backwards across a failover; once the high watermark catches up it
// answers it. The topic's min.insync.replicas (4, more than the group)
// holds its high watermark below the records acks=1 wrote, whatever the
// timing, until it is lowered.
func TestListOffsetsLatestAfterFailover(t *testing.T) {
	ns, _ := failoverGroup(t)
	first := servingLeader(t, ns, 0, 60*time.Second)
	waitISR(t, first, []int{1, 2, 3}, 60*time.Second)
	cl := client(t, first.addr())
	adm := kadm.NewClient(cl)
	const topic = "kip207"
	four := "4"
	if _, err := adm.CreateTopic(context.Background(), 1, 3, map[string]*string{"min.insync.replicas": &four}, topic); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := produceCode(t, cl, first.id, topic, 1); code != 0 {
			t.Fatalf("acks=1 produce: error %d", code)
		}
	}
	if code, off := listLatest(t, cl, first, topic); code != 0 || off != 0 {
		t.Fatalf("first leader: latest %d (error %d), want 0 (nothing committed)", off, code)
	}
	// Every replica has the three records before the leader goes.
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range ns[1:] {
		for {
			if _, end, err := n.in.Broker.ReadLog(topic, 0); err == nil && end == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d did not copy the records", n.id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	first.stop()
	second := servingLeader(t, ns, first.id, 60*time.Second)
	cl2 := client(t, second.addr())
	if code, off := listLatest(t, cl2, second, topic); code != 78 {
		t.Fatalf("new leader with its high watermark behind its log end: latest %d (error %d), want OFFSET_NOT_AVAILABLE (78)", off, code)
	}
	two := "2"
	deadline = time.Now().Add(30 * time.Second)
	for {
		rs, err := kadm.NewClient(cl2).AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: &two}}, topic)
		if err == nil && rs[0].Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, off := listLatest(t, cl2, second, topic)
		if code == 0 && off == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("latest %d (error %d) after the high watermark may catch up, want 3", off, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
