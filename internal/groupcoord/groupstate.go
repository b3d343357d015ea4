package groupcoord

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// Group membership is not persisted (members rejoin after a restart or a
// failover; only committed offsets carry over), but offsets retention
// measures from the time a group became empty, which a restart or a new
// leader would otherwise not know: it would restart the clock, and with
// restarts more frequent than the retention period the offsets of an
// abandoned group would never expire. So the leader records in
// __consumer_offsets, in Kafka's own group-metadata format (key version 2,
// value version 3 with no members and CurrentStateTimestamp), when each
// group became empty, and tombstones that record when the group gets a
// member or is deleted. Loading the topic gives every group known to be
// empty its time back; a group without a record counts as empty from the
// load, as before.

// groupMetaKeyVersion and groupMetaValueVersion are Kafka's
// GroupMetadataKey and GroupMetadataValue versions we write.
const (
	groupMetaKeyVersion   = 2
	groupMetaValueVersion = 3
)

// groupStateChanges compares the groups that are empty now (with the time
// each became empty) with what the records say, and returns the records to
// write: an empty time per group whose record is missing or differs, and
// the groups whose record must go (they have members now, or are gone).
// Both are sorted.
func groupStateChanges(recorded, empty map[string]time.Time) (write []string, remove []string) {
	for g, since := range empty {
		if r, ok := recorded[g]; !ok || !r.Equal(since) {
			write = append(write, g)
		}
	}
	for g := range recorded {
		if _, ok := empty[g]; !ok {
			remove = append(remove, g)
		}
	}
	sort.Strings(write)
	sort.Strings(remove)
	return write, remove
}

// RecordGroupStates writes the group-metadata records that changed since
// the last call (see groupStateChanges) and returns how many it wrote. The
// leader runs it every second; the records are synced with the next write
// that is waited for (at worst, after a crash, a group counts as empty
// from the restart, as it would without them).
func (c *Coordinator) RecordGroupStates(now time.Time) (int, error) {
	if !c.host.Leading() {
		return 0, nil
	}
	// One at a time: two diffs against the same records, appended in the
	// other order, would leave the older state last.
	c.offsets.metaMu.Lock()
	defer c.offsets.metaMu.Unlock()
	empty := c.groups.EmptyGroups()
	recorded := c.offsets.emptySinceAll()
	write, remove := groupStateChanges(recorded, empty)
	if len(write)+len(remove) == 0 {
		return 0, nil
	}
	// One batch per partition of Topic: each group's record goes where
	// its offsets are.
	parts, err := splitByPartition(c, append(slices.Clone(write), remove...), func(g string) string { return g })
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pt := range parts {
		recs := make([]recordbatch.Record, len(pt.items))
		for i, g := range pt.items {
			since, isEmpty := empty[g]
			recs[i] = encodeGroupMeta(g, since, isEmpty, now)
		}
		batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
		if err != nil {
			return n, err
		}
		if _, err := c.w.Append(pt.p, batch, partition.FlushLazily); err != nil {
			return n, err
		}
		for _, g := range pt.items {
			since, isEmpty := empty[g]
			c.offsets.setEmptySince(g, since, isEmpty)
		}
		n += len(recs)
	}
	return n, nil
}

// encodeGroupMeta is the record saying group has been empty since since
// (empty), or the tombstone removing that record.
func encodeGroupMeta(group string, since time.Time, empty bool, now time.Time) recordbatch.Record {
	k := kmsg.GroupMetadataKey{Version: groupMetaKeyVersion, Group: group}
	rec := recordbatch.Record{Key: k.AppendTo(nil), Timestamp: now.UnixMilli()}
	if empty {
		v := kmsg.NewGroupMetadataValue()
		v.Version = groupMetaValueVersion
		v.Generation = -1
		v.CurrentStateTimestamp = since.UnixMilli()
		rec.Value = v.AppendTo(nil)
	}
	return rec
}

// keyVersion reads the version that starts every __consumer_offsets key.
func keyVersion(key []byte) (int16, error) {
	if len(key) < 2 {
		return 0, fmt.Errorf("key of %d bytes", len(key))
	}
	return int16(binary.BigEndian.Uint16(key)), nil
}

// decodeGroupMeta reads a group-metadata record: the group, and when it
// became empty (ok false for a tombstone, or a group that had members when
// Kafka wrote it).
func decodeGroupMeta(r recordbatch.Record) (group string, since time.Time, ok bool, err error) {
	var k kmsg.GroupMetadataKey
	if err := k.ReadFrom(r.Key); err != nil {
		return "", time.Time{}, false, err
	}
	if r.Value == nil {
		return k.Group, time.Time{}, false, nil
	}
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(r.Value); err != nil {
		return "", time.Time{}, false, err
	}
	if len(v.Members) > 0 || v.Version < 2 || v.CurrentStateTimestamp < 0 {
		return k.Group, time.Time{}, false, nil
	}
	return k.Group, time.UnixMilli(v.CurrentStateTimestamp), true, nil
}

// emptySinceAll copies the recorded empty times.
func (s *offsetStore) emptySinceAll() map[string]time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]time.Time, len(s.emptySince))
	for g, t := range s.emptySince {
		out[g] = t
	}
	return out
}

// setEmptySince records (empty) or forgets a group's empty time.
func (s *offsetStore) setEmptySince(group string, since time.Time, empty bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if empty {
		s.emptySince[group] = since
	} else {
		delete(s.emptySince, group)
	}
}
