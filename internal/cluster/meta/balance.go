package meta

import (
	"cmp"
	"slices"
	"strings"
)

// PartitionLoad is one partition as the balancer sees it: its owner
// group and its size on the owner's leader.
type PartitionLoad struct {
	Topic     string
	Partition int32
	Group     string
	Bytes     int64
	// Pinned partitions (the coordinators' topics) are not spread for
	// balance; they move only off a draining group.
	Pinned bool
}

// DrainingGroupsConfig is the cluster-wide broker config (resource
// broker, name "", set with IncrementalAlterConfigs) listing the groups
// being drained before they are removed: no new partition is placed on
// them, and balancing moves every partition they own, the coordinators'
// included, to the other groups.
const DrainingGroupsConfig = "moonmq.draining.groups"

// DrainingGroups lists the groups DrainingGroupsConfig names.
func (s *State) DrainingGroups() []string {
	return ParseGroupList(s.Configs(ResourceBroker, "")[DrainingGroupsConfig])
}

// ParseGroupList splits a comma-separated list of group ids, dropping
// blanks and repeats, sorted.
func ParseGroupList(v string) []string {
	var out []string
	for _, g := range strings.Split(v, ",") {
		if g = strings.TrimSpace(g); g != "" && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
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
// in groups that owns nothing yet (a new one) takes its share. Every
// partition of a draining group moves first, pinned ones included, each
// to the group then owning the fewest; draining groups take nothing and
// are left out of the balance. The plan is deterministic: ties go by
// topic and partition.
func PlanBalance(parts []PartitionLoad, groups, draining []string) []PlannedMove {
	var plan []PlannedMove
	var keep []string
	for _, g := range groups {
		if !slices.Contains(draining, g) {
			keep = append(keep, g)
		}
	}
	owned := map[string][]PartitionLoad{}
	for _, g := range keep {
		owned[g] = nil
	}
	var off []PartitionLoad
	for _, p := range parts {
		switch {
		case slices.Contains(draining, p.Group):
			off = append(off, p)
		case p.Pinned:
		default:
			if _, ok := owned[p.Group]; ok {
				owned[p.Group] = append(owned[p.Group], p)
			}
		}
	}
	if len(keep) == 0 {
		return nil // nowhere to go
	}
	slices.SortFunc(off, func(a, b PartitionLoad) int {
		return cmp.Or(cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	counts := map[string]int{}
	for g, ps := range owned {
		counts[g] = len(ps)
	}
	for _, p := range off {
		to := slices.MinFunc(keep, func(a, b string) int { return cmp.Or(cmp.Compare(counts[a], counts[b]), cmp.Compare(a, b)) })
		counts[to]++
		plan = append(plan, PlannedMove{Topic: p.Topic, Partition: p.Partition, From: p.Group, To: to, Bytes: p.Bytes})
		if !p.Pinned {
			p.Group = to
			owned[to] = append(owned[to], p)
		}
	}
	if len(keep) < 2 {
		return plan
	}
	groups = keep
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

// GroupLeadership is one group as the leadership balancer sees it: its
// leader and the members that may take over (in its ISR, live).
type GroupLeadership struct {
	Group      string
	Leader     int32
	Candidates []int32
}

// PlanLeaders picks one leadership transfer that spreads the groups'
// leaders more evenly over machines (machineOf: each broker's machine):
// from a leader on a machine leading at least two groups more than the
// candidate's machine. Groups on the most loaded machines go first; the
// plan is deterministic. ok is false when no transfer helps.
func PlanLeaders(groups []GroupLeadership, machineOf map[int32]string) (group string, to int32, ok bool) {
	led := map[string]int{}
	for _, g := range groups {
		for _, c := range g.Candidates {
			if _, seen := led[machineOf[c]]; !seen {
				led[machineOf[c]] = 0
			}
		}
	}
	for _, g := range groups {
		led[machineOf[g.Leader]]++
	}
	order := slices.Clone(groups)
	slices.SortFunc(order, func(a, b GroupLeadership) int {
		return cmp.Or(cmp.Compare(led[machineOf[b.Leader]], led[machineOf[a.Leader]]), cmp.Compare(a.Group, b.Group))
	})
	for _, g := range order {
		from := led[machineOf[g.Leader]]
		best, bestLed := int32(-1), 0
		for _, c := range g.Candidates {
			if c == g.Leader {
				continue
			}
			if n := led[machineOf[c]]; best < 0 || n < bestLed || n == bestLed && c < best {
				best, bestLed = c, n
			}
		}
		if best >= 0 && from-bestLed >= 2 {
			return g.Group, best, true
		}
	}
	return "", 0, false
}
