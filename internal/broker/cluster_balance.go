package broker

import (
	"context"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

// autoBalanceEvery is how often the automatic balancer looks.
const autoBalanceEvery = 10 * time.Second

// autoBalance is Cluster.AutoBalance: the broker whose metadata node
// leads the metadata log moves one partition at a time, as `moonmq
// cluster balance` would (meta.PlanBalance over the user topics, and the
// coordinators' partitions of a draining group), never
// while another move is under way, and only between groups that are
// whole: a live leader with every broker of the group in its ISR, so a
// group that is down or still catching up after a restart takes nothing.
func (c *clusterMode) autoBalance(ctx context.Context) {
	t := time.NewTicker(autoBalanceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.node.Status().Role != "leader" {
			continue
		}
		if m, ok := c.nextBalanceMove(c.current()); ok {
			code, msg := c.startMove(ctx, m.Topic, m.Partition, m.To)
			if code != 0 {
				c.warn("cluster mode: automatic balance: starting a move failed; trying again later", "topic", m.Topic, "partition", m.Partition, "to", m.To, "code", code, "err", msg)
				continue
			}
			c.log.Info("cluster mode: automatic balance: moving a partition", "topic", m.Topic, "partition", m.Partition, "from", m.From, "to", m.To)
		}
	}
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
