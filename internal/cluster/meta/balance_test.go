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
	plan := PlanBalance(parts, []string{"g1", "g2", "g3"}, nil)
	var got []string
	for _, m := range plan {
		got = append(got, fmt.Sprintf("%s/%d %s->%s %d", m.Topic, m.Partition, m.From, m.To, m.Bytes))
	}
	want := []string{"a/4 g1->g3 200", "a/5 g2->g3 100"}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if plan := PlanBalance(parts, []string{"g1", "g2"}, nil); len(plan) != 0 {
		t.Fatalf("balanced groups moved: %v", plan)
	}
	if plan := PlanBalance(parts, []string{"g1"}, nil); len(plan) != 0 {
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
	for _, m := range PlanBalance(one, groups, nil) {
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

// TestPlanDrain: every partition of a draining group moves off it, the
// pinned coordinators' partitions too, to the groups owning the fewest;
// nothing moves onto it, and pinned partitions elsewhere stay.
func TestPlanDrain(t *testing.T) {
	parts := []PartitionLoad{
		{Topic: "a", Partition: 0, Group: "g1", Bytes: 10},
		{Topic: "a", Partition: 1, Group: "g2", Bytes: 20},
		{Topic: "a", Partition: 2, Group: "g3", Bytes: 30},
		{Topic: "a", Partition: 3, Group: "g3", Bytes: 5},
		{Topic: "__consumer_offsets", Partition: 0, Group: "g3", Pinned: true},
		{Topic: "__consumer_offsets", Partition: 1, Group: "g1", Pinned: true},
	}
	var got []string
	for _, m := range PlanBalance(parts, []string{"g1", "g2", "g3"}, []string{"g3"}) {
		got = append(got, fmt.Sprintf("%s/%d %s->%s", m.Topic, m.Partition, m.From, m.To))
	}
	want := []string{"__consumer_offsets/0 g3->g1", "a/3 g3->g2", "a/2 g3->g1"}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if plan := PlanBalance(parts[:2], []string{"g1", "g2", "g3"}, []string{"g3"}); len(plan) != 0 {
		t.Fatalf("a drained group took partitions: %v", plan)
	}
	if plan := PlanBalance(parts, []string{"g3"}, []string{"g3"}); len(plan) != 0 {
		t.Fatalf("moves with nowhere to go: %v", plan)
	}
	if g := ParseGroupList(" g3, ,g1,g3"); !slices.Equal(g, []string{"g1", "g3"}) {
		t.Fatalf("ParseGroupList: %v", g)
	}
}

// TestPlanLeaders: three groups all led from machine a, each with a
// member on b and c: transfers go to the least loaded machine until each
// machine leads one group; machines leading at most one more than
// another are left alone.
func TestPlanLeaders(t *testing.T) {
	machineOf := map[int32]string{1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c", 7: "a", 8: "b", 9: "c"}
	groups := []GroupLeadership{
		{Group: "g1", Leader: 1, Candidates: []int32{1, 2, 3}},
		{Group: "g2", Leader: 4, Candidates: []int32{4, 5, 6}},
		{Group: "g3", Leader: 7, Candidates: []int32{7, 8, 9}},
	}
	var got []string
	for range 5 {
		g, to, ok := PlanLeaders(groups, machineOf)
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s->%d", g, to))
		for i := range groups {
			if groups[i].Group == g {
				groups[i].Leader = to
			}
		}
	}
	if want := []string{"g1->2", "g2->6"}; !slices.Equal(got, want) {
		t.Fatalf("transfers %q, want %q", got, want)
	}
	two := []GroupLeadership{{Group: "g1", Leader: 1, Candidates: []int32{1, 2, 3}}, {Group: "g2", Leader: 5, Candidates: []int32{4, 5, 6}}}
	if g, to, ok := PlanLeaders(two, machineOf); ok {
		t.Fatalf("a transfer that cannot help: %s->%d", g, to)
	}
	// Both led from a, but g2 has no member elsewhere: g1 moves.
	stuck := []GroupLeadership{{Group: "g1", Leader: 1, Candidates: []int32{1, 2}}, {Group: "g2", Leader: 4, Candidates: []int32{4}}}
	if g, to, ok := PlanLeaders(stuck, machineOf); !ok || g != "g1" || to != 2 {
		t.Fatalf("plan %s->%d %v, want g1->2", g, to, ok)
	}
}
