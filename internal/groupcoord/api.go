package groupcoord

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/diskhealth"
)

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes default.
const maxOffsetMetadata = 4096

// OffsetCommit commits a group's offsets (v9: the generation is a KIP-848
// member epoch for consumer groups). It appends before it returns, in the
// caller's goroutine (see startOffsetWrite); the answer comes from the
// returned wait, or at once (nil wait) when nothing is written.
func (c *Coordinator) OffsetCommit(r *kmsg.OffsetCommitRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	groupCode := int16(0)
	if r.Group == "" {
		groupCode = kerr.InvalidGroupID.Code
	} else {
		groupCode = c.groups.ValidateOffsetCommit(r.Group, r.MemberID, r.Generation, r.InstanceID, r.Version)
	}
	var writes []offsetWrite
	type slot struct{ t, p int }
	var slots []slot
	for ti, rt := range r.Topics {
		out := kmsg.OffsetCommitResponseTopic{Topic: rt.Topic}
		partitions := c.host.Partitions(rt.Topic)
		for _, rp := range rt.Partitions {
			op := kmsg.NewOffsetCommitResponseTopicPartition()
			op.Partition = rp.Partition
			switch {
			case groupCode != 0:
				op.ErrorCode = groupCode
			case rp.Partition < 0 || int(rp.Partition) >= partitions:
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Metadata != nil && len(*rp.Metadata) > maxOffsetMetadata:
				op.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			default:
				writes = append(writes, commitWrite(r.Group, rt.Topic, rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, r.Version >= 6))
				slots = append(slots, slot{ti, len(out.Partitions)})
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	if len(writes) == 0 {
		return resp, nil
	}
	write := c.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			if !diskhealth.IsSpaceError(err) { // the disk monitor logs a full disk
				c.log.Error("offset commit failed", "group", r.Group, "err", err)
			}
			code := coordinator.Code(err)
			for _, s := range slots {
				resp.Topics[s.t].Partitions[s.p].ErrorCode = code
			}
			return resp
		}
		// An offsets-retention pass may have deleted the (empty) group
		// between the validation and the write: a group with offsets
		// must exist, to be listed, described and expired later.
		c.groups.EnsureGroup(r.Group)
		return resp
	}
}

// commitWrite is the write of one partition's commit; withEpoch says
// whether the request version carries the leader epoch.
func commitWrite(group, topic string, partition int32, offset int64, leaderEpoch int32, metadata *string, withEpoch bool) offsetWrite {
	v := committed{offset: offset, leaderEpoch: leaderEpoch}
	if !withEpoch {
		v.leaderEpoch = -1
	}
	if metadata != nil {
		v.metadata = *metadata
	}
	return offsetWrite{key: offsetKey{group, topic, partition}, value: v}
}

// fetchGroupOffsets answers one group's part of an OffsetFetch; nil topics
// means every committed partition.
func (c *Coordinator) fetchGroupOffsets(group string, topics map[string][]int32, all, requireStable bool) []kmsg.OffsetFetchResponseTopic {
	if all {
		topics = map[string][]int32{}
		for _, k := range c.offsets.groupKeys(group) {
			topics[k.topic] = append(topics[k.topic], k.partition)
		}
	}
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []kmsg.OffsetFetchResponseTopic
	for _, name := range names {
		parts := topics[name]
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		ot := kmsg.OffsetFetchResponseTopic{Topic: name}
		for _, p := range parts {
			op := kmsg.NewOffsetFetchResponseTopicPartition()
			op.Partition = p
			op.Offset, op.LeaderEpoch = -1, -1
			if requireStable && c.offsets.hasPending(offsetKey{group, name, p}) {
				// KIP-447: an exactly-once consumer must not start from
				// an offset an open transaction is about to replace.
				op.ErrorCode = kerr.UnstableOffsetCommit.Code
			} else if v, ok := c.offsets.get(offsetKey{group, name, p}); ok {
				op.Offset, op.LeaderEpoch = v.offset, v.leaderEpoch
				md := v.metadata
				op.Metadata = &md
			} else {
				empty := ""
				op.Metadata = &empty
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		out = append(out, ot)
	}
	return out
}

// OffsetFetch answers groups' committed offsets (v8+: several groups; v9:
// member id and epoch of a KIP-848 member).
func (c *Coordinator) OffsetFetch(r *kmsg.OffsetFetchRequest) kmsg.Response {
	// Shared with commits: an offsets-retention pass that is deleting a
	// group's offsets finishes before a member of it reads them.
	c.offsets.writes.RLock()
	defer c.offsets.writes.RUnlock()
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, g := range r.Groups {
			og := kmsg.NewOffsetFetchResponseGroup()
			og.Group = g.Group
			if g.Group == "" {
				og.ErrorCode = kerr.InvalidGroupID.Code
			} else if code := c.groups.ValidateFetch(g.Group, g.MemberID, g.MemberEpoch); code != 0 {
				// v9+: a KIP-848 member fetching its group's offsets.
				og.ErrorCode = code
			} else {
				topics := map[string][]int32{}
				for _, t := range g.Topics {
					topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
				}
				for _, t := range c.fetchGroupOffsets(g.Group, topics, g.Topics == nil, r.RequireStable) {
					ot := kmsg.OffsetFetchResponseGroupTopic{Topic: t.Topic}
					for _, p := range t.Partitions {
						ot.Partitions = append(ot.Partitions, kmsg.OffsetFetchResponseGroupTopicPartition{
							Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, ErrorCode: p.ErrorCode,
						})
					}
					og.Topics = append(og.Topics, ot)
				}
			}
			resp.Groups = append(resp.Groups, og)
		}
		return resp
	}
	if r.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	topics := map[string][]int32{}
	for _, t := range r.Topics {
		topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
	}
	resp.Topics = c.fetchGroupOffsets(r.Group, topics, r.Topics == nil, r.RequireStable)
	return resp
}

// OffsetDelete deletes an empty group's committed offsets for partitions.
func (c *Coordinator) OffsetDelete(r *kmsg.OffsetDeleteRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if r.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	state, exists := c.groups.State(r.Group)
	busy := exists && state != "Empty" && state != "Dead"
	var writes []offsetWrite
	for _, rt := range r.Topics {
		out := kmsg.OffsetDeleteResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			op := kmsg.OffsetDeleteResponseTopicPartition{Partition: rp.Partition}
			k := offsetKey{r.Group, rt.Topic, rp.Partition}
			if busy {
				// Without knowing the members' subscriptions, a live
				// group's offsets are all treated as in use.
				op.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else if _, ok := c.offsets.get(k); ok {
				writes = append(writes, offsetWrite{key: k, tombstone: true})
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	if len(writes) == 0 {
		if !exists && len(c.offsets.groupKeys(r.Group)) == 0 {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
		}
		return resp, nil
	}
	write := c.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			c.log.Error("offset delete failed", "group", r.Group, "err", err)
			resp.ErrorCode = kerr.KafkaStorageError.Code
		}
		return resp
	}
}

// DeleteGroups deletes empty groups and their committed offsets.
func (c *Coordinator) DeleteGroups(r *kmsg.DeleteGroupsRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	codes := c.groups.Delete(r.Groups)
	// The deleted groups' "empty since" records go before the offsets'
	// tombstones, whose durable write then covers them: a restart must
	// not bring a deleted group back.
	if _, err := c.RecordGroupStates(c.cfg.Clock.Now()); err != nil {
		c.log.Warn("recording deleted groups failed; retrying in a second", "err", err)
	}
	var writes []offsetWrite
	for _, g := range r.Groups {
		code := codes[g]
		if code == kerr.GroupIDNotFound.Code && len(c.offsets.groupKeys(g)) > 0 {
			code = 0
		}
		if code == 0 {
			for _, k := range c.offsets.groupKeys(g) {
				writes = append(writes, offsetWrite{key: k, tombstone: true})
			}
		}
		resp.Groups = append(resp.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: code})
	}
	if len(writes) == 0 {
		return resp, nil
	}
	write := c.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			c.log.Error("deleting group offsets failed", "err", err)
			for i := range resp.Groups {
				if resp.Groups[i].ErrorCode == 0 {
					resp.Groups[i].ErrorCode = kerr.KafkaStorageError.Code
				}
			}
		}
		return resp
	}
}

