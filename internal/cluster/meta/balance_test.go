package meta

import (
	"fmt"
	"slices"
	"testing"
)

// TestPlanBalance: a new, empty group takes its share of the partitions,
// the smallest first; groups already within one partition of each other
// are left alone; the plan never leaves two groups more than one apart.
func TestPlanBalance(t *testing.T) {
	var parts []PartitionLoad
	for i := range 6 {
		parts = append(parts, PartitionLoad{Topic: "a", Partition: int32(i), Group: []string{"g1", "g2"}[i%2], Bytes: int64(100 * (6 - i))})
	}
	plan := PlanBalance(parts, []string{"g1", "g2", "g3"})
	var got []string
	for _, m := range plan {
		got = append(got, fmt.Sprintf("%s/%d %s->%s %d", m.Topic, m.Partition, m.From, m.To, m.Bytes))
	}
	want := []string{"a/4 g1->g3 200", "a/5 g2->g3 100"}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if plan := PlanBalance(parts, []string{"g1", "g2"}); len(plan) != 0 {
		t.Fatalf("balanced groups moved: %v", plan)
	}
	if plan := PlanBalance(parts, []string{"g1"}); len(plan) != 0 {
		t.Fatalf("one group moved: %v", plan)
	}
	// Everything in one group, three more join: counts end 3,3,2,2 in
	// some order, never further apart.
	var one []PartitionLoad
	for i := range 10 {
		one = append(one, PartitionLoad{Topic: "b", Partition: int32(i), Group: "g1", Bytes: int64(i)})
	}
	groups := []string{"g1", "g2", "g3", "g4"}
	counts := map[string]int{"g1": 10}
	for _, m := range PlanBalance(one, groups) {
		counts[m.From]--
		counts[m.To]++
	}
	lo, hi := 10, 0
	for _, g := range groups {
		lo, hi = min(lo, counts[g]), max(hi, counts[g])
	}
	if hi-lo > 1 {
		t.Fatalf("counts after the plan %v", counts)
	}
}
