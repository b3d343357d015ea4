package txncoord

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

// Run aborts transactions past their timeout, completes decided ones whose
// completion was cut short, and expires idle transactional ids, until ctx
// ends. Only a leader runs it, for as long as it leads.
func (c *Coordinator) Run(ctx context.Context) {
	// Idle ids are expired on their own goroutine: a pass waits for
	// durable writes, and must not hold up timeout aborts.
	var wg sync.WaitGroup
	wg.Go(func() {
		coordinator.Every(ctx, c.cfg.Clock, time.Duration(c.cfg.IDExpirationCheckMs)*time.Millisecond, func(now time.Time) { c.ExpireIDs(ctx, now) })
	})
	coordinator.Every(ctx, c.cfg.Clock, time.Second, func(now time.Time) { c.abortExpired(ctx, now) })
	wg.Wait()
}

// abortExpired aborts (and fences) transactions open longer than their
// timeout, so a dead producer never pins a partition's LSO.
func (c *Coordinator) abortExpired(ctx context.Context, now time.Time) {
	c.mu.Lock()
	var due []*entry
	for _, e := range c.byID {
		if m := e.meta.Load(); m != nil && (m.Expired(now.UnixMilli()) || m.Preparing()) {
			due = append(due, e)
		}
	}
	c.mu.Unlock()
	for _, e := range due {
		e.mu.Lock()
		switch m := e.meta.Load(); {
		case m.Preparing():
			// A decision whose completion was cut short (a failed
			// marker write): finish it, so the LSO moves on and the
			// transaction's offsets apply.
			if err := c.finish(e); err != nil {
				c.log.Error("completing a decided transaction failed; will retry", "transactional_id", m.ID, "err", err)
			}
		case m.Expired(now.UnixMilli()):
			c.log.Warn("aborting a transaction past its timeout", "transactional_id", m.ID, "producer_id", m.ProducerID, "timeout_ms", m.TimeoutMs)
			c.end(ctx, e, false, true, false)
		}
		e.mu.Unlock()
	}
}

// maxTombstonesPerWrite bounds the ids one durable write of ExpireIDs
// deletes (and so the entries it holds locked).
const maxTombstonesPerWrite = 1000

// ExpireIDs deletes the transactional ids that have had no transaction and
// no change for IDExpirationMs as of now (Kafka's
// transactional.id.expiration.ms): their tombstones go to StateTopic in
// batches of up to maxTombstonesPerWrite, one durable write each, before
// the ids leave memory. It returns how many it deleted. An id's next
// InitProducerId starts afresh with a new producer id. Only a broker that
// writes its own state expires ids.
func (c *Coordinator) ExpireIDs(ctx context.Context, now time.Time) int {
	if !c.host.Leading() {
		return 0
	}
	c.mu.Lock()
	var due []*entry
	for _, e := range c.byID {
		if m := e.meta.Load(); m != nil && m.Idle(now.UnixMilli(), c.cfg.IDExpirationMs) {
			due = append(due, e)
		}
	}
	c.mu.Unlock()
	// Each id's tombstone goes to its own partition of StateTopic.
	byPartition := map[int32][]*entry{}
	parts := map[int32]*partition.Partition{}
	for _, e := range due {
		p, err := c.w.Partition(StateTopic, e.meta.Load().ID, stateConfigs())
		if err != nil {
			c.log.Error("expiring idle transactional ids failed; retrying at the next check", "err", err)
			return 0
		}
		byPartition[p.Index] = append(byPartition[p.Index], e)
		parts[p.Index] = p
	}
	// One global order, partition then id: two passes (a test's and the
	// ticker's, or an ending term's and the next one's) that lock
	// entries in different orders could each hold what the other waits
	// for.
	n := 0
	for _, i := range slices.Sorted(maps.Keys(byPartition)) {
		due := byPartition[i]
		slices.SortFunc(due, func(a, b *entry) int { return strings.Compare(a.meta.Load().ID, b.meta.Load().ID) })
		for len(due) > 0 && ctx.Err() == nil {
			k := min(len(due), maxTombstonesPerWrite)
			n += c.expireBatch(ctx, parts[i], due[:k], now)
			due = due[k:]
		}
	}
	return n
}

// expireBatch deletes those of entries that are still idle, with one
// durable write, and returns how many. Entries are locked in turn and
// released together; entries are taken in the order of their ids (the
// caller sorts them), no other path holds two at once, and every path
// takes an entry's mu before c.mu, as this one does.
func (c *Coordinator) expireBatch(ctx context.Context, p *partition.Partition, entries []*entry, now time.Time) int {
	exp := c.cfg.IDExpirationMs
	var locked []*entry
	var metas []*txn.Metadata
	defer func() {
		for _, e := range locked {
			e.mu.Unlock()
		}
	}()
	for _, e := range entries {
		e.mu.Lock()
		locked = append(locked, e)
		if m := e.meta.Load(); !e.removed && m != nil && m.Idle(now.UnixMilli(), exp) {
			metas = append(metas, m)
		}
	}
	if len(metas) == 0 {
		return 0
	}
	recs := make([]recordbatch.Record, len(metas))
	for i, m := range metas {
		recs[i] = recordbatch.Record{Key: txn.EncodeKey(m.ID), Timestamp: now.UnixMilli()}
	}
	var end int64
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
	if err == nil {
		end, err = c.w.Append(p, batch, partition.FlushNow)
	}
	if err == nil {
		err = c.w.Wait(ctx, p, end)
	}
	if err != nil {
		// A tombstone that becomes durable anyway only deletes an id
		// that was idle: its owner's next InitProducerId starts afresh.
		c.log.Error("expiring idle transactional ids failed; retrying at the next check", "ids", len(metas), "err", err)
		return 0
	}
	c.mu.Lock()
	for _, m := range metas {
		e := c.byID[m.ID]
		if e != nil && e.meta.Load() == m {
			delete(c.byID, m.ID)
			if c.byPID[m.ProducerID] == e {
				delete(c.byPID, m.ProducerID)
			}
			e.removed = true
		}
		c.log.Info("expired an idle transactional id", "transactional_id", m.ID, "producer_id", m.ProducerID, "expiration_ms", exp)
	}
	c.mu.Unlock()
	c.cfg.ExpiredIDs.Add(int64(len(metas)))
	return len(metas)
}
