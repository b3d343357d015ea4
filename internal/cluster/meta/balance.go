package meta

import (
	"cmp"
	"slices"
)

// PartitionLoad is one partition as the balancer sees it: its owner
// group and its size on the owner's leader.
type PartitionLoad struct {
	Topic     string
	Partition int32
	Group     string
	Bytes     int64
}

// PlannedMove is a partition to move to another group.
type PlannedMove struct {
	Topic     string
	Partition int32
	From, To  string
	Bytes     int64
}

// PlanBalance spreads parts over groups so that the groups' partition
// counts differ by at most one, moving as few partitions as it can, and
// among the candidates the smallest first (fewer bytes to copy). A group
// in groups that owns nothing yet (a new one) takes its share. The plan
// is deterministic: ties go by topic and partition.
func PlanBalance(parts []PartitionLoad, groups []string) []PlannedMove {
	if len(groups) < 2 {
		return nil
	}
	owned := map[string][]PartitionLoad{}
	for _, g := range groups {
		owned[g] = nil
	}
	for _, p := range parts {
		if _, ok := owned[p.Group]; ok {
			owned[p.Group] = append(owned[p.Group], p)
		}
	}
	bytesOf := func(g string) int64 {
		var n int64
		for _, p := range owned[g] {
			n += p.Bytes
		}
		return n
	}
	// Most loaded first: more partitions, then more bytes, then by name.
	order := func(a, b string) int {
		if c := cmp.Compare(len(owned[b]), len(owned[a])); c != 0 {
			return c
		}
		if c := cmp.Compare(bytesOf(b), bytesOf(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	var plan []PlannedMove
	for {
		gs := slices.Clone(groups)
		slices.SortFunc(gs, order)
		hi, lo := gs[0], gs[len(gs)-1]
		if len(owned[hi])-len(owned[lo]) <= 1 {
			return plan
		}
		cands := owned[hi]
		slices.SortFunc(cands, func(a, b PartitionLoad) int {
			return cmp.Or(cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		p := cands[0]
		owned[hi] = cands[1:]
		p.Group = lo
		owned[lo] = append(owned[lo], p)
		plan = append(plan, PlannedMove{Topic: p.Topic, Partition: p.Partition, From: hi, To: lo, Bytes: p.Bytes})
	}
}
