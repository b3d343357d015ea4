package groupcoord

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

// Record formats of __consumer_offsets, as Kafka writes them (kmsg's
// OffsetCommitKey v1 and OffsetCommitValue v3), so that tools that decode
// Kafka's internal topic can read ours.
const (
	offsetKeyVersion   = 1
	offsetValueVersion = 3
)

type offsetKey struct {
	group, topic string
	partition    int32
}

// committed is one committed offset and where in __consumer_offsets it was
// written; the log position orders concurrent commits.
type committed struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	logOffset   int64
	commitMs    int64 // when it was committed (the record's CommitTimestamp)
}

// offsetStore is the in-memory view of __consumer_offsets.
type offsetStore struct {
	// writes is held shared by every commit from its append to
	// __consumer_offsets until it is applied here, and exclusively by the
	// offsets-retention pass, so that an expiry tombstone is never
	// appended after a commit it did not see (on a reload the tombstone
	// would delete that acknowledged commit).
	writes sync.RWMutex
	mu     sync.RWMutex
	byKey  map[offsetKey]committed
	groups map[string]map[offsetKey]struct{}
	// pending holds transactional commits by producer id until their
	// transaction's marker decides them.
	pending map[int64][]offsetWrite
	// emptySince is what the group-metadata records say: since when
	// each group has been empty (groupstate.go). metaMu serialises the
	// writers of those records.
	emptySince map[string]time.Time
	metaMu     sync.Mutex
}

func newOffsetStore() *offsetStore {
	return &offsetStore{byKey: map[offsetKey]committed{}, groups: map[string]map[offsetKey]struct{}{},
		pending: map[int64][]offsetWrite{}, emptySince: map[string]time.Time{}}
}

// addPending holds transactional commits until their transaction ends.
func (s *offsetStore) addPending(pid int64, writes []offsetWrite) {
	s.mu.Lock()
	s.pending[pid] = append(s.pending[pid], writes...)
	s.mu.Unlock()
}

// hasPending reports whether a transactional commit for k awaits its
// transaction's outcome (OffsetFetch with RequireStable must not answer yet).
func (s *offsetStore) hasPending(k offsetKey) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, writes := range s.pending {
		for _, w := range writes {
			if w.key == k {
				return true
			}
		}
	}
	return false
}

// EndTxn applies (commit) or drops (abort) the offsets that producer pid
// committed in its transaction, once the transaction's marker is written
// to Topic.
func (c *Coordinator) EndTxn(pid int64, commit bool) { c.offsets.endTxn(pid, commit) }

// endTxn applies (commit) or drops (abort) a producer's pending commits.
func (s *offsetStore) endTxn(pid int64, commit bool) {
	s.mu.Lock()
	writes := s.pending[pid]
	delete(s.pending, pid)
	s.mu.Unlock()
	if commit {
		for _, w := range writes {
			s.apply(w.key, w.value, w.tombstone)
		}
	}
}

// apply records a commit (or, with tombstone, a deletion) read from or
// written to the log at logOffset. Older log positions never overwrite
// newer ones.
func (s *offsetStore) apply(k offsetKey, c committed, tombstone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.byKey[k]; ok && cur.logOffset > c.logOffset {
		return
	}
	if tombstone {
		delete(s.byKey, k)
		if g := s.groups[k.group]; g != nil {
			delete(g, k)
			if len(g) == 0 {
				delete(s.groups, k.group)
			}
		}
		return
	}
	s.byKey[k] = c
	g := s.groups[k.group]
	if g == nil {
		g = map[offsetKey]struct{}{}
		s.groups[k.group] = g
	}
	g[k] = struct{}{}
}

func (s *offsetStore) get(k offsetKey) (committed, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.byKey[k]
	return c, ok
}

// groupKeys lists a group's committed partitions.
func (s *offsetStore) groupKeys(group string) []offsetKey {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]offsetKey, 0, len(s.groups[group]))
	for k := range s.groups[group] {
		keys = append(keys, k)
	}
	return keys
}

func (s *offsetStore) groupNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.groups))
	for g := range s.groups {
		names = append(names, g)
	}
	return names
}

// all copies every committed offset.
func (s *offsetStore) all() map[offsetKey]committed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.byKey)
}

// offsetWrite is one record for __consumer_offsets.
type offsetWrite struct {
	key       offsetKey
	value     committed
	tombstone bool
}

func encodeOffsetRecord(w offsetWrite, now time.Time) recordbatch.Record {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: w.key.group, Topic: w.key.topic, Partition: w.key.partition}
	rec := recordbatch.Record{Key: k.AppendTo(nil), Timestamp: now.UnixMilli()}
	if !w.tombstone {
		v := kmsg.NewOffsetCommitValue()
		v.Version = offsetValueVersion
		v.Offset = w.value.offset
		v.LeaderEpoch = w.value.leaderEpoch
		v.Metadata = w.value.metadata
		v.CommitTimestamp = now.UnixMilli()
		rec.Value = v.AppendTo(nil)
	}
	return rec
}

