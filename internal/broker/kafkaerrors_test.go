package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestLeaderEpochAnswers: a request naming a leader epoch newer than the
// broker's is answered UNKNOWN_LEADER_EPOCH (75), an older one
// FENCED_LEADER_EPOCH (74). The hand-written code for "unknown" was 76,
// UNSUPPORTED_COMPRESSION_TYPE: not retriable, so a client whose epoch was
// briefly ahead of this broker's failed instead of retrying.
func TestLeaderEpochAnswers(t *testing.T) {
	b := &Broker{}
	b.epoch.Store(5)
	for _, c := range []struct {
		current int32
		want    *kerr.Error
	}{{6, kerr.UnknownLeaderEpoch}, {4, kerr.FencedLeaderEpoch}} {
		got := b.checkLeaderEpoch(c.current)
		if got != c.want.Code {
			t.Errorf("current epoch %d against 5: %v, want %v", c.current, kerr.ErrorForCode(got), c.want)
		}
	}
	if got := b.checkLeaderEpoch(5); got != 0 {
		t.Errorf("current epoch 5 against 5: %v, want none", kerr.ErrorForCode(got))
	}
	if got := b.checkLeaderEpoch(-1); got != 0 {
		t.Errorf("no current epoch: %v, want none", kerr.ErrorForCode(got))
	}
	if errUnknownLeaderEpoch != 75 || errFencedLeaderEpoch != 74 {
		t.Errorf("leader epoch codes %d and %d, want Kafka's 75 and 74", errUnknownLeaderEpoch, errFencedLeaderEpoch)
	}
}
