package txncoord

import (
	"context"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/txn"
)

// The coordinator's Kafka APIs take the decoded request and give its
// answer: what a request may ask of a transaction is decided here, who may
// ask it (ACLs, leadership) by the broker.

// InitProducerID answers an InitProducerId that names a transactional id:
// a producer id and epoch for it, which fence the id's earlier producer.
func (c *Coordinator) InitProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id := *r.TransactionalID
	if id == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp
	}
	if r.TransactionTimeoutMillis <= 0 || r.TransactionTimeoutMillis > txn.MaxTimeoutMs {
		resp.ErrorCode = txn.ErrInvalidTransactionTimeout
		return resp
	}
	e := c.lockEntry(id, true)
	defer e.mu.Unlock()
	now := c.cfg.Clock.Now().UnixMilli()
	m := e.meta.Load()
	if m == nil {
		pid, err := c.host.NextProducerID()
		if err != nil {
			resp.ErrorCode = coordinator.Code(err)
			return resp
		}
		m = &txn.Metadata{ID: id, ProducerID: pid, TimeoutMs: r.TransactionTimeoutMillis,
			State: kmsg.TransactionStateEmpty, Partitions: map[txn.TP]struct{}{}, StartMs: now, UpdateMs: now}
		if err := c.transition(ctx, e, m); err != nil {
			resp.ErrorCode = coordinator.Code(err)
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch = m.ProducerID, m.Epoch
		return resp
	}
	// KIP-360: a producer re-initialising names its id and epoch; only
	// the current epoch (or the one a timeout abort just bumped) may.
	if r.ProducerID >= 0 && (r.ProducerID != m.ProducerID || r.ProducerEpoch != m.Epoch && r.ProducerEpoch != m.Epoch-1) {
		resp.ErrorCode = txn.ErrProducerFenced
		if r.Version < 4 {
			resp.ErrorCode = txn.ErrInvalidProducerEpoch
		}
		return resp
	}
	if m.Preparing() {
		if err := c.finish(e); err != nil {
			resp.ErrorCode = coordinator.Code(err)
			return resp
		}
	}
	if e.meta.Load().State == kmsg.TransactionStateOngoing {
		// A new incarnation fences the old one and aborts what it left
		// open, at once. The abort markers carry a bumped epoch, so a
		// delayed write of the old incarnation is refused by the
		// partition's producer state even if it raced the coordinator.
		if code := c.end(ctx, e, false, true, false); code != 0 {
			resp.ErrorCode = code
			return resp
		}
	}
	next := e.meta.Load().Clone()
	next.Epoch++
	if next.Epoch >= math.MaxInt16-1 {
		pid, err := c.host.NextProducerID()
		if err != nil {
			resp.ErrorCode = coordinator.Code(err)
			return resp
		}
		next.ProducerID, next.Epoch = pid, 0
	}
	next.State = kmsg.TransactionStateEmpty
	next.Partitions = map[txn.TP]struct{}{}
	next.TimeoutMs = r.TransactionTimeoutMillis
	next.UpdateMs = now
	if err := c.transition(ctx, e, next); err != nil {
		resp.ErrorCode = coordinator.Code(err)
		return resp
	}
	c.log.Info("initialized transactional producer", "transactional_id", id, "producer_id", next.ProducerID, "epoch", next.Epoch)
	resp.ProducerID, resp.ProducerEpoch = next.ProducerID, next.Epoch
	return resp
}

