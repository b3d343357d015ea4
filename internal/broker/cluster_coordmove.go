package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/txncoord"
)

// Moving a coordinators' partition (of __consumer_offsets or
// __transaction_state) between groups is a move like any other
// (cluster_move.go); what is special is the coordinators' state in memory,
// which follows the partition:
//
//   - While the old owner's copy is fenced, and once another group owns
//     the partition, its keys are answered NOT_COORDINATOR here, so
//     clients look the coordinator up again. FindCoordinator names the
//     owner's leader, which is the old owner until the cut-over.
//   - The new owner's leader loads the partition's groups or
//     transactional ids from its copy before it coordinates them, and
//     finishes the transactions decided there; until then it answers
//     NOT_COORDINATOR for them too.
//   - The old owner's leader forgets them, so it lists no group or
//     transaction it no longer coordinates.
//
// A replica that starts leading its group reloads every partition its
// group owns, so the hand-overs noted before that are dropped at its
// start.

// coordHandovers are the coordinators' partitions whose ownership changed
// in the metadata and that this broker's coordinators have not yet
// loaded (true) or forgotten (false).
type coordHandovers struct {
	mu      sync.Mutex
	pending map[coordPart]bool
}

// coordPart names a partition of a coordinators' topic.
type coordPart struct {
	topic string
	index int32
}

// coordTopics are the topics whose partitions hold coordinators' state.
var coordTopics = []string{offsetsTopic, txncoord.StateTopic}

// noteHandoversLocked notes the coordinators' partitions that v gives to
// this group or takes from it, compared with old (nil: the first view,
// from which nothing changes: the start loaded every partition). The
// caller holds placeMu and publishes v after this, so no key of such a
// partition is coordinated before it is noted.
func (c *clusterMode) noteHandoversLocked(old, v *clusterView) {
	if old == nil {
		return
	}
	c.handovers.mu.Lock()
	defer c.handovers.mu.Unlock()
	for _, name := range coordTopics {
		nt, ok := v.topics[name]
		ot, ook := old.topics[name]
		if !ok || !ook || nt.ID != ot.ID || len(nt.Partitions) != len(ot.Partitions) {
			continue
		}
		for i := range nt.Partitions {
			was, is := ot.Partitions[i].Owner == c.group, nt.Partitions[i].Owner == c.group
			if was == is {
				continue
			}
			if c.handovers.pending == nil {
				c.handovers.pending = map[coordPart]bool{}
			}
			c.handovers.pending[coordPart{name, int32(i)}] = is
		}
	}
}

// handingOver reports whether a coordinators' partition owned by this
// group is not to be coordinated here now: it came in by a move and is
// not loaded yet, or a move out has fenced this group's copy.
func (c *clusterMode) handingOver(topic string, index int32) bool {
	c.handovers.mu.Lock()
	_, pending := c.handovers.pending[coordPart{topic, index}]
	c.handovers.mu.Unlock()
	if pending {
		return true
	}
	t := c.local(topic)
	if t == nil || int(index) >= len(t.partitions) {
		return true
	}
	return placementOf(t.partitions[index]).moved.Load()
}

// dropHandovers forgets every hand-over noted so far: this broker starts
// leading and reloads every partition its group owns. It runs before the
// reload reads which ones those are, so one noted later is loaded again
// by the leader pass.
func (c *clusterMode) dropHandovers() {
	c.handovers.mu.Lock()
	c.handovers.pending = nil
	c.handovers.mu.Unlock()
}

// handOverCoordinators loads and forgets, on the group's leader, what the
// noted hand-overs say. A failed one stays noted and is tried again at
// the next pass.
func (c *clusterMode) handOverCoordinators(ctx context.Context) {
	c.handovers.mu.Lock()
	todo := make(map[coordPart]bool, len(c.handovers.pending))
	for k, v := range c.handovers.pending {
		todo[k] = v
	}
	c.handovers.mu.Unlock()
	for part, load := range todo {
		err := c.handOver(ctx, part, load)
		if err != nil {
			c.warn("cluster mode: handing a coordinators' partition over failed; retrying", "topic", part.topic, "partition", part.index, "load", load, "err", err)
			continue
		}
		c.handovers.mu.Lock()
		if cur, ok := c.handovers.pending[part]; ok && cur == load {
			delete(c.handovers.pending, part)
		}
		c.handovers.mu.Unlock()
		what := "loaded the coordinators' partition moved into this group"
		if !load {
			what = "forgot the coordinators' partition moved to another group"
		}
		c.log.Info("cluster mode: "+what, "topic", part.topic, "partition", part.index)
	}
}

// handOver loads or forgets one coordinators' partition.
func (c *clusterMode) handOver(ctx context.Context, part coordPart, load bool) error {
	t := c.local(part.topic)
	if t == nil || int(part.index) >= len(t.partitions) {
		return fmt.Errorf("no local copy of %s/%d", part.topic, part.index)
	}
	p, n := t.partitions[part.index], len(t.partitions)
	b := c.b
	if !load {
		if part.topic == offsetsTopic {
			b.groups.UnloadPartition(part.index, n)
		} else {
			b.txns.UnloadPartition(part.index, n)
		}
		return nil
	}
	// Everything copied must be committed in this group before it is
	// read: the cut-over waited for that, but a new leader of this group
	// may not have caught up yet.
	end := p.Log().EndOffset()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !waitFor(wctx, func() bool { return p.HighWatermark() >= end }) {
		return fmt.Errorf("the high watermark %d did not reach the log end %d", p.HighWatermark(), end)
	}
	if part.topic == offsetsTopic {
		return b.groups.LoadPartition(p, n)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return b.txns.LoadPartition(lctx, p, n)
}
