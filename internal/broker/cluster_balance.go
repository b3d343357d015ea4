package broker

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

// autoBalanceEvery is how often the automatic balancer looks, and the
// interval over which it measures the partitions' append rates.
const autoBalanceEvery = 10 * time.Second

// autoBalanceFrom is the imbalance (meta.Imbalance: the gap between the
// most and least loaded groups, as a fraction of a fair share) from which
// the automatic balancer moves partitions. Below it the groups are left
// alone: append rates wander, and a partition moved for a few percent
// would soon be moved back.
const autoBalanceFrom = 0.1

// autoBalance is Cluster.AutoBalance: every autoBalanceEvery, the broker
// whose metadata node leads the metadata log takes one balancing step.
func (c *clusterMode) autoBalance(ctx context.Context) {
	c.b.every(ctx, autoBalanceEvery, func(time.Time) {
		if c.node.Status().Role == "leader" {
			c.balanceStep(ctx)
		}
	})
}

// balanceStep starts one move, as `moonmq cluster balance` would
// (meta.PlanBalance over the user topics, and the coordinators'
// partitions of a draining group), never while another is under way and
// only between groups that are whole: a live leader with every broker of
// the group in its ISR, so a group that is down or still catching up
// after a restart takes nothing. It weighs the partitions' sizes and
// their append rates over the last interval, as each group's leader
// reports them (so it moves nothing in its first interval as the
// balancing broker), and moves only from an imbalance of
// autoBalanceFrom. With no move to make or under way, it hands one
// group's leadership to its preferred leader when that is on a machine
// leading fewer groups (meta.PlanLeaders).
func (c *clusterMode) balanceStep(ctx context.Context) {
	v := c.current()
	if m, ok := c.nextBalanceMove(ctx, v); ok {
		if code, msg := c.startMove(ctx, m.Topic, m.Partition, m.To); code != 0 {
			c.warn("cluster mode: automatic balance: starting a move failed; trying again later", "topic", m.Topic, "partition", m.Partition, "to", m.To, "code", code, "err", msg)
			return
		}
		c.log.Info("cluster mode: automatic balance: moving a partition", "topic", m.Topic, "partition", m.Partition, "from", m.From, "to", m.To)
		return
	}
	if moving(v) {
		return
	}
	g, to, ok := c.nextLeaderTransfer(v)
	if !ok {
		return
	}
	from := v.groups[g].Leader
	if err := c.transferLeadership(ctx, from, to); err != nil {
		c.warn("cluster mode: automatic balance: moving a group's leadership failed; trying again later", "group", g, "from", from, "to", to, "err", err)
		return
	}
	c.log.Info("cluster mode: automatic balance: moving a group's leadership to another machine", "group", g, "from", from, "to", to,
		"from_machine", v.brokers[from].Machine, "to_machine", v.brokers[to].Machine)
}

// moving reports whether any partition is moving.
func moving(v *clusterView) bool {
	for _, t := range v.topics {
		for _, p := range t.Partitions {
			if p.Move != meta.MoveNone {
				return true
			}
		}
	}
	return false
}

// nextLeaderTransfer is the leadership transfer meta.PlanLeaders picks
// over v's groups: each led by a live broker, the one candidate of each
// its preferred leader (meta.PreferredLeaders) when that is live and in
// the group's ISR, and only groups whose ISR is whole (a group catching
// up after a restart keeps its leader). Only the preferred leader, the
// one ElectLeaders and `moonmq cluster balance` elect: two policies
// choosing different members would undo each other's transfers.
func (c *clusterMode) nextLeaderTransfer(v *clusterView) (string, int32, bool) {
	now := c.leaseNowMs()
	machineOf := map[int32]string{}
	for id, b := range v.brokers {
		machineOf[id] = b.Machine
	}
	var groups []meta.GroupLeadership
	for id, g := range v.groups {
		if g.Leader < 0 || !v.brokers[g.Leader].Live(now) {
			return "", 0, false // a group without a leader: not now
		}
		gl := meta.GroupLeadership{Group: id, Leader: g.Leader}
		pref, ok := v.preferred[id]
		if ok && len(g.ISR) == len(v.members[id]) && slices.Contains(g.ISR, pref) && v.brokers[pref].Live(now) {
			gl.Candidates = []int32{pref}
		}
		groups = append(groups, gl)
	}
	return meta.PlanLeaders(groups, machineOf)
}

// PathLeaderTransfer asks a group's leader to hand its leadership to
// another member of its group.
const PathLeaderTransfer = "/cluster/leader/transfer"

type leaderTransferRequest struct {
	To int32 `json:"to"`
}

// transferLeadership asks broker from, a group's leader, to hand its
// leadership to to.
func (c *clusterMode) transferLeadership(ctx context.Context, from, to int32) error {
	var ans struct {
		Error string `json:"error,omitempty"`
	}
	if err := c.call(ctx, from, PathLeaderTransfer, leaderTransferRequest{To: to}, &ans); err != nil {
		return err
	}
	if ans.Error != "" {
		return errors.New(ans.Error)
	}
	return nil
}

// serveLeaderTransfer starts this group leader's hand-over to the member
// asked for (raftgroup.Node.TransferLeadership): a planned failover.
func (c *clusterMode) serveLeaderTransfer(w http.ResponseWriter, hr *http.Request) {
	var req leaderTransferRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
	defer cancel()
	var ans struct {
		Error string `json:"error,omitempty"`
	}
	if err := c.b.repl.node.TransferLeadership(ctx, req.To); err != nil {
		ans.Error = err.Error()
	} else {
		c.log.Info("cluster mode: handing this group's leadership to another member", "to", req.To)
	}
	writeJSON(w, ans)
}

