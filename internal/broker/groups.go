package broker

import (
	"context"
	"time"

	"github.com/moonmq/moonmq/internal/groupcoord"
	"github.com/moonmq/moonmq/internal/partition"
)

// offsetsTopic is the group coordinator's topic, named here for what the
// broker itself does with it (refuse clients' writes, wait for it on a
// promotion, add it to a transaction).
const offsetsTopic = groupcoord.Topic

// newGroupCoordinator builds the group coordinator with what it may use of
// the broker: the own-write path and a Host.
func (b *Broker) newGroupCoordinator() *groupcoord.Coordinator {
	return groupcoord.New(groupcoord.Config{
		Writer:                  ownWriter{b},
		Host:                    groupHost{b},
		Logger:                  b.log,
		Clock:                   b.clock,
		OffsetsRetentionMinutes: b.cfg.OffsetsRetentionMinutes,
		OffsetsRetentionCheck:   time.Duration(b.cfg.OffsetsRetentionCheckMs) * time.Millisecond,
		ExpiredOffsets:          &b.stats.expiredOffsets,
		ExpiredGroups:           &b.stats.expiredGroups,
	})
}

// groupHost is the broker as the group coordinator's Host.
type groupHost struct{ b *Broker }

func (h groupHost) Partitions(topic string) int {
	if t := h.b.lookup(topic); t != nil {
		return len(t.partitions)
	}
	return 0
}

func (h groupHost) Owned(name string) []*partition.Partition { return h.b.ownedPartitions(name) }

// ownedPartitions returns the partitions of a coordinators' topic whose
// keys this broker's coordinators host: all of them, but in cluster mode
// only those of the metadata's incarnation of the topic that its group
// owns (it holds a copy of the others, empty until a move fills it).
func (b *Broker) ownedPartitions(name string) []*partition.Partition {
	t := b.lookup(name)
	if b.cl != nil {
		t = b.cl.local(name)
	}
	if t == nil {
		return nil
	}
	var out []*partition.Partition
	for _, p := range t.partitions {
		if _, foreign := b.foreignPartition(name, p.Index); !foreign {
			out = append(out, p)
		}
	}
	return out
}

func (h groupHost) Leading() bool { return !h.b.following() && !h.b.fenced() }

// ExpireOffsets runs one offsets-retention pass as of now (see
// groupcoord.Coordinator.ExpireOffsets), for tests that do not wait for
// the leader's check.
func (b *Broker) ExpireOffsets(ctx context.Context, now time.Time) (offsets, groups int, err error) {
	return b.groups.ExpireOffsets(ctx, now)
}

// RecordGroupStates writes the group-metadata records that changed (see
// groupcoord.Coordinator.RecordGroupStates), for tests that do not wait
// for the leader's second.
func (b *Broker) RecordGroupStates(now time.Time) (int, error) {
	return b.groups.RecordGroupStates(now)
}
