package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

// txnStateTopic holds every transactional id's state. A transition is
// written there (and fsynced) before it takes effect, so a restart resumes
// exactly the decisions clients were told about.
const txnStateTopic = "__transaction_state"

// txnCoordinator is the transaction coordinator. Transitions of one
// transactional id are serialised by its entry's mutex; different ids
// proceed in parallel. The current state is published through an atomic
// pointer so produce-path checks never wait for a transition.
type txnCoordinator struct {
	b *Broker

	mu    sync.Mutex
	byID  map[string]*txnEntry
	byPID map[int64]*txnEntry
}

type txnEntry struct {
	mu   sync.Mutex
	meta atomic.Pointer[txn.Metadata]
	// stateEnd is the __transaction_state offset durability must reach
	// for meta to be on disk (guarded by mu).
	stateEnd int64
	// removed is set (under mu) once the id expired and the entry left
	// the coordinator's maps: a caller that found the entry before must
	// look the id up again (lockEntry).
	removed bool
}

func newTxnCoordinator(b *Broker) *txnCoordinator {
	return &txnCoordinator{b: b, byID: map[string]*txnEntry{}, byPID: map[int64]*txnEntry{}}
}

func (c *txnCoordinator) entry(id string, create bool) *txnEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil && create {
		e = &txnEntry{}
		c.byID[id] = e
	}
	return e
}

// lockEntry finds and locks a transactional id's entry (creating it if
// create), never one that expired meanwhile; nil when there is none.
func (c *txnCoordinator) lockEntry(id string, create bool) *txnEntry {
	for {
		e := c.entry(id, create)
		if e == nil {
			return nil
		}
		e.mu.Lock()
		if !e.removed {
			return e
		}
		e.mu.Unlock()
	}
}

// install publishes m as e's state.
func (c *txnCoordinator) install(e *txnEntry, m *txn.Metadata) {
	c.mu.Lock()
	if old := e.meta.Load(); old != nil && old.ProducerID != m.ProducerID {
		delete(c.byPID, old.ProducerID)
	}
	c.byPID[m.ProducerID] = e
	c.mu.Unlock()
	e.meta.Store(m)
}