// drainingGroups are the groups meta.DrainingGroupsConfig names.
func (c *clusterMode) drainingGroups() []string {
	var out []string
	c.node.Read(func(s *meta.State, _ uint64) { out = s.DrainingGroups() })
	return out
}

// nextBalanceMove is the first move of the balance plan over v, if no move
// is under way.
func (c *clusterMode) nextBalanceMove(ctx context.Context, v *clusterView) (meta.PlannedMove, bool) {
	now := c.leaseNowMs()
	var groups []string
	for id, g := range v.groups {
		live := 0
		for _, b := range v.members[id] {
			if v.brokers[b].Live(now) {
				live++
			}
		}
		if g.Leader >= 0 && live > 0 && len(g.ISR) == len(v.members[id]) {
			groups = append(groups, id)
		}
	}
	slices.Sort(groups)
	var parts []meta.PartitionLoad
	for name, t := range v.topics {
		pinned := slices.Contains(coordTopics, name)
		if internalTopic(name) && !pinned {
			continue
		}
		for _, p := range t.Partitions {
			if p.Move != meta.MoveNone {
				return meta.PlannedMove{}, false // one at a time
			}
			parts = append(parts, meta.PartitionLoad{Topic: name, Partition: p.Partition, Group: p.Owner, Pinned: pinned})
		}
	}
	draining := c.drainingGroups()
	measured := c.measureLoads(ctx, v, parts)
	drain := false
	for _, p := range parts {
		drain = drain || slices.Contains(draining, p.Group)
	}
	// Draining does not wait for measures: a partition leaves a
	// draining group whatever it weighs.
	if !drain && (!measured || meta.Imbalance(parts, groups, draining) < autoBalanceFrom) {
		return meta.PlannedMove{}, false
	}
	plan := meta.PlanBalance(parts, groups, draining)
	if len(plan) == 0 {
		return meta.PlannedMove{}, false
	}
	return plan[0], true
}

// PathLoad asks a group's leader for the sizes of the partitions it
// serves.
const PathLoad = "/cluster/load"

// partitionSize is one partition's size in a PathLoad answer.
type partitionSize struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Bytes     int64  `json:"bytes"`
}

// serveLoad answers the automatic balancer with the sizes of the
// partitions this group owns.
func (c *clusterMode) serveLoad(w http.ResponseWriter, hr *http.Request) {
	var req struct{}
	if !c.readJSON(w, hr, &req) {
		return
	}
	v := c.current()
	var ans struct {
		Partitions []partitionSize `json:"partitions"`
	}
	for _, t := range c.b.sortedTopics() {
		mt, ok := v.topics[t.name]
		if !ok {
			continue
		}
		for i, p := range t.partitions {
			if i < len(mt.Partitions) && mt.Partitions[i].Owner == c.group {
				ans.Partitions = append(ans.Partitions, partitionSize{Topic: t.name, Partition: int32(i), Bytes: p.Log().Size()})
			}
		}
	}
	writeJSON(w, ans)
}

// loadSample is the partitions' sizes as the automatic balancer last read
// them from the groups' leaders. It belongs to the balancing loop's one
// goroutine (autoBalance).
type loadSample struct {
	at    time.Time
	bytes map[sizeKey]ownedSize
}

// ownedSize is a partition's size on the leader of the group owning it.
type ownedSize struct {
	group string
	bytes int64
}

// measureLoads sets parts' Bytes from each group leader's answer and
// their Rate from the growth since the last sample; false when a group's
// leader did not answer or there is no earlier sample to measure rates
// against (then only a draining group's partitions should move).
func (c *clusterMode) measureLoads(ctx context.Context, v *clusterView, parts []meta.PartitionLoad) bool {
	now := c.b.clock.Now()
	cur := loadSample{at: now, bytes: map[sizeKey]ownedSize{}}
	ok := true
	for id, g := range v.groups {
		var ans struct {
			Partitions []partitionSize `json:"partitions"`
		}
		if g.Leader < 0 {
			ok = false
			continue
		}
		if err := c.call(ctx, g.Leader, PathLoad, struct{}{}, &ans); err != nil {
			c.warn("cluster mode: automatic balance: a group's leader did not report its partitions' sizes; not balancing until it does", "group", id, "leader", g.Leader, "err", err)
			ok = false
			continue
		}
		for _, p := range ans.Partitions {
			cur.bytes[sizeKey{Topic: p.Topic, Partition: p.Partition}] = ownedSize{group: id, bytes: p.Bytes}
		}
	}
	prev := c.lastLoad
	c.lastLoad = cur
	secs := now.Sub(prev.at).Seconds()
	for i := range parts {
		p := &parts[i]
		tp := sizeKey{Topic: p.Topic, Partition: p.Partition}
		is, seen := cur.bytes[tp]
		if !seen || is.group != p.Group {
			continue
		}
		p.Bytes = is.bytes
		// A move copies a partition byte for byte, so its growth
		// counts across one; one that shrank (retention) counts as
		// idle for this interval.
		if was, ok := prev.bytes[tp]; ok && is.bytes > was.bytes && secs > 0 {
			p.Rate = float64(is.bytes-was.bytes) / secs
		}
	}
	return ok && prev.bytes != nil
}

// sizeKey names a partition in a loadSample.
type sizeKey struct {
	Topic     string
	Partition int32
}
