package groupcoord

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

func TestGroupStateChanges(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	recorded := map[string]time.Time{"same": t0, "moved": t0, "joined": t0}
	empty := map[string]time.Time{"same": t0, "moved": t0.Add(time.Minute), "new": t0}
	write, remove := groupStateChanges(recorded, empty)
	if !slices.Equal(write, []string{"moved", "new"}) || !slices.Equal(remove, []string{"joined"}) {
		t.Fatalf("write %v remove %v", write, remove)
	}
	if w, r := groupStateChanges(empty, empty); len(w)+len(r) != 0 {
		t.Fatalf("no change: write %v remove %v", w, r)
	}
}

func TestGroupMetaRecords(t *testing.T) {
	since := time.UnixMilli(1_800_000_000_123)
	g, got, empty, err := decodeGroupMeta(encodeGroupMeta("g", since, true, time.Now()))
	if err != nil || g != "g" || !empty || !got.Equal(since) {
		t.Fatalf("empty record: %q %v %v %v", g, got, empty, err)
	}
	g, _, empty, err = decodeGroupMeta(encodeGroupMeta("g", time.Time{}, false, time.Now()))
	if err != nil || g != "g" || empty {
		t.Fatalf("tombstone: %q %v %v", g, empty, err)
	}
	// A record Kafka wrote for a group with members says nothing about
	// when it became empty.
	v := kmsg.NewGroupMetadataValue()
	v.Version = 3
	v.CurrentStateTimestamp = since.UnixMilli()
	v.Members = []kmsg.GroupMetadataValueMember{{MemberID: "m"}}
	k := kmsg.GroupMetadataKey{Version: 2, Group: "busy"}
	_, _, empty, err = decodeGroupMeta(recordbatch.Record{Key: k.AppendTo(nil), Value: v.AppendTo(nil)})
	if err != nil || empty {
		t.Fatalf("record with members: %v %v", empty, err)
	}
	if v, err := keyVersion(k.AppendTo(nil)); err != nil || v != 2 {
		t.Fatalf("key version %d %v", v, err)
	}
}