// decodeOffsetRecord turns a __consumer_offsets record back into a write.
// Group-metadata records (key version 2) are skipped: membership is not
// persisted.
func decodeOffsetRecord(r recordbatch.Record) (offsetWrite, bool, error) {
	var k kmsg.OffsetCommitKey
	if err := k.ReadFrom(r.Key); err != nil {
		return offsetWrite{}, false, err
	}
	if k.Version > 1 {
		return offsetWrite{}, false, nil
	}
	w := offsetWrite{key: offsetKey{k.Group, k.Topic, k.Partition}, tombstone: r.Value == nil}
	w.value.logOffset = r.Offset
	if !w.tombstone {
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(r.Value); err != nil {
			return offsetWrite{}, false, err
		}
		w.value.offset, w.value.leaderEpoch, w.value.metadata = v.Offset, v.LeaderEpoch, v.Metadata
		w.value.commitMs = v.CommitTimestamp
		if v.Version < 3 {
			w.value.leaderEpoch = -1
		}
	}
	return w, true, nil
}

// load rebuilds the offset store from the partitions of __consumer_offsets
// this broker coordinates.
func (c *Coordinator) load() error {
	n := 0
	for _, p := range c.host.Owned(Topic) {
		m, err := c.loadPartition(p)
		if err != nil {
			return err
		}
		n += m
	}
	if n > 0 {
		c.log.Info("rebuilt committed offsets", "records", n, "groups", len(c.offsets.groupNames()))
	}
	return nil
}

