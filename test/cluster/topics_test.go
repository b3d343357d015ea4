package cluster_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// metadataFrom asks replica r itself (not whichever broker the client
// picks) for the metadata of topics, without auto-creation.
func metadataFrom(ctx context.Context, c *testcluster.Cluster, r *testcluster.Replica, topics ...string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.ClientAddr()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// The first request learns the brokers' ids; the second goes to r.
	if _, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
		return nil, err
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	resp, err := cl.Broker(r.ID).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// topicView is what a replica's Metadata says of one topic.
type topicView struct {
	exists     bool
	id         [16]byte
	partitions int
}

func (v topicView) String() string {
	if !v.exists {
		return "absent"
	}
	return fmt.Sprintf("%x with %d partitions", v.id[:4], v.partitions)
}

func viewOf(ctx context.Context, c *testcluster.Cluster, r *testcluster.Replica, topic string) (topicView, error) {
	resp, err := metadataFrom(ctx, c, r, topic)
	if err != nil {
		return topicView{}, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); err {
		case nil:
			return topicView{exists: true, id: t.TopicID, partitions: len(t.Partitions)}, nil
		case kerr.UnknownTopicOrPartition, kerr.LeaderNotAvailable:
			// A follower answers LEADER_NOT_AVAILABLE for a topic it
			// does not have (the leader may have it already).
			return topicView{}, nil
		default:
			return topicView{}, err
		}
	}
	return topicView{}, fmt.Errorf("topic %s missing from the answer", topic)
}

// waitView waits until every running replica's own Metadata shows want
// for topic.
func waitView(t *testing.T, c *testcluster.Cluster, topic string, want topicView) {
	t.Helper()
	c.WaitFor(readWithin, fmt.Sprintf("every replica showing %s as %v", topic, want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), readWithin)
		defer cancel()
		for _, r := range c.Up() {
			v, err := viewOf(ctx, c, r, topic)
			if err != nil || v != want {
				return false, fmt.Sprintf("%v shows %v (err %v)", r, v, err)
			}
		}
		return true, ""
	})
}

// TestCreatePartitionsReachFollowers grows a topic with CREATE_PARTITIONS
// on the leader under acks=all writes: every follower's own Metadata must
// show the new partition count with the same topic id, the followers must
// hold every partition up to the log end and stay in the ISR, and after
// the leader is killed the new leader must serve every acknowledged record
// of the old and the new partitions.
func TestCreatePartitionsReachFollowers(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	l := c.WaitISR(isrWithin, 1, 2, 3)
	const topic = "grow"
	ctx := testcluster.Context(t, readWithin)
	createTopic(t, c, topic, 2, nil)
	before, err := viewOf(ctx, c, l, topic)
	if err != nil || !before.exists {
		t.Fatalf("leader's view of %s: %v, %v", topic, before, err)
	}
	waitView(t, c, topic, before)
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	acks := [][]ack{produceN(t, all, topic, 0, "p0", 10), produceN(t, all, topic, 1, "p1", 10)}

	if resp, err := c.Admin().CreatePartitions(ctx, 1, topic); err != nil || resp[topic].Err != nil {
		t.Fatalf("create partitions: %v %v", err, resp[topic].Err)
	}
	grown := before
	grown.partitions = 3
	waitView(t, c, topic, grown)
	// A new client: every replica now names three partitions.
	all = c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	acks = append(acks, produceN(t, all, topic, 2, "p2", 10))
	for p := range int32(2) {
		acks[p] = append(acks[p], produceN(t, all, topic, p, fmt.Sprintf("p%d-more", p), 5)...)
	}
	waitCaughtUp(t, c, topic, 3, endOffset(acks[0]), endOffset(acks[1]), endOffset(acks[2]))
	c.WaitISR(isrWithin, 1, 2, 3)

	l.Kill()
	l2 := c.Leader(electWithin, l)
	for p, as := range acks {
		checkAcked(t, readPartition(t, c, topic, int32(p), endOffset(as)), as)
	}
	if v, err := viewOf(ctx, c, l2, topic); err != nil || v != grown {
		t.Fatalf("%s on the new leader: %v, want %v (err %v)", topic, v, grown, err)
	}
}
