package txncoord

import (
	"context"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

// Load rebuilds the coordinator from StateTopic, as a broker that starts
// leading does: it finishes the transactions whose decision was made but
// not completed, then aborts those that partitions hold open but the
// coordinator does not know (their producer's record was lost).
func (c *Coordinator) Load(ctx context.Context) error {
	if err := c.load(ctx); err != nil {
		return err
	}
	return c.sweepOrphans()
}

// Reload is Load for a replica that starts a new term as leader: what it
// knew of an earlier term is forgotten first, since the topic is the
// whole truth.
func (c *Coordinator) Reload(ctx context.Context) error {
	c.reset()
	return c.Load(ctx)
}

// reset forgets every transactional id.
func (c *Coordinator) reset() {
	c.mu.Lock()
	c.byID = map[string]*entry{}
	c.byPID = map[int64]*entry{}
	c.mu.Unlock()
}

// load reads StateTopic into memory and finishes transactions whose
// decision was made but not completed.
func (c *Coordinator) load(ctx context.Context) error {
	for _, p := range c.host.Owned(StateTopic) {
		if err := c.loadPartition(p); err != nil {
			return err
		}
	}
	return c.resume(ctx, c.entries(func(string) bool { return true }))
}

// LoadPartition makes the transactional ids of one partition of
// StateTopic (of n) this coordinator's, as a move of that partition into
// the broker's replication group hands them over: what it remembered of
// them from an earlier stay is forgotten, their state is read from p (up
// to its high watermark, which the move's cut-over put at the old owner's
// log end), and the transactions decided there but not completed are
// finished, with markers whose coordinator epoch (p's, higher than the
// old owner's) fences the old owner's. The caller answers NOT_COORDINATOR
// for them until it returns.
func (c *Coordinator) LoadPartition(ctx context.Context, p *partition.Partition, n int) error {
	c.UnloadPartition(p.Index, n)
	if err := c.loadPartition(p); err != nil {
		return err
	}
	return c.resume(ctx, c.entries(func(id string) bool { return coordinator.PartitionFor(id, n) == p.Index }))
}

// UnloadPartition forgets the transactional ids of partition index of
// StateTopic (of n), which a move handed to another replication group.
func (c *Coordinator) UnloadPartition(index int32, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.byID {
		if coordinator.PartitionFor(id, n) != index {
			continue
		}
		if m := e.meta.Load(); m != nil {
			delete(c.byPID, m.ProducerID)
		}
		delete(c.byID, id)
	}
}

// entries lists the loaded transactional ids picks chooses.
func (c *Coordinator) entries(picks func(id string) bool) []*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*entry
	for id, e := range c.byID {
		if picks(id) {
			out = append(out, e)
		}
	}
	return out
}

// loadPartition reads one partition of StateTopic into memory. A
// partition holds whole transactional ids (coordinator.PartitionFor), so
// partitions load independently.
func (c *Coordinator) loadPartition(p *partition.Partition) error {
	err := p.Scan(p.Log().StartOffset(), p.HighWatermark(), func(h recordbatch.Header, batch []byte) error {
		recs, err := recordbatch.Records(batch, 64<<20)
		if err != nil {
			return err
		}
		for _, r := range recs {
			id, m, err := txn.Decode(r.Key, r.Value)
			if err != nil {
				c.log.Warn("skipping undecodable transaction state record", "offset", r.Offset, "err", err)
				continue
			}
			e := c.entry(id, true)
			if m == nil {
				c.mu.Lock()
				if old := e.meta.Load(); old != nil {
					delete(c.byPID, old.ProducerID)
				}
				delete(c.byID, id)
				c.mu.Unlock()
				continue
			}
			c.install(e, m)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rebuild transactions from %s/%d: %w", StateTopic, p.Index, err)
	}
	return nil
}

// resume finishes, once their partitions are loaded, what the loaded
// state of entries says is decided but not complete.
func (c *Coordinator) resume(ctx context.Context, entries []*entry) error {
	for _, e := range entries {
		e.mu.Lock()
		err := c.recoverFromMarkers(ctx, e)
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, e := range entries {
		if m := e.meta.Load(); m.Preparing() {
			c.log.Info("completing a transaction decided before the restart", "transactional_id", m.ID, "commit", m.Committing())
			e.mu.Lock()
			err := c.finish(e)
			e.mu.Unlock()
			if err != nil && c.hasRemote(m) {
				// Another group may be down: this group serves
				// meanwhile, and Run retries the markers.
				c.log.Warn("completing a decided transaction over other groups failed; retrying", "transactional_id", m.ID, "err", err)
				continue
			}
			if err != nil {
				return err
			}
		}
	}
	if len(entries) > 0 {
		c.log.Info("rebuilt transaction state", "transactional_ids", len(entries))
	}
	return nil
}

// recoverFromMarkers finds the decision of an Ongoing transaction whose
// EndTxn wrote its decision and markers in one round (see end) and was cut
// short with a marker durable but the decision record lost: a marker of
// the producer at the next epoch can only come from that decision. The
// decision is then written again and completed, so every partition gets
// the same outcome. The caller holds e.mu.
func (c *Coordinator) recoverFromMarkers(ctx context.Context, e *entry) error {
	m := e.meta.Load()
	if m == nil || m.State != kmsg.TransactionStateOngoing || m.Epoch >= math.MaxInt16-2 {
		return nil
	}
	found, commit := false, false
	for tp := range m.Partitions {
		p := c.host.Partition(tp.Topic, tp.Partition)
		if p == nil {
			continue
		}
		mk, ok := p.LastMarker(m.ProducerID)
		if ok && mk.Epoch == m.Epoch+1 {
			found, commit = true, mk.Commit
			break
		}
	}
	if !found {
		return nil
	}
	action, prepared, code := m.End(commit, c.cfg.Clock.Now().UnixMilli())
	if action == txn.EndFail {
		return fmt.Errorf("recovering transaction %q from its markers: %d", m.ID, code)
	}
	prepared.Epoch++
	c.log.Info("completing a transaction whose decision survived only in its markers", "transactional_id", m.ID, "commit", commit)
	if err := c.transition(ctx, e, prepared); err != nil {
		return err
	}
	return c.finish(e)
}

// sweepOrphans aborts transactions that partitions hold open but the
// coordinator does not know as ongoing on them (a lost implicit add, or a
// coordinator record lost with unsynced data): without this a partition's
// LSO would never move again.
func (c *Coordinator) sweepOrphans() error {
	for _, p := range c.host.Partitions() {
		open := p.OpenTransactions()
		for pid := range open {
			e := c.byProducer(pid)
			tp := txn.TP{Topic: p.Topic, Partition: p.Index}
			if e != nil {
				if m := e.meta.Load(); m.State == kmsg.TransactionStateOngoing || m.Preparing() {
					if _, ok := m.Partitions[tp]; ok {
						continue
					}
				}
			}
			c.log.Warn("aborting an orphaned open transaction", "topic", p.Topic, "partition", p.Index, "producer_id", pid)
			// The marker carries the producer's own epoch: it must
			// close the orphan without fencing a live producer.
			epoch, _ := p.ProducerEpoch(pid)
			if e != nil {
				epoch = max(epoch, e.meta.Load().Epoch)
			}
			orphan := &txn.Metadata{ProducerID: pid, Epoch: epoch, Partitions: map[txn.TP]struct{}{tp: {}}}
			if err := c.writeMarkers(orphan, false); err != nil {
				return err
			}
		}
	}
	return nil
}
