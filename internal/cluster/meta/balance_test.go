package meta

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPlanBalance: a new, empty group takes its share of the load, by
// count and bytes; groups already as even as a move can make them are
// left alone; with counts alone the plan never leaves two groups more
// than one apart.
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
	// g1 holds 1200 bytes in three partitions, g2 900 in three: the
	// largest of g1 and the smallest of g2 leave 600, 800 and 700 bytes
	// in two partitions each.
	want := []string{"a/0 g1->g3 600", "a/5 g2->g3 100"}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if plan := PlanBalance(parts, []string{"g1", "g2"}, nil); len(plan) != 0 {
		t.Fatalf("balanced groups moved: %v", plan)
	}
	if plan := PlanBalance(parts, []string{"g1"}, nil); len(plan) != 0 {
		t.Fatalf("one group moved: %v", plan)
	}
	// Everything in one group, three more join, nothing measured but
	// the count: counts end 3,3,2,2 in some order, never further apart.
	var one []PartitionLoad
	for i := range 10 {
		one = append(one, PartitionLoad{Topic: "b", Partition: int32(i), Group: "g1"})
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
// pinned coordinators' partitions too, to the least loaded groups;
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
	// Then the balance: g1 holds a/0, a/2 and the pinned partition
	// (the heaviest load), g2 a/1 and a/3; a/0 to g2 narrows the gap.
	want := []string{"__consumer_offsets/0 g3->g1", "a/3 g3->g2", "a/2 g3->g1", "a/0 g1->g2"}
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

// TestPlanBalanceBySizeAndRate: even counts are not balance when one
// partition holds most of the bytes, or takes most of the writes: its
// group gives its other partitions away. Imbalance measures the gap.
func TestPlanBalanceBySizeAndRate(t *testing.T) {
	lopsided := func(big PartitionLoad) []PartitionLoad {
		parts := []PartitionLoad{big}
		for i := 1; i < 8; i++ {
			parts = append(parts, PartitionLoad{Topic: "t", Partition: int32(i), Group: []string{"g1", "g2"}[i/4], Bytes: 10, Rate: 1})
		}
		return parts
	}
	for name, big := range map[string]PartitionLoad{
		"size": {Topic: "t", Partition: 0, Group: "g1", Bytes: 10_000, Rate: 1},
		"rate": {Topic: "t", Partition: 0, Group: "g1", Bytes: 10, Rate: 1_000},
	} {
		parts := lopsided(big)
		before := Imbalance(parts, []string{"g1", "g2"}, nil)
		plan := PlanBalance(parts, []string{"g1", "g2"}, nil)
		var got []string
		for _, m := range plan {
			got = append(got, fmt.Sprintf("%s/%d %s->%s", m.Topic, m.Partition, m.From, m.To))
		}
		// The other seven are alike: two of g1's three make the
		// loads even (each is an eighth of the count and of the rate
		// in the first case, of the count and the bytes in the
		// second).
		want := []string{"t/1 g1->g2", "t/2 g1->g2"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: plan %q, want %q", name, got, want)
		}
		after := Imbalance(apply(parts, plan), []string{"g1", "g2"}, nil)
		if before < 0.5 || after >= before {
			t.Errorf("%s: imbalance %.3f before the plan, %.3f after", name, before, after)
		}
	}
}

// TestPlanBalanceRandom: over random clusters, a plan moves no partition
// twice, moves pinned partitions only off draining groups, leaves nothing
// on a draining group, and never leaves the groups less even than they
// were.
func TestPlanBalanceRandom(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		groups := []string{"g1", "g2", "g3", "g4"}[:2+rng.IntN(3)]
		var draining []string
		if rng.IntN(4) == 0 {
			draining = []string{groups[rng.IntN(len(groups))]}
		}
		var parts []PartitionLoad
		for i := range 1 + rng.IntN(40) {
			p := PartitionLoad{Topic: "t", Partition: int32(i), Group: groups[rng.IntN(len(groups))], Pinned: rng.IntN(8) == 0}
			if rng.IntN(2) == 0 {
				p.Bytes = rng.Int64N(1 << 30)
			}
			if rng.IntN(3) == 0 {
				p.Rate = rng.Float64() * 1e6
			}
			parts = append(parts, p)
		}
		before := Imbalance(parts, groups, draining)
		plan := PlanBalance(parts, groups, draining)
		moved := map[int32]bool{}
		for _, m := range plan {
			if moved[m.Partition] {
				t.Fatalf("seed %d: t/%d moves twice: %v", seed, m.Partition, plan)
			}
			moved[m.Partition] = true
			p := parts[m.Partition]
			if p.Pinned && !slices.Contains(draining, p.Group) {
				t.Fatalf("seed %d: pinned t/%d moves off a group not draining", seed, m.Partition)
			}
			if slices.Contains(draining, m.To) {
				t.Fatalf("seed %d: t/%d moves onto draining %s", seed, m.Partition, m.To)
			}
		}
		after := apply(parts, plan)
		for _, p := range after {
			if slices.Contains(draining, p.Group) {
				t.Fatalf("seed %d: t/%d left on draining %s", seed, p.Partition, p.Group)
			}
		}
		if draining == nil && Imbalance(after, groups, nil) > before+1e-9 {
			t.Fatalf("seed %d: imbalance %.3f before, %.3f after %v", seed, before, Imbalance(after, groups, nil), plan)
		}
	}
}

// apply returns parts with plan's moves made.
func apply(parts []PartitionLoad, plan []PlannedMove) []PartitionLoad {
	out := slices.Clone(parts)
	for _, m := range plan {
		for i := range out {
			if out[i].Topic == m.Topic && out[i].Partition == m.Partition {
				out[i].Group = m.To
			}
		}
	}
	return out
}

// TestPreferredLeaders: the groups' preferred leaders spread over the
// machines, the lowest id on a tie, whatever order the members come in.
func TestPreferredLeaders(t *testing.T) {
	machine := func(id int32) string { return fmt.Sprintf("m%d", (id-1)%3) }
	machineOf := map[int32]string{}
	for id := int32(1); id <= 9; id++ {
		machineOf[id] = machine(id)
	}
	got := PreferredLeaders(map[string][]int32{"g1": {3, 2, 1}, "g2": {4, 5, 6}, "g3": {9, 8, 7}}, machineOf)
	want := map[string]int32{"g1": 1, "g2": 5, "g3": 9}
	if !maps.Equal(got, want) {
		t.Fatalf("preferred %v, want %v (one per machine)", got, want)
	}
	// One machine for all: the lowest id of each group.
	same := map[int32]string{}
	for id := range machineOf {
		same[id] = "host"
	}
	if got := PreferredLeaders(map[string][]int32{"g1": {2, 1}, "g2": {5, 4}}, same); !maps.Equal(got, map[string]int32{"g1": 1, "g2": 4}) {
		t.Fatalf("preferred on one machine %v", got)
	}
	if got := PreferredLeaders(map[string][]int32{"g1": nil}, machineOf); len(got) != 0 {
		t.Fatalf("a group without members has a preferred leader: %v", got)
	}
}