// AddPartitions answers AddPartitionsToTxn: all the partitions join the
// transaction, or none does.
func (c *Coordinator) AddPartitions(ctx context.Context, r *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var tps []txn.TP
	missing := map[txn.TP]bool{}
	for _, rt := range r.Topics {
		for _, p := range rt.Partitions {
			tp := txn.TP{Topic: rt.Topic, Partition: p}
			if !c.joinable(tp) {
				missing[tp] = true
			}
			tps = append(tps, tp)
		}
	}
	code := int16(0)
	if len(missing) == 0 {
		code = c.add(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2, tps)
	}
	for _, rt := range r.Topics {
		out := kmsg.AddPartitionsToTxnResponseTopic{Topic: rt.Topic}
		for _, p := range rt.Partitions {
			pc := code
			if len(missing) > 0 {
				pc = kerr.OperationNotAttempted.Code
				if missing[txn.TP{Topic: rt.Topic, Partition: p}] {
					pc = kerr.UnknownTopicOrPartition.Code
				}
			}
			out.Partitions = append(out.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: pc})
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// add adds tps to the producer's transaction with one durable write.
func (c *Coordinator) add(ctx context.Context, id string, pid int64, epoch int16, newErrors bool, tps []txn.TP) int16 {
	e, code := c.lockTxn(id, pid, epoch, newErrors)
	if e == nil {
		return code
	}
	defer e.mu.Unlock()
	next, code := e.meta.Load().AddPartitions(tps, c.cfg.Clock.Now().UnixMilli())
	if code == 0 {
		if err := c.transition(ctx, e, next); err != nil {
			code = coordinator.Code(err)
		}
	}
	return code
}

// AddOffsets answers AddOffsetsToTxn: the offsets topic joins the
// transaction, so the group's commits in it get its marker.
func (c *Coordinator) AddOffsets(ctx context.Context, r *kmsg.AddOffsetsToTxnRequest) *kmsg.AddOffsetsToTxnResponse {
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if r.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	index, err := c.offsets.PartitionOf(r.Group)
	if err != nil {
		resp.ErrorCode = coordinator.Code(err)
		return resp
	}
	resp.ErrorCode = c.add(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2,
		[]txn.TP{{Topic: c.cfg.OffsetsTopic, Partition: index}})
	return resp
}

// EndTxn answers EndTxn: the transaction is committed or aborted (v5:
// transactions v2, the epoch is bumped every transaction).
func (c *Coordinator) EndTxn(ctx context.Context, r *kmsg.EndTxnRequest) *kmsg.EndTxnResponse {
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	v2 := r.Version >= 5
	// A retry of an EndTxn whose decision is already durable: finish it
	// (if an earlier attempt was cut short) and answer as the first
	// attempt would have. Under transactions v2 the retry carries the
	// epoch from before the bump.
	if e := c.lockEntry(r.TransactionalID, false); e != nil {
		m := e.meta.Load()
		sameEpoch := m != nil && r.ProducerID == m.ProducerID && (r.ProducerEpoch == m.Epoch || v2 && r.ProducerEpoch == m.Epoch-1)
		var handled bool
		switch {
		case sameEpoch && m.Preparing() && m.Committing() == r.Commit:
			handled = true
			if err := c.finish(e); err != nil {
				c.log.Error("completing transaction failed", "transactional_id", m.ID, "err", err)
				resp.ErrorCode = coordinator.Code(err)
			}
		case sameEpoch && v2 && r.ProducerEpoch == m.Epoch-1 &&
			(r.Commit && m.State == kmsg.TransactionStateCompleteCommit || !r.Commit && m.State == kmsg.TransactionStateCompleteAbort):
			handled = true
		}
		if handled {
			if v2 && resp.ErrorCode == 0 {
				cur := e.meta.Load()
				resp.ProducerID, resp.ProducerEpoch = cur.ProducerID, cur.Epoch
			}
			e.mu.Unlock()
			return resp
		}
		e.mu.Unlock()
	}
	e, code := c.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
	if e == nil {
		resp.ErrorCode = code
		return resp
	}
	defer e.mu.Unlock()
	resp.ErrorCode = c.end(ctx, e, r.Commit, v2, v2)
	if m := e.meta.Load(); v2 && resp.ErrorCode == 0 {
		resp.ProducerID, resp.ProducerEpoch = m.ProducerID, m.Epoch
	}
	return resp
}

// TxnOffsetCommit answers TxnOffsetCommit: the producer's transaction
// must be ongoing and include the offsets topic (from v5 the commit adds
// it, as transactions v2 has it do). Offsets then writes the commits,
// under the transactional id's lock, so the transaction cannot end, and
// its markers go out, before its commits are pending.
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	fill := func(code int16) {
		for _, rt := range r.Topics {
			out := kmsg.TxnOffsetCommitResponseTopic{Topic: rt.Topic}
			for _, rp := range rt.Partitions {
				out.Partitions = append(out.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: rp.Partition, ErrorCode: code})
			}
			resp.Topics = append(resp.Topics, out)
		}
	}
	if r.Group == "" {
		fill(kerr.InvalidGroupID.Code)
		return resp
	}
	e, code := c.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
	if e == nil {
		fill(code)
		return resp
	}
	defer e.mu.Unlock()
	m := e.meta.Load()
	index, err := c.offsets.PartitionOf(r.Group)
	if err != nil {
		fill(coordinator.Code(err))
		return resp
	}
	offsetsTP := txn.TP{Topic: c.cfg.OffsetsTopic, Partition: index}
	if _, ok := m.Partitions[offsetsTP]; !ok && r.Version >= 5 {
		next, code := m.AddPartitions([]txn.TP{offsetsTP}, c.cfg.Clock.Now().UnixMilli())
		if code == 0 {
			if err := c.transition(ctx, e, next); err != nil {
				code = coordinator.Code(err)
			}
		}
		if code != 0 {
			fill(code)
			return resp
		}
		m = e.meta.Load()
	}
	if _, ok := m.Partitions[offsetsTP]; !ok || m.State != kmsg.TransactionStateOngoing {
		fill(txn.ErrInvalidTxnState)
		return resp
	}
	fill(c.offsets.WriteTxnOffsets(ctx, m.ProducerID, m.Epoch, r))
	return resp
}

