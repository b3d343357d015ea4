package groupcoord

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
