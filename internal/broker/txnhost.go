package broker

import (
	"context"
	"time"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/txncoord"
)

// newTxnCoordinator builds the transaction coordinator with what it may
// use of b: its own writes, a Host, and the group coordinator for the
// offsets a transaction commits. It is built after the group coordinator
// and b.ctx.
func newTxnCoordinator(b *Broker) *txncoord.Coordinator {
	return txncoord.New(txncoord.Config{
		Writer: ownWriter{b}, Host: txnHost{b}, Offsets: b.groups, OffsetsTopic: offsetsTopic,
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
		// Transactions over another group's partitions need markers
		// written there, which is not built: such a partition is
		// unknown to this coordinator.
		return nil
	}
	t := h.b.lookup(topic)
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return nil
	}
	return t.partitions[index]
}

func (h txnHost) Partitions() []*partition.Partition {
	var ps []*partition.Partition
	for _, t := range h.b.sortedTopics() {
		ps = append(ps, t.partitions...)
	}
	return ps
}

func (txnHost) Internal(topic string) bool { return internalTopic(topic) }

func (h txnHost) NextProducerID() (int64, error) { return h.b.nextProducerID() }

func (h txnHost) Leading() bool { return !h.b.following() && !h.b.fenced() }

// ExpireTransactionalIDs deletes the transactional ids idle for
// TransactionalIdExpirationMs as of now and returns how many (see
// txncoord.Coordinator.ExpireIDs), for tests that do not wait for the
// leader's check.
func (b *Broker) ExpireTransactionalIDs(ctx context.Context, now time.Time) int {
	return b.txns.ExpireIDs(ctx, now)
}