// DescribeTransactions answers DescribeTransactions.
func (c *Coordinator) DescribeTransactions(r *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		e := c.entry(id, false)
		var m *txn.Metadata
		if e != nil {
			m = e.meta.Load()
		}
		if m == nil {
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		st.State = txn.StateName(m.State)
		st.TimeoutMillis, st.StartTimestamp = m.TimeoutMs, m.StartMs
		st.ProducerID, st.ProducerEpoch = m.ProducerID, m.Epoch
		byTopic := map[string]int{}
		for _, tp := range m.SortedPartitions() {
			i, ok := byTopic[tp.Topic]
			if !ok {
				i = len(st.Topics)
				byTopic[tp.Topic] = i
				st.Topics = append(st.Topics, kmsg.DescribeTransactionsResponseTransactionStateTopic{Topic: tp.Topic})
			}
			st.Topics[i].Partitions = append(st.Topics[i].Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// ListTransactions answers ListTransactions.
func (c *Coordinator) ListTransactions(r *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	states := map[string]bool{}
	for _, s := range r.StateFilters {
		states[s] = true
	}
	pids := map[int64]bool{}
	for _, p := range r.ProducerIDFilters {
		pids[p] = true
	}
	now := c.cfg.Clock.Now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.byID {
		m := e.meta.Load()
		if m == nil {
			continue
		}
		name := txn.StateName(m.State)
		if len(states) > 0 && !states[name] || len(pids) > 0 && !pids[m.ProducerID] {
			continue
		}
		if r.DurationFilterMillis >= 0 && r.Version >= 1 && m.State == kmsg.TransactionStateOngoing && now-m.StartMs < r.DurationFilterMillis {
			continue
		}
		resp.TransactionStates = append(resp.TransactionStates, kmsg.ListTransactionsResponseTransactionState{
			TransactionalID: id, ProducerID: m.ProducerID, TransactionState: name,
		})
	}
	return resp
}
