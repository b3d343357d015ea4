package groupcoord

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// waitWriterPending returns once a writer waits for (or holds) the offset
// store's commit gate: TryRLock fails exactly then.
func waitWriterPending(t *testing.T, c *Coordinator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.offsets.writes.TryRLock() {
		c.offsets.writes.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("the retention pass never asked for the commit gate")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExpireOffsetsSparesGroupJoinedMeanwhile: a retention pass that had
// to wait for a commit in flight must look at the groups again once it has
// the gate. A group that got a member while it waited keeps its offsets,
// and is not deleted.
func TestExpireOffsetsSparesGroupJoinedMeanwhile(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	if code := c.groups.ValidateCommit("g", "", -1, nil); code != 0 {
		t.Fatalf("simple commit refused: %d", code)
	}
	key := offsetKey{"g", "t", 0}
	if err := c.startOffsetWrite([]offsetWrite{{key: key, value: committed{offset: 5, leaderEpoch: -1}}})(ctx); err != nil {
		t.Fatal(err)
	}
	// Another group, empty and without offsets, that stays so: it is
	// deleted by the same pass, so the pass did run.
	c.groups.EnsureGroup("idle")

	c.offsets.writes.RLock() // a commit in flight
	type result struct{ offsets, groups int }
	done := make(chan result, 1)
	go func() {
		n, g, err := c.ExpireOffsets(ctx, time.Now().Add(8*24*time.Hour))
		if err != nil {
			t.Error(err)
		}
		done <- result{n, g}
	}()
	waitWriterPending(t, c)
	// A member joins g (KIP-848: one heartbeat) while the pass waits.
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version = 1
	hb.Group, hb.MemberID = "g", "m1"
	hb.RebalanceTimeoutMillis = 30000
	hb.SubscribedTopicNames = []string{"t"}
	hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if r := c.groups.ConsumerGroupHeartbeat(hb, testTopics{}, "c", "/127.0.0.1"); r.ErrorCode != 0 {
		t.Fatalf("heartbeat: %d", r.ErrorCode)
	}
	c.offsets.writes.RUnlock()

	got := <-done
	if got.offsets != 0 || got.groups != 1 {
		t.Fatalf("pass expired %d offsets and deleted %d groups; want 0 and 1 (only the idle group)", got.offsets, got.groups)
	}
	if v, ok := c.offsets.get(key); !ok || v.offset != 5 {
		t.Fatalf("g's offset after the pass: %+v %v", v, ok)
	}
	if _, ok := c.groups.State("g"); !ok {
		t.Fatal("g was deleted")
	}
}

// TestExpireOffsetsAppliesTombstonesWhenTheWaitFails: once the tombstones
// are in the log they may become durable whatever the wait says, so memory
// must drop the offsets even when the pass gives up waiting (here: its
// context is already over, so it gives up before the flusher's fsync).
func TestExpireOffsetsAppliesTombstonesWhenTheWaitFails(t *testing.T) {
	c := newTestCoordinator(t)
	if code := c.groups.ValidateCommit("g", "", -1, nil); code != 0 {
		t.Fatalf("simple commit refused: %d", code)
	}
	key := offsetKey{"g", "t", 0}
	if err := c.startOffsetWrite([]offsetWrite{{key: key, value: committed{offset: 5, leaderEpoch: -1}}})(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The fsync almost never beats the first look at the high watermark;
	// if it does, the pass succeeds and the offset must be gone all the
	// same.
	_, _, err := c.ExpireOffsets(ctx, time.Now().Add(8*24*time.Hour))
	t.Logf("the pass returned %v", err)
	if v, ok := c.offsets.get(key); ok {
		t.Fatalf("offset %+v still in memory after its tombstone was appended", v)
	}
}
