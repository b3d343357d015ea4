package broker

import (
	"testing"
	"time"
)

// TestRecoveryPointWait: checkpoints run every recoveryPointInterval while
// a pass is cheap, and take at most 1/recoveryPointShare of the time when
// passes are slow (thousands of changed partitions).
func TestRecoveryPointWait(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{0, recoveryPointInterval},
		{5 * time.Millisecond, recoveryPointInterval},
		{recoveryPointInterval / recoveryPointShare, recoveryPointInterval},
		{800 * time.Millisecond, 800 * time.Millisecond * recoveryPointShare},
	} {
		if got := recoveryPointWait(c.took); got != c.want {
			t.Errorf("after a pass of %v: wait %v, want %v", c.took, got, c.want)
		}
	}
}
