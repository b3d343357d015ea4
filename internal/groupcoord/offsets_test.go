package groupcoord

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
)

func TestOffsetRecords(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_123)
	w := offsetWrite{key: offsetKey{"g", "t", 3}, value: committed{offset: 42, leaderEpoch: 7, metadata: "m"}}
	rec := encodeOffsetRecord(w, now)
	rec.Offset = 9
	got, ok, err := decodeOffsetRecord(rec)
	want := offsetWrite{key: w.key, value: committed{offset: 42, leaderEpoch: 7, metadata: "m", logOffset: 9, commitMs: now.UnixMilli()}}
	if err != nil || !ok || got != want {
		t.Fatalf("commit: %+v %v %v, want %+v", got, ok, err, want)
	}
	got, ok, err = decodeOffsetRecord(encodeOffsetRecord(offsetWrite{key: w.key, tombstone: true}, now))
	if err != nil || !ok || !got.tombstone || got.key != w.key {
		t.Fatalf("tombstone: %+v %v %v", got, ok, err)
	}
}

// TestReloadRebuildsFromTheTopic: a coordinator built over the same topic
// rebuilds the committed offsets, the open transaction's pending commits
// and the group, as a restart or a new leader does.
func TestReloadRebuildsFromTheTopic(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "g", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 7, LeaderEpoch: -1}}}}
	resp, wait := c.OffsetCommit(commit)
	if resp != nil || wait == nil {
		t.Fatalf("a commit to write answered at once: %v", resp)
	}
	if code := wait(ctx).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(code))
	}
	txnCommit := kmsg.NewPtrTxnOffsetCommitRequest()
	txnCommit.Version, txnCommit.Group, txnCommit.Generation = 3, "g", -1
	txnCommit.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 11, LeaderEpoch: -1}}}}
	if code := c.WriteTxnOffsets(ctx, 9, 0, txnCommit); code != 0 {
		t.Fatalf("transactional commit: %v", kerr.ErrorForCode(code))
	}

	again := New(Config{Writer: c.w, Host: c.host, Logger: slog.New(slog.DiscardHandler), OffsetsRetentionMinutes: -1})
	if err := again.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	again.RegisterGroups()
	key := offsetKey{"g", "t", 0}
	if v, ok := again.offsets.get(key); !ok || v.offset != 7 {
		t.Fatalf("reloaded offset %+v %v, want 7", v, ok)
	}
	if !again.offsets.hasPending(key) {
		t.Fatal("the open transaction's commit was not reloaded as pending")
	}
	if state, ok := again.groups.State("g"); !ok || state != "Empty" {
		t.Fatalf("reloaded group: %q %v", state, ok)
	}
	again.EndTxn(9, true)
	if v, _ := again.offsets.get(key); v.offset != 11 {
		t.Fatalf("after the commit marker: %d, want 11", v.offset)
	}
}

// TestGroupsSpreadOverPartitions: each group's records go to its own
// partition of the topic (coordinator.PartitionFor), a deletion of groups
// in different partitions writes each partition, and a reload reads them
// all back.
func TestGroupsSpreadOverPartitions(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	for i, g := range groups {
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Version, commit.Group, commit.Generation = 8, g, -1
		commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: int64(10 + i), LeaderEpoch: -1}}}}
		_, wait := c.OffsetCommit(commit)
		if code := wait(ctx).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("commit of %s: %v", g, kerr.ErrorForCode(code))
		}
	}
	h := c.host.(*testHost)
	byPartition := map[int32][]string{}
	for _, g := range groups {
		i := coordinator.PartitionFor(g, testPartitions)
		byPartition[i] = append(byPartition[i], g)
		if h.own[i].Log().EndOffset() == 0 {
			t.Fatalf("%s's commit is not in partition %d", g, i)
		}
	}
	if len(byPartition) < 2 {
		t.Fatalf("the groups all hash to one partition: %v", byPartition)
	}
	// One group from each of two partitions, deleted in one request.
	var deleted []string
	for _, gs := range byPartition {
		if len(deleted) < 2 {
			deleted = append(deleted, gs[0])
		}
	}
	ends := map[int32]int64{}
	for _, g := range deleted {
		i := coordinator.PartitionFor(g, testPartitions)
		ends[i] = h.own[i].Log().EndOffset()
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = deleted
	resp, wait := c.DeleteGroups(del)
	if wait != nil {
		resp = wait(ctx)
	}
	for _, g := range resp.(*kmsg.DeleteGroupsResponse).Groups {
		if g.ErrorCode != 0 {
			t.Fatalf("delete %s: %v", g.Group, kerr.ErrorForCode(g.ErrorCode))
		}
	}
	for i, end := range ends {
		if h.own[i].Log().EndOffset() <= end {
			t.Fatalf("partition %d got no tombstone", i)
		}
	}

	again := New(Config{Writer: c.w, Host: c.host, Logger: slog.New(slog.DiscardHandler), OffsetsRetentionMinutes: -1})
	if err := again.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		v, ok := again.offsets.get(offsetKey{g, "t", 0})
		if slices.Contains(deleted, g) {
			if ok {
				t.Fatalf("deleted group %s reloaded with %+v", g, v)
			}
			continue
		}
		if !ok || v.offset != int64(10+i) {
			t.Fatalf("%s reloaded %+v %v, want %d", g, v, ok, 10+i)
		}
	}
}
