package chaos

import (
	"fmt"
	"testing"

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
