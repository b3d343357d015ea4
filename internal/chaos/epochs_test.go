package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/checker"
)

// TestCheckEpochOrder: a final leader's log whose batch epochs fall is
// one anomaly at the first fall; rising and equal epochs, and followers'
// logs, are not.
func TestCheckEpochOrder(t *testing.T) {
	recs := func(n int) []checker.Record {
		var out []checker.Record
		for i := range n {
			out = append(out, checker.Record{Offset: int64(i), Value: fmt.Sprint(i)})
		}
		return out
	}
	h := checker.History{Dumps: []checker.Dump{
		{Replica: "1", Topic: "t", Partition: 0, Leader: true, Records: recs(4)},
		{Replica: "2", Topic: "t", Partition: 1, Leader: true, Records: recs(4)},
		{Replica: "3", Topic: "t", Partition: 1, Leader: false, Records: recs(3)},
	}}
	eps := [][]int32{{1, 1, 2, 5}, {3, 4, 2, 1}, {5, 1, 0}}
	got := checkEpochOrder(h, eps)
	if len(got) != 1 || got[0].Kind != EpochRegression || got[0].Partition != 1 || got[0].Offset != 2 {
		t.Fatalf("anomalies %+v, want one epoch regression at t/1 offset 2", got)
	}
}

// TestCheckOwnersPerEpoch: a partition served by g1 at epochs 3 and 4
// and then, after a move, by g2 at 9 is fine, however the sightings
// interleave; g2 serving it at g1's epoch 4 is one anomaly, reported
// once however often it is seen.
func TestCheckOwnersPerEpoch(t *testing.T) {
	c := func(sec float64, group int, epoch int32) ownerClaim {
		return ownerClaim{At: time.Duration(sec * float64(time.Second)), Topic: "data", Partition: 0, Epoch: epoch, Group: group, Replica: 3*group + 1}
	}
	fine := []ownerClaim{c(1, 0, 3), c(2, 0, 4), c(3, 1, 9), c(3.1, 0, 4), c(4, 1, 9)}
	if out := checkOwnersPerEpoch(fine); len(out) != 0 {
		t.Fatalf("anomalies in a clean history: %+v", out)
	}
	bad := append(fine, c(5, 1, 4), c(6, 1, 4))
	out := checkOwnersPerEpoch(bad)
	if len(out) != 1 || out[0].Kind != TwoOwnersOneEpoch || len(out[0].Witness) != 2 {
		t.Fatalf("want one %s anomaly, got %+v", TwoOwnersOneEpoch, out)
	}
	// Another partition at the same epoch is another partition.
	other := append(fine, ownerClaim{Topic: "data", Partition: 1, Epoch: 4, Group: 1})
	if out := checkOwnersPerEpoch(other); len(out) != 0 {
		t.Fatalf("partitions mixed up: %+v", out)
	}
}
