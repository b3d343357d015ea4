package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/groupcoord"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/txncoord"
)

// newTxnCoordinator builds the transaction coordinator with what it may
// use of b: its own writes, a Host, and the group coordinator for the
// offsets a transaction commits. It is built after the group coordinator
// and b.ctx.
func newTxnCoordinator(b *Broker) *txncoord.Coordinator {
	return txncoord.New(txncoord.Config{
		Writer: ownWriter{b}, Host: txnHost{b}, Offsets: txnOffsets{b}, OffsetsTopic: offsetsTopic,
		Log: b.log, Ctx: b.ctx, Clock: b.clock,
		IDExpirationMs:      b.cfg.TransactionalIdExpirationMs,
		IDExpirationCheckMs: b.cfg.TransactionalIdExpirationCheckMs,
		ExpiredIDs:          &b.stats.expiredTxnIDs,
	})
}

// txnHost is the broker as the transaction coordinator's Host.
type txnHost struct{ b *Broker }

func (h txnHost) Partition(topic string, index int32) *partition.Partition {
	if _, foreign := h.b.foreignPartition(topic, index); foreign {
		// Another group's: its markers go there (Remote), and this
		// group's empty copy is not the partition.
		return nil
	}
	t := h.b.lookup(topic)
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return nil
	}
	return t.partitions[index]
}

func (h txnHost) Partitions() []*partition.Partition {
	if h.b.cl != nil {
		// A partition's open transaction may be another group's
		// coordinator's: none may be taken for an orphan here.
		return nil
	}
	var ps []*partition.Partition
	for _, t := range h.b.sortedTopics() {
		ps = append(ps, t.partitions...)
	}
	return ps
}

func (h txnHost) Owned(topic string) []*partition.Partition { return h.b.ownedPartitions(topic) }

func (txnHost) Internal(topic string) bool { return internalTopic(topic) }

func (h txnHost) NextProducerID() (int64, error) { return h.b.nextProducerID() }

func (h txnHost) Leading() bool { return !h.b.following() && !h.b.fenced() }

func (h txnHost) Remote(topic string, index int32) bool {
	_, foreign := h.b.foreignPartition(topic, index)
	return foreign
}

func (h txnHost) AppendMarker(p *partition.Partition, batch []byte, strict bool, flush partition.Flush) (int64, error) {
	return h.b.appendMarker(p, batch, strict, flush)
}

func (h txnHost) WriteRemoteMarkers(ctx context.Context, pid int64, epoch int16, commit, strict bool, coordinatorEpoch int32, tps []txn.TP) error {
	if h.b.cl == nil {
		return errors.New("no other group outside cluster mode")
	}
	return h.b.cl.writeRemoteMarkers(ctx, txnMarkersRequest{ProducerID: pid, ProducerEpoch: epoch, Commit: commit, Strict: strict, CoordinatorEpoch: coordinatorEpoch}, tps)
}

// Epoch is p's exposed epoch: the group's term plus p's base. The
// partitions of the state topic never move (moves of internal topics are
// refused), so their base is 0 and this is the term, known before the
// coordinator loads; a move of them would need the base in place first.
func (h txnHost) Epoch(p *partition.Partition) int32 { return h.b.exposedEpoch(p) }

// txnOffsets is the group coordinator as the transaction coordinator's
// Offsets: here, or in cluster mode in the group owning the consumer
// group's partition of the offsets topic.
type txnOffsets struct{ b *Broker }

func (o txnOffsets) PartitionOf(group string) (int32, error) {
	t, err := o.b.coordinatorTopic(offsetsTopic, groupcoord.TopicConfigs())
	if err != nil {
		return 0, err
	}
	return coordinator.PartitionFor(group, len(t.partitions)), nil
}

func (o txnOffsets) WriteTxnOffsets(ctx context.Context, pid int64, epoch int16, r *kmsg.TxnOffsetCommitRequest) int16 {
	if o.b.cl != nil && !o.b.cl.coordinates(groupCoordinator, r.Group) {
		return o.b.cl.writeRemoteTxnOffsets(ctx, pid, epoch, r)
	}
	return o.b.groups.WriteTxnOffsets(ctx, pid, epoch, r)
}

func (o txnOffsets) EndTxn(pid int64, commit bool) { o.b.groups.EndTxn(pid, commit) }

// ExpireTransactionalIDs deletes the transactional ids idle for
// TransactionalIdExpirationMs as of now and returns how many (see
// txncoord.Coordinator.ExpireIDs), for tests that do not wait for the
// leader's check.
func (b *Broker) ExpireTransactionalIDs(ctx context.Context, now time.Time) int {
	return b.txns.ExpireIDs(ctx, now)
}