// loadPartition adds one partition of __consumer_offsets to the offset
// store and returns how many offset records it read. A partition holds
// whole groups (PartitionFor), so partitions load independently.
func (c *Coordinator) loadPartition(p *partition.Partition) (int, error) {
	n := 0
	// Scan, not recordbatch.Split: compaction leaves batches with
	// fewer records than their offset span, which Split (a check for
	// producer-written batches) refuses.
	err := p.Scan(p.Log().StartOffset(), p.HighWatermark(), func(h recordbatch.Header, batch []byte) error {
		recs, err := recordbatch.Records(batch, 64<<20)
		if err != nil {
			return fmt.Errorf("%s batch at %d: %w", Topic, h.BaseOffset, err)
		}
		if h.Control() {
			if len(recs) > 0 {
				if typ, err := txn.ParseControlKey(recs[0].Key); err == nil {
					c.offsets.endTxn(h.ProducerID, typ == txn.ControlCommit)
				}
			}
			return nil
		}
		var txnWrites []offsetWrite
		for _, r := range recs {
			if v, err := keyVersion(r.Key); err == nil && v >= groupMetaKeyVersion {
				g, since, empty, err := decodeGroupMeta(r)
				if err != nil {
					c.log.Warn("skipping undecodable group-metadata record", "offset", r.Offset, "err", err)
				} else {
					c.offsets.setEmptySince(g, since, empty)
				}
				continue
			}
			w, ok, err := decodeOffsetRecord(r)
			if err != nil {
				c.log.Warn("skipping undecodable committed-offset record", "offset", r.Offset, "err", err)
				continue
			}
			if !ok {
				continue
			}
			n++
			if h.Transactional() {
				txnWrites = append(txnWrites, w)
			} else {
				c.offsets.apply(w.key, w.value, w.tombstone)
			}
		}
		if len(txnWrites) > 0 {
			c.offsets.addPending(h.ProducerID, txnWrites)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("rebuild committed offsets from %s/%d: %w", Topic, p.Index, err)
	}
	return n, nil
}

// writeTxnOffsets appends a transaction's offset commits to
// __consumer_offsets as a transactional batch; they apply when the
// transaction's commit marker is written.
func (c *Coordinator) writeTxnOffsets(ctx context.Context, group string, pid int64, epoch int16, writes []offsetWrite) error {
	p, err := c.partitionFor(group)
	if err != nil {
		return err
	}
	c.offsets.writes.RLock()
	defer c.offsets.writes.RUnlock()
	now := c.cfg.Clock.Now()
	recs := make([]recordbatch.Record, len(writes))
	for i, w := range writes {
		writes[i].value.commitMs = now.UnixMilli()
		recs[i] = encodeOffsetRecord(w, now)
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, Transactional: true}, recs)
	if err != nil {
		return err
	}
	end, err := c.w.Append(p, batch, partition.FlushNow)
	if err != nil {
		return err
	}
	// Pending at once, whatever the wait brings: the batch is in the log,
	// and a restart would replay it, so memory must hold it too.
	base := end - int64(len(writes))
	for i := range writes {
		writes[i].value.logOffset = base + int64(i)
	}
	c.offsets.addPending(pid, writes)
	return c.w.Wait(ctx, p, end)
}

// startOffsetWrite appends writes now, in the caller's goroutine, and
// returns the wait that makes them durable and then applies them to memory.
// A request handler calls it before it returns, so that commits pipelined
// on one connection reach the log in the order they were sent: Kafka
// handles a connection's requests one at a time, and sarama sends a commit
// from each partition's goroutine without waiting for the last one. Were
// the appends made by the waits, which run side by side, an older commit
// could land after a newer one and win. The returned function must be
// called exactly once: it holds c.offsets.writes shared until it returns.
func (c *Coordinator) startOffsetWrite(writes []offsetWrite) func(context.Context) error {
	c.offsets.writes.RLock()
	a, err := c.appendOffsets(writes, false)
	if err != nil {
		c.offsets.writes.RUnlock()
		return func(context.Context) error { return err }
	}
	return func(ctx context.Context) error {
		defer c.offsets.writes.RUnlock()
		return a.wait(ctx)
	}
}

// partitionBatch is the items of one write that go to one partition of
// Topic.
type partitionBatch[T any] struct {
	p     *partition.Partition
	items []T
}

// splitByPartition splits items by the partition of Topic holding each
// one's group (coordinator.PartitionFor), in the order partitions first
// appear: a write touching several groups writes one batch to each.
func splitByPartition[T any](c *Coordinator, items []T, group func(T) string) ([]*partitionBatch[T], error) {
	var parts []*partitionBatch[T]
	byIndex := map[int32]*partitionBatch[T]{}
	for _, it := range items {
		p, err := c.partitionFor(group(it))
		if err != nil {
			return nil, err
		}
		pt := byIndex[p.Index]
		if pt == nil {
			pt = &partitionBatch[T]{p: p}
			byIndex[p.Index] = pt
			parts = append(parts, pt)
		}
		pt.items = append(pt.items, it)
	}
	return parts, nil
}

// offsetAppend is offset writes in the log that wait to become durable.
type offsetAppend struct {
	w       coordinator.Writer
	waits   []partition.Wait
	applied bool
	apply   func()
}

// wait waits until the writes are durable, then applies them to memory
// unless they were applied at the append.
func (a offsetAppend) wait(ctx context.Context) error {
	for _, w := range a.waits {
		if err := a.w.Wait(ctx, w.P, w.Offset); err != nil {
			return err
		}
	}
	if !a.applied && a.apply != nil {
		a.apply()
	}
	return nil
}

// appendOffsets appends writes to __consumer_offsets for a caller that
// holds c.offsets.writes: one batch per partition the writes' groups are
// in. With applyFirst the writes are applied to memory at once, before the
// wait, whatever it brings. If a partition's append fails after another's
// succeeded, the writes already appended are applied before the error
// returns: they are in the log, and a restart would replay them.
func (c *Coordinator) appendOffsets(writes []offsetWrite, applyFirst bool) (offsetAppend, error) {
	if len(writes) == 0 {
		return offsetAppend{}, nil
	}
	now := c.cfg.Clock.Now()
	parts, err := splitByPartition(c, writes, func(w offsetWrite) string { return w.key.group })
	if err != nil {
		return offsetAppend{}, err
	}
	var applies []func()
	applyAll := func() {
		for _, f := range applies {
			f()
		}
	}
	a := offsetAppend{w: c.w, applied: applyFirst, apply: applyAll}
	for _, pt := range parts {
		recs := make([]recordbatch.Record, len(pt.items))
		for i, w := range pt.items {
			recs[i] = encodeOffsetRecord(w, now)
		}
		batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
		if err == nil {
			var end int64
			if end, err = c.w.Append(pt.p, batch, partition.FlushNow); err == nil {
				pw := pt.items
				apply := func() {
					base := end - int64(len(pw))
					for i, w := range pw {
						w.value.logOffset = base + int64(i)
						w.value.commitMs = now.UnixMilli()
						c.offsets.apply(w.key, w.value, w.tombstone)
					}
				}
				if applyFirst {
					apply()
				} else {
					applies = append(applies, apply)
				}
				a.waits = append(a.waits, partition.Wait{P: pt.p, Offset: end})
				continue
			}
		}
		applyAll()
		return offsetAppend{}, err
	}
	return a, nil
}

// reset empties the store before a reload.
// drop forgets every group in picks: its commits, its transactions'
// pending commits and its empty time.
func (s *offsetStore) drop(picks func(group string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g, keys := range s.groups {
		if !picks(g) {
			continue
		}
		for k := range keys {
			delete(s.byKey, k)
		}
		delete(s.groups, g)
	}
	for pid, writes := range s.pending {
		kept := writes[:0]
		for _, w := range writes {
			if !picks(w.key.group) {
				kept = append(kept, w)
			}
		}
		if len(kept) == 0 {
			delete(s.pending, pid)
		} else {
			s.pending[pid] = kept
		}
	}
	for g := range s.emptySince {
		if picks(g) {
			delete(s.emptySince, g)
		}
	}
}

func (s *offsetStore) reset() {
	s.mu.Lock()
	s.byKey = map[offsetKey]committed{}
	s.groups = map[string]map[offsetKey]struct{}{}
	s.pending = map[int64][]offsetWrite{}
	s.emptySince = map[string]time.Time{}
	s.mu.Unlock()
}
