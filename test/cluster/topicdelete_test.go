package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// TestTopicDeleteAndRecreateReachFollowers creates and writes two topics,
// deletes both and recreates one under the same name on the leader: every
// follower's own Metadata must follow (the recreated topic with its new
// id, the deleted one absent), the followers must stay in the ISR, and
// after the leader is killed the new leader must serve exactly the
// recreated topic's records, none of the first incarnation's.
func TestTopicDeleteAndRecreateReachFollowers(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	l := c.WaitISR(isrWithin, 1, 2, 3)
	const topic, gone = "life", "gone"
	ctx := testcluster.Context(t, readWithin)
	adm := c.Admin()
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))

	createTopic(t, c, topic, 1, nil)
	createTopic(t, c, gone, 1, nil)
	produceN(t, all, topic, 0, "old", 10)
	produceN(t, all, gone, 0, "gone", 10)
	first, err := viewOf(ctx, c, l, topic)
	if err != nil || !first.exists {
		t.Fatalf("leader's view of %s: %v, %v", topic, first, err)
	}
	waitView(t, c, topic, first)

	for _, name := range []string{topic, gone} {
		if resp, err := adm.DeleteTopic(ctx, name); err != nil || resp.Err != nil {
			t.Fatalf("delete %s: %v %v", name, err, resp.Err)
		}
	}
	createTopic(t, c, topic, 2, nil)
	second, err := viewOf(ctx, c, l, topic)
	if err != nil || !second.exists || second.id == first.id {
		t.Fatalf("recreated %s: %v (first incarnation %v), %v", topic, second, first, err)
	}
	waitView(t, c, topic, second)
	waitView(t, c, gone, topicView{})
	// A client that knows the first incarnation keeps its id (produce
	// v13 names topics by id) and is refused, as by Kafka: a new one.
	all = c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	acks := [][]ack{produceN(t, all, topic, 0, "new0", 10), produceN(t, all, topic, 1, "new1", 10)}
	waitCaughtUp(t, c, topic, 2, endOffset(acks[0]), endOffset(acks[1]))
	// Only ISR members can be elected: the kill below needs them.
	c.WaitISR(isrWithin, 1, 2, 3)

	l.Kill()
	l2 := c.Leader(electWithin, l)
	for p, as := range acks {
		recs := readPartition(t, c, topic, int32(p), endOffset(as))
		checkAcked(t, recs, as)
		for _, r := range recs {
			if !strings.HasPrefix(string(r.Value), fmt.Sprintf("new%d-", p)) {
				t.Fatalf("%s-%d on the new leader holds %s at offset %d", topic, p, r.Value, r.Offset)
			}
		}
	}
	if v, err := viewOf(ctx, c, l2, gone); err != nil || v.exists {
		t.Fatalf("the deleted topic on the new leader: %v, %v", v, err)
	}
}
