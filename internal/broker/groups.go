package broker

import (
	"context"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes default.
const maxOffsetMetadata = 4096

func (b *Broker) handleFindCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host, port := b.Advertised()
	answer := func(key string) (int16, *string) {
		if r.CoordinatorType != 0 && r.CoordinatorType != 1 {
			msg := "unknown coordinator type"
			return errInvalidRequest, &msg
		}
		if key == "" {
			return errInvalidGroupID, nil
		}
		return 0, nil
	}
	if r.Version >= 4 {
		for _, key := range r.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = key
			c.ErrorCode, c.ErrorMessage = answer(key)
			if c.ErrorCode == 0 {
				c.NodeID, c.Host, c.Port = b.nodeID, host, port
			}
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	resp.ErrorCode, resp.ErrorMessage = answer(r.CoordinatorKey)
	if resp.ErrorCode == 0 {
		resp.NodeID, resp.Host, resp.Port = b.nodeID, host, port
	}
	return resp
}

func (b *Broker) handleOffsetCommit(r *kmsg.OffsetCommitRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	groupCode := int16(0)
	if r.Group == "" {
		groupCode = errInvalidGroupID
	} else {
		groupCode = b.groups.ValidateOffsetCommit(r.Group, r.MemberID, r.Generation, r.InstanceID, r.Version)
	}
	var writes []offsetWrite
	type slot struct{ t, p int }
	var slots []slot
	for ti, rt := range r.Topics {
		out := kmsg.OffsetCommitResponseTopic{Topic: rt.Topic}
		t := b.lookup(rt.Topic)
		for _, rp := range rt.Partitions {
			op := kmsg.NewOffsetCommitResponseTopicPartition()
			op.Partition = rp.Partition
			switch {
			case groupCode != 0:
				op.ErrorCode = groupCode
			case t == nil || rp.Partition < 0 || int(rp.Partition) >= len(t.partitions):
				op.ErrorCode = errUnknownTopicOrPartition
			case rp.Metadata != nil && len(*rp.Metadata) > maxOffsetMetadata:
				op.ErrorCode = errOffsetMetadataTooLarge
			default:
				c := committed{offset: rp.Offset, leaderEpoch: rp.LeaderEpoch}
				if r.Version < 6 {
					c.leaderEpoch = -1
				}
				if rp.Metadata != nil {
					c.metadata = *rp.Metadata
				}
				writes = append(writes, offsetWrite{key: offsetKey{r.Group, rt.Topic, rp.Partition}, value: c})
				slots = append(slots, slot{ti, len(out.Partitions)})
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	if len(writes) == 0 {
		return resp, nil
	}
	write := b.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			b.log.Error("offset commit failed", "group", r.Group, "err", err)
			code := coordinatorCode(err)
			for _, s := range slots {
				resp.Topics[s.t].Partitions[s.p].ErrorCode = code
			}
			return resp
		}
		// An offsets-retention pass may have deleted the (empty) group
		// between the validation and the write: a group with offsets
		// must exist, to be listed, described and expired later.
		b.groups.EnsureGroup(r.Group)
		return resp
	}
}

// fetchGroupOffsets answers one group's part of an OffsetFetch; nil topics
// means every committed partition.
func (b *Broker) fetchGroupOffsets(group string, topics map[string][]int32, all, requireStable bool) []kmsg.OffsetFetchResponseTopic {
	if all {
		topics = map[string][]int32{}
		for _, k := range b.offsets.groupKeys(group) {
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
			if requireStable && b.offsets.hasPending(offsetKey{group, name, p}) {
				// KIP-447: an exactly-once consumer must not start from
				// an offset an open transaction is about to replace.
				op.ErrorCode = errUnstableOffsetCommit
			} else if c, ok := b.offsets.get(offsetKey{group, name, p}); ok {
				op.Offset, op.LeaderEpoch = c.offset, c.leaderEpoch
				md := c.metadata
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

func (b *Broker) handleOffsetFetch(r *kmsg.OffsetFetchRequest) kmsg.Response {
	// Shared with commits: an offsets-retention pass that is deleting a
	// group's offsets finishes before a member of it reads them.
	b.offsets.writes.RLock()
	defer b.offsets.writes.RUnlock()
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, g := range r.Groups {
			og := kmsg.NewOffsetFetchResponseGroup()
			og.Group = g.Group
			if g.Group == "" {
				og.ErrorCode = errInvalidGroupID
			} else if code := b.groups.ValidateFetch(g.Group, g.MemberID, g.MemberEpoch); code != 0 {
				// v9+: a KIP-848 member fetching its group's offsets.
				og.ErrorCode = code
			} else {
				topics := map[string][]int32{}
				for _, t := range g.Topics {
					topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
				}
				for _, t := range b.fetchGroupOffsets(g.Group, topics, g.Topics == nil, r.RequireStable) {
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
		resp.ErrorCode = errInvalidGroupID
		return resp
	}
	topics := map[string][]int32{}
	for _, t := range r.Topics {
		topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
	}
	resp.Topics = b.fetchGroupOffsets(r.Group, topics, r.Topics == nil, r.RequireStable)
	return resp
}

func (b *Broker) handleOffsetDelete(r *kmsg.OffsetDeleteRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if r.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return resp, nil
	}
	state, exists := b.groups.State(r.Group)
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
				op.ErrorCode = errGroupSubscribedToTopic
			} else if _, ok := b.offsets.get(k); ok {
				writes = append(writes, offsetWrite{key: k, tombstone: true})
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	if len(writes) == 0 {
		if !exists && len(b.offsets.groupKeys(r.Group)) == 0 {
			resp.ErrorCode = errGroupIDNotFound
		}
		return resp, nil
	}
	write := b.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			b.log.Error("offset delete failed", "group", r.Group, "err", err)
			resp.ErrorCode = errKafkaStorageError
		}
		return resp
	}
}

func (b *Broker) handleDeleteGroups(r *kmsg.DeleteGroupsRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	codes := b.groups.Delete(r.Groups)
	// The deleted groups' "empty since" records go before the offsets'
	// tombstones, whose durable write then covers them: a restart must
	// not bring a deleted group back.
	if _, err := b.RecordGroupStates(time.Now()); err != nil {
		b.log.Warn("recording deleted groups failed; retrying in a second", "err", err)
	}
	var writes []offsetWrite
	for _, g := range r.Groups {
		code := codes[g]
		if code == errGroupIDNotFound && len(b.offsets.groupKeys(g)) > 0 {
			code = 0
		}
		if code == 0 {
			for _, k := range b.offsets.groupKeys(g) {
				writes = append(writes, offsetWrite{key: k, tombstone: true})
			}
		}
		resp.Groups = append(resp.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: code})
	}
	if len(writes) == 0 {
		return resp, nil
	}
	write := b.startOffsetWrite(writes)
	return nil, func(ctx context.Context) kmsg.Response {
		if err := write(ctx); err != nil {
			b.log.Error("deleting group offsets failed", "err", err)
			for i := range resp.Groups {
				if resp.Groups[i].ErrorCode == 0 {
					resp.Groups[i].ErrorCode = errKafkaStorageError
				}
			}
		}
		return resp
	}
}

// resetGroups forgets every group's membership, for a new leader.
// Membership is not replicated: what this replica remembers from an
// earlier term of its own is stale (members have since rejoined another
// leader, with epochs and assignments that may collide).
func (b *Broker) resetGroups(context.Context) error {
	b.groups.Reset()
	return nil
}
