package meta

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
)

// PartitionLoad is one partition as the balancer sees it: its owner
// group, its size on the owner's leader and how fast it grows.
type PartitionLoad struct {
	Topic     string
	Partition int32
	Group     string
	Bytes     int64
	// Rate is the bytes per second appended to it lately: its produce
	// load (0 when idle or not measured).
	Rate float64
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

// A partition's load is the mean of its shares of the partitions, of their
// bytes and of their append rate (a measure nobody has, such as the rate
// when nothing is being written or it was not measured, is left out), so
// the loads of all partitions add up to 1 and a group's load is its share
// of the cluster's work. Each share alone would mislead: counts ignore a
// partition holding most of the data, bytes ignore the hot partition that
// is still small, and rates ignore what sits on disk.
func loadsOf(parts []PartitionLoad) []float64 {
	var bytes int64
	var rate float64
	for _, p := range parts {
		bytes += max(p.Bytes, 0)
		rate += max(p.Rate, 0)
	}
	out := make([]float64, len(parts))
	for i, p := range parts {
		sum, measures := 1/float64(len(parts)), 1.0
		if bytes > 0 {
			sum += float64(max(p.Bytes, 0)) / float64(bytes)
			measures++
		}
		if rate > 0 {
			sum += max(p.Rate, 0) / rate
			measures++
		}
		out[i] = sum / measures
	}
	return out
}

// minMoveGain is the least a move must narrow the gap between the most and
// the least loaded group, as a fraction of a group's fair share of the
// load: a move costs a copy of the partition, and chasing the last crumbs
// of balance would move partitions back and forth as their rates wander.
// Partition counts alone still even out to within one with up to 500
// partitions a group.
const minMoveGain = 0.002

// PlanBalance spreads parts over groups so that the groups' loads (see
// loadsOf: partitions, bytes and append rate together) end as even as
// moves of whole partitions make them. Each move goes from the most to
// the least loaded group and takes the partition that best halves their
// gap, the smaller on a tie (fewer bytes to copy); it stops when no move
// narrows that gap by minMoveGain of a fair share. A group in groups that
// owns nothing yet (a new one) takes its share. Every partition of a
// draining group moves first, pinned ones included, each to the group then
// least loaded (where a pinned one then stays); draining groups take
// nothing and are left out of the balance, as pinned partitions elsewhere
// are. The plan is deterministic:
// ties go by group name, topic and partition. With neither bytes nor
// rates it evens out partition counts.
func PlanBalance(parts []PartitionLoad, groups, draining []string) []PlannedMove {
	b := newBalance(parts, groups, draining)
	if b == nil {
		return nil
	}
	for _, i := range b.off {
		b.move(i, b.least())
	}
	if len(b.keep) < 2 {
		return b.result()
	}
	// Each move lowers the sum of the squared group loads, so this ends;
	// the bound only guards against a float that never settles.
	for range 4*len(parts) + 1 {
		hi, lo := b.most(), b.least()
		gap := b.load[hi] - b.load[lo]
		best, bestGain := -1, b.fair*minMoveGain
		for _, i := range b.owned(hi) {
			w := b.w[i]
			gain := gap - math.Abs(gap-2*w)
			if gain > bestGain+1e-12 || best >= 0 && gain > bestGain-1e-12 && b.smaller(i, best) {
				best, bestGain = i, gain
			}
		}
		if best < 0 {
			break
		}
		b.move(best, lo)
	}
	return b.result()
}

// Imbalance is the gap between the most and least loaded groups not
// draining, as a fraction of a group's fair share (0 balanced, 1 a whole
// share apart), before any move; draining groups' partitions count where
// they are. The automatic balancer leaves groups alone below a threshold.
func Imbalance(parts []PartitionLoad, groups, draining []string) float64 {
	b := newBalance(parts, groups, draining)
	if b == nil || len(b.keep) < 2 || b.fair == 0 {
		return 0
	}
	return (b.load[b.most()] - b.load[b.least()]) / b.fair
}

// balance is PlanBalance's working state.
type balance struct {
	parts []PartitionLoad
	w     []float64          // each partition's load
	keep  []string           // the groups that take partitions
	load  map[string]float64 // each kept group's load
	off   []int              // partitions of draining groups, in moving order
	fair  float64            // a kept group's fair share
	plan  []PlannedMove
	step  map[int]int // partition -> its move in plan
}

func newBalance(parts []PartitionLoad, groups, draining []string) *balance {
	b := &balance{load: map[string]float64{}, step: map[int]int{}}
	for _, g := range groups {
		if !slices.Contains(draining, g) && !slices.Contains(b.keep, g) {
			b.keep = append(b.keep, g)
			b.load[g] = 0
		}
	}
	if len(b.keep) == 0 {
		return nil // nowhere to go
	}
	slices.Sort(b.keep)
	for _, p := range parts {
		if slices.Contains(draining, p.Group) || !p.Pinned {
			b.parts = append(b.parts, p)
		}
	}
	if len(b.parts) == 0 {
		return b
	}
	b.w = loadsOf(b.parts)
	for i, p := range b.parts {
		if slices.Contains(draining, p.Group) {
			b.off = append(b.off, i)
		} else if _, ok := b.load[p.Group]; ok {
			b.load[p.Group] += b.w[i]
		}
	}
	// Off a draining group the smallest go first: each is soon safe
	// elsewhere.
	slices.SortFunc(b.off, func(x, y int) int {
		if b.smaller(x, y) {
			return -1
		}
		return 1
	})
	var total float64
	for i := range b.parts {
		total += b.w[i]
	}
	b.fair = total / float64(len(b.keep))
	return b
}

// smaller orders partitions by bytes, then topic and partition.
func (b *balance) smaller(x, y int) bool {
	p, q := b.parts[x], b.parts[y]
	return cmp.Or(cmp.Compare(p.Bytes, q.Bytes), cmp.Compare(p.Topic, q.Topic), cmp.Compare(p.Partition, q.Partition)) < 0
}

// most and least are the kept groups with the highest and lowest load,
// ties by name.
func (b *balance) most() string {
	return slices.MaxFunc(b.keep, func(x, y string) int { return cmp.Or(cmp.Compare(b.load[x], b.load[y]), cmp.Compare(y, x)) })
}

func (b *balance) least() string {
	return slices.MinFunc(b.keep, func(x, y string) int { return cmp.Or(cmp.Compare(b.load[x], b.load[y]), cmp.Compare(x, y)) })
}

// owned lists the movable partitions g owns, smallest first.
func (b *balance) owned(g string) []int {
	var out []int
	for i, p := range b.parts {
		if p.Group == g && !p.Pinned {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(x, y int) int {
		if b.smaller(x, y) {
			return -1
		}
		return 1
	})
	return out
}

// move plans partition i's move to group to. A partition moved before in
// the plan (off a draining group, then for balance) goes straight to
// where it ends: it is copied once.
func (b *balance) move(i int, to string) {
	p := &b.parts[i]
	if j, ok := b.step[i]; ok {
		b.plan[j].To = to
	} else {
		b.step[i] = len(b.plan)
		b.plan = append(b.plan, PlannedMove{Topic: p.Topic, Partition: p.Partition, From: p.Group, To: to, Bytes: p.Bytes})
	}
	if _, ok := b.load[p.Group]; ok {
		b.load[p.Group] -= b.w[i]
	}
	b.load[to] += b.w[i]
	p.Group = to // a pinned one counts where it lands, and stays there
}

// result is the plan without the moves that came back where they began.
func (b *balance) result() []PlannedMove {
	var out []PlannedMove
	for _, m := range b.plan {
		if m.To != m.From {
			out = append(out, m)
		}
	}
	return out
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

// PreferredLeaders picks each group's preferred leader: the member
// Metadata lists first and ElectLeaders (KIP-460's preferred election)
// hands the group's leadership to. Groups in name order each take the
// member on the machine that the fewest groups prefer so far (machineOf:
// each broker's machine), the lowest broker id on a tie, so the preferred
// leaders spread over machines as evenly as the members allow. It depends
// only on which brokers are registered where, so it stays put across
// failovers: electing the preferred leaders undoes what failovers piled
// onto one machine.
func PreferredLeaders(members map[string][]int32, machineOf map[int32]string) map[string]int32 {
	out := map[string]int32{}
	prefer := map[string]int{}
	for _, g := range slices.Sorted(maps.Keys(members)) {
		best := int32(-1)
		for _, id := range members[g] {
			if best < 0 || prefer[machineOf[id]] < prefer[machineOf[best]] ||
				prefer[machineOf[id]] == prefer[machineOf[best]] && id < best {
				best = id
			}
		}
		if best >= 0 {
			out[g] = best
			prefer[machineOf[best]]++
		}
	}
	return out
}
