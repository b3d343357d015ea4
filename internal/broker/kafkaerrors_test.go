package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
)

// TestLeaderEpochAnswers: a request naming a leader epoch newer than the
// broker's is answered UNKNOWN_LEADER_EPOCH (75), an older one
// FENCED_LEADER_EPOCH (74). The hand-written code for "unknown" was 76,
// UNSUPPORTED_COMPRESSION_TYPE: not retriable, so a client whose epoch was
// briefly ahead of this broker's failed instead of retrying.
//
// The epoch a partition exposes is the group's plus the partition's base
// (cluster mode: a partition moved into the group keeps epochs rising).
func TestLeaderEpochAnswers(t *testing.T) {
	b := &Broker{}
	b.epoch.Store(2)
	l, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl := &placement{}
	pl.base.Store(3)
	p, err := partition.New(partition.Config{Topic: "t", Log: l, Fence: brokerFence{b, pl}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if e := b.exposedEpoch(p); e != 5 {
		t.Fatalf("exposed epoch %d, want 5 (epoch 2 + base 3)", e)
	}
	for _, c := range []struct {
		current int32
		want    *kerr.Error
	}{{6, kerr.UnknownLeaderEpoch}, {4, kerr.FencedLeaderEpoch}} {
		got := b.checkLeaderEpoch(p, c.current)
		if got != c.want.Code {
			t.Errorf("current epoch %d against 5: %v, want %v", c.current, kerr.ErrorForCode(got), c.want)
		}
	}
	if got := b.checkLeaderEpoch(p, 5); got != 0 {
		t.Errorf("current epoch 5 against 5: %v, want none", kerr.ErrorForCode(got))
	}
	if got := b.checkLeaderEpoch(p, -1); got != 0 {
		t.Errorf("no current epoch: %v, want none", kerr.ErrorForCode(got))
	}
	if errUnknownLeaderEpoch != 75 || errFencedLeaderEpoch != 74 {
		t.Errorf("leader epoch codes %d and %d, want Kafka's 75 and 74", errUnknownLeaderEpoch, errFencedLeaderEpoch)
	}
}