// checkProduce validates a transactional batch: its producer must have an
// ongoing transaction, at this epoch, that includes the partition. This is
// what keeps a delayed or zombie write out of a later transaction.
func (c *txnCoordinator) checkProduce(pid int64, epoch int16, topic string, partition int32) int16 {
	c.mu.Lock()
	e := c.byPID[pid]
	c.mu.Unlock()
	if e == nil {
		return txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if m == nil || m.ProducerID != pid {
		return txn.ErrInvalidProducerIDMapping
	}
	switch {
	case epoch < m.Epoch:
		return txn.ErrInvalidProducerEpoch
	case epoch > m.Epoch || m.State != kmsg.TransactionStateOngoing:
		return txn.ErrInvalidTxnState
	}
	if _, ok := m.Partitions[txn.TP{Topic: topic, Partition: partition}]; !ok {
		return txn.ErrInvalidTxnState
	}
	return 0
}

// addImplicit adds a partition to the producer's transaction, as Produce
// v12+ does under transactions v2. Adding a partition that is already in
// the transaction costs no write.
func (c *txnCoordinator) addImplicit(ctx context.Context, pid int64, epoch int16, tp txn.TP) int16 {
	p, end, code := c.addImplicitAll(pid, epoch, []txn.TP{tp})
	if code == 0 && p != nil && c.b.waitOwn(ctx, p, end) != nil {
		return errRequestTimedOut
	}
	return code
}

// addImplicitAll adds several partitions with one state write, so a produce
// request that opens a transaction on many partitions needs one record. The
// write is not waited for here: the produce's acknowledgement waits for it
// together with the data (returned as p and end; p is nil when nothing was
// written). Should a crash keep the data but lose this record, the start-up
// sweep aborts the orphaned transaction, so no partition hangs.
func (c *txnCoordinator) addImplicitAll(pid int64, epoch int16, tps []txn.TP) (*partition.Partition, int64, int16) {
	c.mu.Lock()
	e := c.byPID[pid]
	c.mu.Unlock()
	if e == nil {
		return nil, 0, txn.ErrInvalidProducerIDMapping
	}
	if m := e.meta.Load(); m.State == kmsg.TransactionStateOngoing && m.Epoch == epoch {
		all := true
		for _, tp := range tps {
			_, ok := m.Partitions[tp]
			all = all && ok
		}
		if all {
			return nil, 0, 0
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.removed {
		return nil, 0, txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if code := m.CheckProducer(pid, epoch, true); code != 0 {
		if epoch < m.Epoch {
			return nil, 0, txn.ErrInvalidProducerEpoch
		}
		return nil, 0, code
	}
	for _, tp := range tps {
		if !c.b.validTxnPartition(tp) {
			return nil, 0, errUnknownTopicOrPartition
		}
	}
	next, code := m.AddPartitions(tps, time.Now().UnixMilli())
	if code != 0 {
		return nil, 0, code
	}
	p, end, err := c.appendState(e, next)
	if errors.Is(err, errBelowMinISR) {
		return nil, 0, errNotEnoughReplicas
	}
	if err != nil {
		return nil, 0, errKafkaStorageError
	}
	c.install(e, next)
	return p, end, 0
}

// sweepOrphans aborts transactions that partitions hold open but the
// coordinator does not know as ongoing on them (a lost implicit add, or a
// coordinator record lost with unsynced data): without this a partition's
// LSO would never move again.
func (c *txnCoordinator) sweepOrphans(ctx context.Context) error {
	for _, t := range c.b.sortedTopics() {
		for _, p := range t.partitions {
			open := p.OpenTransactions()
			for pid := range open {
				c.mu.Lock()
				e := c.byPID[pid]
				c.mu.Unlock()
				tp := txn.TP{Topic: t.name, Partition: p.Index}
				if e != nil {
					if m := e.meta.Load(); m.State == kmsg.TransactionStateOngoing || m.Preparing() {
						if _, ok := m.Partitions[tp]; ok {
							continue
						}
					}
				}
				c.b.log.Warn("aborting an orphaned open transaction", "topic", t.name, "partition", p.Index, "producer_id", pid)
				// The marker carries the producer's own epoch: it must
				// close the orphan without fencing a live producer.
				epoch, _ := p.ProducerEpoch(pid)
				if e != nil {
					epoch = max(epoch, e.meta.Load().Epoch)
				}
				orphan := &txn.Metadata{ProducerID: pid, Epoch: epoch, Partitions: map[txn.TP]struct{}{tp: {}}}
				if err := c.writeMarkers(ctx, orphan, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// validTxnPartition reports whether a partition may join a transaction:
// it exists and is not one of the broker's own internal topics (the offsets
// topic joins through AddOffsetsToTxn / TxnOffsetCommit, never directly).
func (b *Broker) validTxnPartition(tp txn.TP) bool {
	t := b.lookup(tp.Topic)
	return t != nil && !internalTopic(tp.Topic) && tp.Partition >= 0 && int(tp.Partition) < len(t.partitions)
}

// writeState appends m to __transaction_state and waits until durable.
func (c *txnCoordinator) writeState(ctx context.Context, e *txnEntry, m *txn.Metadata) error {
	p, end, err := c.appendState(e, m)
	if err != nil {
		return err
	}
	return c.b.waitOwn(ctx, p, end)
}

// appendState appends e's next state m to __transaction_state without
// waiting, returning the offset durability must reach. The caller holds
// e.mu.
func (c *txnCoordinator) appendState(e *txnEntry, m *txn.Metadata) (*partition.Partition, int64, error) {
	return c.appendStateWith(e, m, c.b.appendOwn)
}

func (c *txnCoordinator) appendStateWith(e *txnEntry, m *txn.Metadata, appendOwn func(*partition.Partition, []byte) (int64, error)) (*partition.Partition, int64, error) {
	p, err := c.b.internalPartition(txnStateTopic, map[string]string{"cleanup.policy": "compact"})
	if err != nil {
		return nil, 0, err
	}
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{
		Key: txn.EncodeKey(m.ID), Value: txn.EncodeValue(m), Timestamp: time.Now().UnixMilli(),
	}})
	if err != nil {
		return nil, 0, err
	}
	end, err := appendOwn(p, batch)
	if err != nil {
		return nil, 0, err
	}
	e.stateEnd = end
	return p, end, nil
}

// appendStateLazy is appendState for a record nobody waits for (see
// appendOwnLazy).
func (c *txnCoordinator) appendStateLazy(e *txnEntry, m *txn.Metadata) (*partition.Partition, int64, error) {
	return c.appendStateWith(e, m, c.b.appendOwnLazy)
}

// transition writes m and then publishes it.
func (c *txnCoordinator) transition(ctx context.Context, e *txnEntry, m *txn.Metadata) error {
	if err := c.writeState(ctx, e, m); err != nil {
		return err
	}
	c.install(e, m)
	return nil
}

// writeMarkers appends a commit or abort marker to every partition of the
// transaction and waits until all are durable, together with the writes
// in also; committed offsets of the transaction become visible once their
// marker is.
func (c *txnCoordinator) writeMarkers(ctx context.Context, m *txn.Metadata, commit bool, also ...partition.Wait) error {
	typ := txn.ControlAbort
	if commit {
		typ = txn.ControlCommit
	}
	batch0, err := recordbatch.Encode(recordbatch.BatchOptions{
		ProducerID: m.ProducerID, ProducerEpoch: m.Epoch, BaseSequence: -1, Transactional: true, Control: true,
	}, []recordbatch.Record{{Key: txn.ControlKey(typ), Value: txn.ControlValue(0), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		return err
	}
	waits := also
	offsetsTouched := false
	for _, tp := range m.SortedPartitions() {
		t := c.b.lookup(tp.Topic)
		if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.partitions) {
			continue // deleted since (or never valid): nothing to mark
		}
		p := t.partitions[tp.Partition]
		batch := append([]byte(nil), batch0...)
		end, err := c.b.appendOwn(p, batch)
		if err != nil {
			return fmt.Errorf("marker for %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		waits = append(waits, partition.Wait{P: p, Offset: end})
		offsetsTouched = offsetsTouched || tp.Topic == offsetsTopic
	}
	// The broker's context, not the request's: a client that disconnects
	// mid-EndTxn must not leave a decided transaction half-marked.
	wctx, cancel := context.WithTimeout(c.b.ctx, ownWriteTimeout)
	defer cancel()
	for _, err := range partition.WaitAll(wctx, waits) {
		if err != nil {
			return errCommitTimeout
		}
	}
	if offsetsTouched {
		c.b.groups.EndTxn(m.ProducerID, commit)
	}
	return nil
}

// finish completes a transaction whose Prepare* state is current: markers,
// then the Complete* state. also are writes to wait for with the markers.
func (c *txnCoordinator) finish(ctx context.Context, e *txnEntry, also ...partition.Wait) error {
	m := e.meta.Load()
	if err := c.writeMarkers(ctx, m, m.Committing(), also...); err != nil {
		return err
	}
	done := m.Complete(time.Now().UnixMilli())
	if m.NextProducerID == -2 {
		if err := c.bump(done); err != nil {
			return err
		}
	}
	// The outcome is already durable (Prepare* state and markers), so the
	// Complete* record need not be waited for: if it is lost, recovery
	// finds the Prepare* state and completes again, which is idempotent.
	if _, _, err := c.appendStateLazy(e, done); err != nil {
		return err
	}
	c.install(e, done)
	return nil
}

// bump moves m to the next epoch, or to a fresh producer id when the epoch
// space is used up.
func (c *txnCoordinator) bump(m *txn.Metadata) error {
	m.NextProducerID = 0
	if m.Epoch < math.MaxInt16-2 {
		m.Epoch++
		return nil
	}
	pid, err := c.b.nextProducerID()
	if err != nil {
		return err
	}
	m.ProducerID, m.Epoch = pid, 0
	return nil
}

// end decides and completes a transaction (commit or abort). fence bumps
// the epoch first, as a timeout abort and every transactions-v2 EndTxn do,
// so the old epoch's later requests are refused.
func (c *txnCoordinator) end(ctx context.Context, e *txnEntry, commit, fence bool) int16 {
	m := e.meta.Load()
	action, prepared, code := m.End(commit, time.Now().UnixMilli())
	if fence && action == txn.EndFail && code == txn.ErrInvalidTxnState && m.State != kmsg.TransactionStateOngoing && !commit {
		// Transactions v2: aborting with nothing open is legal and
		// still bumps the epoch.
		next := m.Clone()
		next.State = kmsg.TransactionStateCompleteAbort
		if err := c.bump(next); err != nil {
			return errKafkaStorageError
		}
		if err := c.transition(ctx, e, next); err != nil {
			return coordinatorCode(err)
		}
		return 0
	}
	switch action {
	case txn.EndDone:
		return 0
	case txn.EndFail:
		return code
	}
	if fence {
		if prepared.Epoch >= math.MaxInt16-2 {
			// Out of epochs: markers go out under the current epoch,
			// and the completed state moves to a fresh producer id.
			prepared.NextProducerID = -2
		} else {
			prepared.Epoch++
		}
	}
	var also []partition.Wait
	if prepared.Epoch == m.Epoch+1 {
		// One durable round: the decision and its markers are written
		// together. The markers carry the new epoch, which no other
		// write of this producer can have before the decision is
		// acknowledged, so a restart that lost the decision record but
		// kept a marker reads the decision from the marker
		// (recoverFromMarkers). That requires the Ongoing state (with
		// its partitions) to be on disk before any marker is.
		if st := c.b.lookup(txnStateTopic); st != nil && st.partitions[0].HighWatermark() < e.stateEnd &&
			c.b.waitOwn(ctx, st.partitions[0], e.stateEnd) != nil {
			return errRequestTimedOut
		}
		p, end, err := c.appendState(e, prepared)
		if err != nil {
			c.b.log.Error("writing transaction state failed", "transactional_id", m.ID, "err", err)
			return coordinatorCode(err)
		}
		// Decided: from here on this process completes it, whatever the
		// request's fate (finish is idempotent and retried).
		c.install(e, prepared)
		also = append(also, partition.Wait{P: p, Offset: end})
	} else if err := c.transition(ctx, e, prepared); err != nil {
		c.b.log.Error("writing transaction state failed", "transactional_id", m.ID, "err", err)
		return coordinatorCode(err)
	}
	if err := c.finish(ctx, e, also...); err != nil {
		// The decision is durable; recovery or the next request will
		// finish it.
		c.b.log.Error("completing transaction failed", "transactional_id", m.ID, "err", err)
		return coordinatorCode(err)
	}
	return 0
}

func (b *Broker) handleInitProducerIDTxn(ctx context.Context, r *kmsg.InitProducerIDRequest) kmsg.Response {
	c := b.txns
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id := *r.TransactionalID
	if id == "" {
		resp.ErrorCode = errInvalidRequest
		return resp
	}
	if r.TransactionTimeoutMillis <= 0 || r.TransactionTimeoutMillis > txn.MaxTimeoutMs {
		resp.ErrorCode = txn.ErrInvalidTransactionTimeout
		return resp
	}
	e := c.lockEntry(id, true)
	defer e.mu.Unlock()
	now := time.Now().UnixMilli()
	m := e.meta.Load()
	if m == nil {
		pid, err := b.nextProducerID()
		if err != nil {
			resp.ErrorCode = coordinatorCode(err)
			return resp
		}
		m = &txn.Metadata{ID: id, ProducerID: pid, TimeoutMs: r.TransactionTimeoutMillis,
			State: kmsg.TransactionStateEmpty, Partitions: map[txn.TP]struct{}{}, StartMs: now, UpdateMs: now}
		if err := c.transition(ctx, e, m); err != nil {
			resp.ErrorCode = coordinatorCode(err)
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
		if err := c.finish(ctx, e); err != nil {
			resp.ErrorCode = coordinatorCode(err)
			return resp
		}
	}
	if e.meta.Load().State == kmsg.TransactionStateOngoing {
		// A new incarnation fences the old one and aborts what it left
		// open, at once. The abort markers carry a bumped epoch, so a
		// delayed write of the old incarnation is refused by the
		// partition's producer state even if it raced the coordinator.
		if code := c.end(ctx, e, false, true); code != 0 {
			resp.ErrorCode = code
			return resp
		}
	}
	next := e.meta.Load().Clone()
	next.Epoch++
	if next.Epoch >= math.MaxInt16-1 {
		pid, err := b.nextProducerID()
		if err != nil {
			resp.ErrorCode = coordinatorCode(err)
			return resp
		}
		next.ProducerID, next.Epoch = pid, 0
	}
	next.State = kmsg.TransactionStateEmpty
	next.Partitions = map[txn.TP]struct{}{}
	next.TimeoutMs = r.TransactionTimeoutMillis
	next.UpdateMs = now
	if err := c.transition(ctx, e, next); err != nil {
		resp.ErrorCode = coordinatorCode(err)
		return resp
	}
	b.log.Info("initialized transactional producer", "transactional_id", id, "producer_id", next.ProducerID, "epoch", next.Epoch)
	resp.ProducerID, resp.ProducerEpoch = next.ProducerID, next.Epoch
	return resp
}

// lockTxn finds and locks a transactional id's entry and validates the
// producer; the caller unlocks e.mu when code is 0.
func (c *txnCoordinator) lockTxn(id string, pid int64, epoch int16, newErrors bool) (*txnEntry, int16) {
	e := c.lockEntry(id, false)
	if e == nil {
		return nil, txn.ErrInvalidProducerIDMapping
	}
	m := e.meta.Load()
	if m == nil {
		e.mu.Unlock()
		return nil, txn.ErrInvalidProducerIDMapping
	}
	if code := m.CheckProducer(pid, epoch, newErrors); code != 0 {
		e.mu.Unlock()
		return nil, code
	}
	return e, 0
}

func (b *Broker) handleAddPartitionsToTxn(ctx context.Context, r *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var tps []txn.TP
	missing := map[txn.TP]bool{}
	for _, rt := range r.Topics {
		t := b.lookup(rt.Topic)
		for _, p := range rt.Partitions {
			tp := txn.TP{Topic: rt.Topic, Partition: p}
			if t == nil || p < 0 || int(p) >= len(t.partitions) || internalTopic(rt.Topic) {
				missing[tp] = true
			}
			tps = append(tps, tp)
		}
	}
	code := int16(0)
	if len(missing) == 0 {
		e, c := b.txns.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
		code = c
		if e != nil {
			next, c := e.meta.Load().AddPartitions(tps, time.Now().UnixMilli())
			code = c
			if code == 0 {
				if err := b.txns.transition(ctx, e, next); err != nil {
					code = coordinatorCode(err)
				}
			}
			e.mu.Unlock()
		}
	}
	for _, rt := range r.Topics {
		out := kmsg.AddPartitionsToTxnResponseTopic{Topic: rt.Topic}
		for _, p := range rt.Partitions {
			pc := code
			if len(missing) > 0 {
				pc = errOperationNotAttempted
				if missing[txn.TP{Topic: rt.Topic, Partition: p}] {
					pc = errUnknownTopicOrPartition
				}
			}
			out.Partitions = append(out.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: pc})
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (b *Broker) handleAddOffsetsToTxn(ctx context.Context, r *kmsg.AddOffsetsToTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if r.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return resp
	}
	if err := b.groups.EnsureTopic(); err != nil {
		resp.ErrorCode = errKafkaStorageError
		return resp
	}
	e, code := b.txns.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
	if e == nil {
		resp.ErrorCode = code
		return resp
	}
	defer e.mu.Unlock()
	next, code := e.meta.Load().AddPartitions([]txn.TP{{Topic: offsetsTopic, Partition: 0}}, time.Now().UnixMilli())
	if code == 0 {
		if err := b.txns.transition(ctx, e, next); err != nil {
			code = coordinatorCode(err)
		}
	}
	resp.ErrorCode = code
	return resp
}

func (b *Broker) handleEndTxn(ctx context.Context, r *kmsg.EndTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	v2 := r.Version >= 5
	// A retry of an EndTxn whose decision is already durable: finish it
	// (if an earlier attempt was cut short) and answer as the first
	// attempt would have. Under transactions v2 the retry carries the
	// epoch from before the bump.
	if e := b.txns.lockEntry(r.TransactionalID, false); e != nil {
		m := e.meta.Load()
		sameEpoch := m != nil && r.ProducerID == m.ProducerID && (r.ProducerEpoch == m.Epoch || v2 && r.ProducerEpoch == m.Epoch-1)
		var handled bool
		switch {
		case sameEpoch && m.Preparing() && m.Committing() == r.Commit:
			handled = true
			if err := b.txns.finish(ctx, e); err != nil {
				b.log.Error("completing transaction failed", "transactional_id", m.ID, "err", err)
				resp.ErrorCode = coordinatorCode(err)
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
	e, code := b.txns.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
	if e == nil {
		resp.ErrorCode = code
		return resp
	}
	defer e.mu.Unlock()
	resp.ErrorCode = b.txns.end(ctx, e, r.Commit, v2)
	if m := e.meta.Load(); v2 && resp.ErrorCode == 0 {
		resp.ProducerID, resp.ProducerEpoch = m.ProducerID, m.Epoch
	}
	return resp
}

func (b *Broker) handleTxnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) kmsg.Response {
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
		fill(errInvalidGroupID)
		return resp
	}
	e, code := b.txns.lockTxn(r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Version >= 2)
	if e == nil {
		fill(code)
		return resp
	}
	defer e.mu.Unlock()
	m := e.meta.Load()
	offsetsTP := txn.TP{Topic: offsetsTopic, Partition: 0}
	if _, ok := m.Partitions[offsetsTP]; !ok && r.Version >= 5 {
		// Transactions v2: the commit adds the group implicitly.
		if err := b.groups.EnsureTopic(); err != nil {
			fill(errKafkaStorageError)
			return resp
		}
		next, code := m.AddPartitions([]txn.TP{offsetsTP}, time.Now().UnixMilli())
		if code == 0 {
			if err := b.txns.transition(ctx, e, next); err != nil {
				code = coordinatorCode(err)
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
	fill(b.groups.WriteTxnOffsets(ctx, m.ProducerID, m.Epoch, r))
	return resp
}

// loadTxnState rebuilds the coordinator from __transaction_state and
// finishes transactions whose decision was made but not completed.
func (c *txnCoordinator) load(ctx context.Context) error {
	t := c.b.lookup(txnStateTopic)
	if t == nil {
		return nil
	}
	p := t.partitions[0]
	err := p.Scan(p.Log().StartOffset(), p.HighWatermark(), func(h recordbatch.Header, batch []byte) error {
		recs, err := recordbatch.Records(batch, 64<<20)
		if err != nil {
			return err
		}
		for _, r := range recs {
			id, m, err := txn.Decode(r.Key, r.Value)
			if err != nil {
				c.b.log.Warn("skipping undecodable transaction state record", "offset", r.Offset, "err", err)
				continue
			}
			e := c.entry(id, true)
			if m == nil {
				c.mu.Lock()
				if old := e.meta.Load(); old != nil {
					delete(c.byPID, old.ProducerID)
				}
				delete(c.byID, id)
				c.mu.Unlock()
				continue
			}
			c.install(e, m)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rebuild transactions from %s: %w", txnStateTopic, err)
	}
	c.mu.Lock()
	entries := make([]*txnEntry, 0, len(c.byID))
	for _, e := range c.byID {
		entries = append(entries, e)
	}
	c.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		err := c.recoverFromMarkers(ctx, e)
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, e := range entries {
		if m := e.meta.Load(); m.Preparing() {
			c.b.log.Info("completing a transaction decided before the restart", "transactional_id", m.ID, "commit", m.Committing())
			e.mu.Lock()
			err := c.finish(ctx, e)
			e.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	if len(entries) > 0 {
		c.b.log.Info("rebuilt transaction state", "transactional_ids", len(entries))
	}
	return nil
}

// recoverFromMarkers finds the decision of an Ongoing transaction whose
// EndTxn wrote its decision and markers in one round (see end) and was cut
// short with a marker durable but the decision record lost: a marker of
// the producer at the next epoch can only come from that decision. The
// decision is then written again and completed, so every partition gets
// the same outcome. The caller holds e.mu.
func (c *txnCoordinator) recoverFromMarkers(ctx context.Context, e *txnEntry) error {
	m := e.meta.Load()
	if m == nil || m.State != kmsg.TransactionStateOngoing || m.Epoch >= math.MaxInt16-2 {
		return nil
	}
	found, commit := false, false
	for tp := range m.Partitions {
		t := c.b.lookup(tp.Topic)
		if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.partitions) {
			continue
		}
		p := t.partitions[tp.Partition]
		mk, ok := p.LastMarker(m.ProducerID)
		if ok && mk.Epoch == m.Epoch+1 {
			found, commit = true, mk.Commit
			break
		}
	}
	if !found {
		return nil
	}
	action, prepared, code := m.End(commit, time.Now().UnixMilli())
	if action == txn.EndFail {
		return fmt.Errorf("recovering transaction %q from its markers: %d", m.ID, code)
	}
	prepared.Epoch++
	c.b.log.Info("completing a transaction whose decision survived only in its markers", "transactional_id", m.ID, "commit", commit)
	if err := c.transition(ctx, e, prepared); err != nil {
		return err
	}
	return c.finish(ctx, e)
}

// abortExpired aborts (and fences) transactions open longer than their
// timeout, so a dead producer never pins a partition's LSO.
func (c *txnCoordinator) abortExpired(ctx context.Context, now time.Time) {
	c.mu.Lock()
	var due []*txnEntry
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
			if err := c.finish(ctx, e); err != nil {
				c.b.log.Error("completing a decided transaction failed; will retry", "transactional_id", m.ID, "err", err)
			}
		case m.Expired(now.UnixMilli()):
			c.b.log.Warn("aborting a transaction past its timeout", "transactional_id", m.ID, "producer_id", m.ProducerID, "timeout_ms", m.TimeoutMs)
			c.end(ctx, e, false, true)
		}
		e.mu.Unlock()
	}
}

func (c *txnCoordinator) run(ctx context.Context) {
	// Idle ids are expired on their own goroutine: a pass waits for
	// durable writes, and must not hold up timeout aborts.
	var wg sync.WaitGroup
	wg.Go(func() {
		every(ctx, time.Duration(c.b.cfg.TransactionalIdExpirationCheckMs)*time.Millisecond, func(now time.Time) {
			c.b.ExpireTransactionalIDs(ctx, now)
		})
	})
	defer wg.Wait()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			c.abortExpired(ctx, now)
		}
	}
}

// maxTombstonesPerWrite bounds the ids one durable write of
// ExpireTransactionalIDs deletes (and so the entries it holds locked).
const maxTombstonesPerWrite = 1000

// ExpireTransactionalIDs deletes the transactional ids that have had no
// transaction and no change for TransactionalIdExpirationMs as of now
// (Kafka's transactional.id.expiration.ms): their tombstones go to
// __transaction_state in batches of up to maxTombstonesPerWrite, one
// durable write each, before the ids leave memory. It returns how many it
// deleted. An id's next InitProducerId starts afresh with a new producer
// id. Only a broker that writes its own state runs it.
func (b *Broker) ExpireTransactionalIDs(ctx context.Context, now time.Time) int {
	if b.following() || b.fenced() {
		return 0
	}
	c := b.txns
	exp := b.cfg.TransactionalIdExpirationMs
	c.mu.Lock()
	var due []*txnEntry
	for _, e := range c.byID {
		if m := e.meta.Load(); m != nil && m.Idle(now.UnixMilli(), exp) {
			due = append(due, e)
		}
	}
	c.mu.Unlock()
	// One global order: two passes (a test's and the ticker's, or an
	// ending term's and the next one's) that lock entries in different
	// orders could each hold what the other waits for.
	slices.SortFunc(due, func(a, b *txnEntry) int { return strings.Compare(a.meta.Load().ID, b.meta.Load().ID) })
	n := 0
	for len(due) > 0 && ctx.Err() == nil {
		k := min(len(due), maxTombstonesPerWrite)
		n += c.expireBatch(ctx, due[:k], now, exp)
		due = due[k:]
	}
	return n
}

// expireBatch deletes those of entries that are still idle, with one
// durable write, and returns how many. Entries are locked in turn and
// released together; entries are taken in the order of their ids (the
// caller sorts them), no other path holds two at once, and every path
// takes an entry's mu before c.mu, as this one does.
func (c *txnCoordinator) expireBatch(ctx context.Context, entries []*txnEntry, now time.Time, exp int64) int {
	var locked []*txnEntry
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
	p, err := c.b.internalPartition(txnStateTopic, map[string]string{"cleanup.policy": "compact"})
	var end int64
	if err == nil {
		recs := make([]recordbatch.Record, len(metas))
		for i, m := range metas {
			recs[i] = recordbatch.Record{Key: txn.EncodeKey(m.ID), Timestamp: now.UnixMilli()}
		}
		var batch []byte
		if batch, err = recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs); err == nil {
			end, err = c.b.appendOwn(p, batch)
		}
	}
	if err == nil {
		err = c.b.waitOwn(ctx, p, end)
	}
	if err != nil {
		// A tombstone that becomes durable anyway only deletes an id
		// that was idle: its owner's next InitProducerId starts afresh.
		c.b.log.Error("expiring idle transactional ids failed; retrying at the next check", "ids", len(metas), "err", err)
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
		c.b.log.Info("expired an idle transactional id", "transactional_id", m.ID, "producer_id", m.ProducerID, "expiration_ms", exp)
	}
	c.mu.Unlock()
	c.b.stats.expiredTxnIDs.Add(int64(len(metas)))
	return len(metas)
}

func (b *Broker) handleDescribeTransactions(r *kmsg.DescribeTransactionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		e := b.txns.entry(id, false)
		var m *txn.Metadata
		if e != nil {
			m = e.meta.Load()
		}
		if m == nil {
			st.ErrorCode = errTransactionalIDNotFound
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

func (b *Broker) handleListTransactions(r *kmsg.ListTransactionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	states := map[string]bool{}
	for _, s := range r.StateFilters {
		states[s] = true
	}
	pids := map[int64]bool{}
	for _, p := range r.ProducerIDFilters {
		pids[p] = true
	}
	now := time.Now().UnixMilli()
	b.txns.mu.Lock()
	defer b.txns.mu.Unlock()
	for id, e := range b.txns.byID {
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

func (b *Broker) handleDescribeProducers(r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range r.Topics {
		out := kmsg.DescribeProducersResponseTopic{Topic: rt.Topic}
		for _, pi := range rt.Partitions {
			op := kmsg.NewDescribeProducersResponseTopicPartition()
			op.Partition = pi
			p, code := b.partitionOf(rt.Topic, pi)
			if code != 0 {
				op.ErrorCode = code
				out.Partitions = append(out.Partitions, op)
				continue
			}
			producers, open := p.Producers()
			for _, pr := range producers {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = pr.ID, int32(pr.Epoch), pr.LastSequence
				ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = pr.LastMs, 0, -1
				if first, ok := open[pr.ID]; ok {
					ap.CurrentTxnStartOffset = first
					delete(open, pr.ID)
				}
				op.ActiveProducers = append(op.ActiveProducers, ap)
			}
			for id, first := range open {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.LastSequence, ap.LastTimestamp, ap.CurrentTxnStartOffset = id, -1, -1, first
				op.ActiveProducers = append(op.ActiveProducers, ap)
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// reset forgets every transactional id before a reload.
func (c *txnCoordinator) reset() {
	c.mu.Lock()
	c.byID = map[string]*txnEntry{}
	c.byPID = map[int64]*txnEntry{}
	c.mu.Unlock()
}

// reload replaces the transactional ids in memory with what
// __transaction_state holds, for a new leader, then finishes the
// transactions that were finishing and aborts those whose producer is
// gone.
func (c *txnCoordinator) reload(ctx context.Context) error {
	c.reset()
	if err := c.load(ctx); err != nil {
		return err
	}
	return c.sweepOrphans(ctx)
}
