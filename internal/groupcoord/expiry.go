package groupcoord

import (
	"context"
	"sort"
	"time"
)

// Offsets retention, as Kafka's offsets.retention.minutes (KIP-211): the
// committed offsets of a group expire once the group has had no member for
// the retention period, and an empty group without offsets is deleted.
// Expiry is written as tombstones to __consumer_offsets, so a restart or a
// new leader rebuilds the same store, and the compaction cleaner later
// drops both.

// expiredOffsets returns the keys of offsets whose retention has passed as
// of now, sorted. empty holds the groups with no member and the time each
// became empty; groups missing from it have members (or are unknown to the
// coordinator) and keep their offsets. An offset expires when both its
// group's empty time and its own commit time are at least retention old:
// a simple consumer that commits without joining keeps every partition it
// still commits, as in Kafka. pending keys (transactional commits awaiting
// their marker) never expire.
func expiredOffsets(offsets map[offsetKey]committed, empty map[string]time.Time, pending map[offsetKey]bool, now time.Time, retention time.Duration) []offsetKey {
	var out []offsetKey
	for k, c := range offsets {
		since, ok := empty[k.group]
		if !ok || pending[k] {
			continue
		}
		if committedAt := time.UnixMilli(c.commitMs); committedAt.After(since) {
			since = committedAt
		}
		if now.Sub(since) >= retention {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.group != b.group {
			return a.group < b.group
		}
		if a.topic != b.topic {
			return a.topic < b.topic
		}
		return a.partition < b.partition
	})
	return out
}

// ExpireOffsets runs one offsets-retention pass as of now: it tombstones
// the committed offsets of groups empty for longer than
// OffsetsRetentionMinutes, then deletes the empty groups that have no
// offsets left. It returns how many offsets and groups it removed. Only a
// broker that writes its own state runs it (a single node, a static
// leader, a failover leader that serves); it is a no-op with
// OffsetsRetentionMinutes -1.
func (c *Coordinator) ExpireOffsets(ctx context.Context, now time.Time) (offsets, groups int, err error) {
	if c.cfg.OffsetsRetentionMinutes < 0 || !c.host.Leading() {
		return 0, 0, nil
	}
	retention := time.Duration(c.cfg.OffsetsRetentionMinutes) * time.Minute
	empty := c.groups.EmptyGroups()
	if len(empty) == 0 {
		return 0, 0, nil
	}
	// The exclusive lock waits for the commits in flight and holds up
	// new commits and offset fetches, so it is taken only when a look
	// without it finds something to do.
	if len(expiredOffsets(c.offsets.snapshot(empty), empty, c.offsets.pendingKeys(), now, retention)) == 0 && !c.offsets.anyMissing(empty) {
		return 0, 0, nil
	}
	// Exclusive: no commit is between its append and its apply while
	// the tombstones are chosen and written, and no OffsetFetch reads
	// offsets about to go.
	c.offsets.writes.Lock()
	defer c.offsets.writes.Unlock()
	// Taking the lock may have waited for commits: a group that got a
	// member meanwhile (or lost one and is empty since later) is looked
	// at again at the next check, not now. A member joining from here on
	// fetches its offsets only after this pass (OffsetFetch takes the
	// lock shared), so it sees them gone, never half gone.
	still := c.groups.EmptyGroups()
	for g, since := range empty {
		if s, ok := still[g]; !ok || !s.Equal(since) {
			delete(empty, g)
		}
	}
	expired := expiredOffsets(c.offsets.snapshot(empty), empty, c.offsets.pendingKeys(), now, retention)
	if len(expired) > 0 {
		writes := make([]offsetWrite, len(expired))
		for i, k := range expired {
			writes[i] = offsetWrite{key: k, tombstone: true}
		}
		// Applied as soon as they are appended: should the wait fail,
		// the tombstones may still become durable, and offsets that a
		// restart would not bring back must not stay in memory (an
		// expired offset deleted early is harmless).
		a, err := c.appendOffsets(writes, true)
		if err == nil {
			err = a.wait(ctx)
		}
		if err != nil {
			c.log.Error("offsets retention: writing tombstones failed; retrying at the next check", "offsets", len(writes), "err", err)
			return 0, 0, err
		}
		c.log.Info("offsets retention: expired committed offsets", "offsets", len(expired), "retention_minutes", c.cfg.OffsetsRetentionMinutes)
	}
	drop := make(map[string]time.Time)
	for g, since := range empty {
		if !c.offsets.hasGroup(g) {
			drop[g] = since
		}
	}
	for _, g := range c.groups.DeleteEmpty(drop) {
		groups++
		c.log.Info("offsets retention: deleted empty group without committed offsets", "group", g)
	}
	if groups > 0 {
		// Their "empty since" records go now, not at the next second:
		// a restart must not bring them back.
		if _, err := c.RecordGroupStates(now); err != nil {
			c.log.Warn("recording deleted groups failed; retrying in a second", "err", err)
		}
	}
	c.cfg.ExpiredOffsets.Add(int64(len(expired)))
	c.cfg.ExpiredGroups.Add(int64(groups))
	return len(expired), groups, nil
}

// snapshot copies the committed offsets of the given groups.
func (s *offsetStore) snapshot(groups map[string]time.Time) map[offsetKey]committed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[offsetKey]committed)
	for g := range groups {
		for k := range s.groups[g] {
			out[k] = s.byKey[k]
		}
	}
	return out
}

// pendingKeys returns the keys that open transactions have commits for.
func (s *offsetStore) pendingKeys() map[offsetKey]bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[offsetKey]bool)
	for _, writes := range s.pending {
		for _, w := range writes {
			out[w.key] = true
		}
	}
	return out
}

// anyMissing reports whether one of groups has no committed offsets.
func (s *offsetStore) anyMissing(groups map[string]time.Time) bool {
	for g := range groups {
		if !s.hasGroup(g) {
			return true
		}
	}
	return false
}

// hasGroup reports whether group has committed offsets, applied or
// pending in an open transaction.
func (s *offsetStore) hasGroup(group string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.groups[group]) > 0 {
		return true
	}
	for _, writes := range s.pending {
		for _, w := range writes {
			if w.key.group == group {
				return true
			}
		}
	}
	return false
}