// WriteTxnOffsets commits, inside producer pid's transaction (at epoch),
// the offsets of a TxnOffsetCommit the transaction coordinator accepted:
// it checks the member (v3+), appends them to Topic as a transactional
// batch (EndTxn applies them once the marker is written) and registers the
// group. It returns the code for every partition of the request.
func (c *Coordinator) WriteTxnOffsets(ctx context.Context, pid int64, epoch int16, r *kmsg.TxnOffsetCommitRequest) int16 {
	if r.Version >= 3 {
		if code := c.groups.ValidateCommit(r.Group, r.MemberID, r.Generation, r.InstanceID); code != 0 {
			if code == kerr.StaleMemberEpoch.Code {
				// As Kafka: TxnOffsetCommit has no STALE_MEMBER_EPOCH.
				code = kerr.IllegalGeneration.Code
			}
			return code
		}
	}
	var writes []offsetWrite
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			writes = append(writes, commitWrite(r.Group, rt.Topic, rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, r.Version >= 2))
		}
	}
	if err := c.writeTxnOffsets(ctx, r.Group, pid, epoch, writes); err != nil {
		c.log.Error("transactional offset commit failed", "group", r.Group, "err", err)
		return coordinator.Code(err)
	}
	// Registered as a commit registers it (v0-2 are not validated
	// against the group, so nothing else would).
	c.groups.EnsureGroup(r.Group)
	return 0
}
