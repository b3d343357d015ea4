package broker

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

// autoBalanceEvery is how often the automatic balancer looks.
const autoBalanceEvery = 10 * time.Second

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
// after a restart takes nothing. With no move to make or under way, it
// hands one group's leadership to a member on a machine leading fewer
// groups (meta.PlanLeaders).
func (c *clusterMode) balanceStep(ctx context.Context) {
	v := c.current()
	if m, ok := c.nextBalanceMove(v); ok {
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
// over v's groups: each led by a live broker, its candidates the live
// members of its ISR, and only groups whose ISR is whole (a group
// catching up after a restart keeps its leader).
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
		if len(g.ISR) == len(v.members[id]) {
			for _, m := range g.ISR {
				if v.brokers[m].Live(now) {
					gl.Candidates = append(gl.Candidates, m)
				}
			}
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
func (c *clusterMode) nextBalanceMove(v *clusterView) (meta.PlannedMove, bool) {
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
	plan := meta.PlanBalance(parts, groups, c.drainingGroups())
	if len(plan) == 0 {
		return meta.PlannedMove{}, false
	}
	return plan[0], true
}
