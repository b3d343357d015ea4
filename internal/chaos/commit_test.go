package chaos

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/checker"
)

// TestCommitOutcome: a refused commit is a failure only when the refusal
// answered its only request. Found by seed 777: a KIP-848 member's
// commit went to leader 1, which appended it to __consumer_offsets,
// shipped it to replica 2 and stepped down before it knew, answering
// NOT_COORDINATOR; franz-go retried on replica 1 (now a follower) and on
// replica 2 (the new leader, which knew no members: UNKNOWN_MEMBER_ID)
// and handed only that last answer to the callback. Replica 2 kept the
// first attempt, and offset fetches returned it: the checker, told
// "failed", reported committed-offset regressions no broker caused.
func TestCommitOutcome(t *testing.T) {
	for _, c := range []struct {
		code     int16
		attempts int
		want     checker.Outcome
	}{
		{0, 1, checker.Acked},
		{0, 3, checker.Acked},
		{kerr.UnknownMemberID.Code, 1, checker.Failed},
		{kerr.UnknownMemberID.Code, 3, checker.Unknown},
		{kerr.IllegalGeneration.Code, 2, checker.Unknown},
		{kerr.StaleMemberEpoch.Code, 1, checker.Failed},
		{kerr.StaleMemberEpoch.Code, 2, checker.Unknown},
		{kerr.RebalanceInProgress.Code, 0, checker.Failed}, // franz-go's own answer, nothing sent
		{kerr.NotCoordinator.Code, 1, checker.Unknown},
		{kerr.RequestTimedOut.Code, 1, checker.Unknown},
	} {
		if got := commitOutcome(c.code, c.attempts); got != c.want {
			t.Errorf("%v after %d attempt(s): %v, want %v", kerr.ErrorForCode(c.code), c.attempts, got, c.want)
		}
	}
}
