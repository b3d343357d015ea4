package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/parallel"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
)

// produceWait is one partition's durability target for an acks=all answer.
type produceWait struct {
	p      *partition.Partition
	end    int64 // the high watermark must reach this
	result *kmsg.ProduceResponseTopicPartition
}

// handleProduce appends a produce's batches. sums, when not nil, hold the
// chunk CRCs of the frame r was decoded from: its batches' checksums come
// from them.
func (b *Broker) handleProduce(r *kmsg.ProduceRequest, sums *recordbatch.Sums) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	if r.Acks != 0 && r.Acks != 1 && r.Acks != -1 {
		return b.refuseProduce(r, resp, errInvalidRequiredAcks), nil
	}
	var waits []produceWait
	if r.Version >= 12 && r.TransactionID != nil {
		waits = b.addTxnPartitions(r)
	}
	// The first stateWaits entries are transaction-state records, not
	// partitions of this answer: if one of them is not durable in time,
	// no partition of the produce may be reported written.
	stateWaits := len(waits)
	b.startEpochs(r)
	var hints leaderHints
	for _, rt := range r.Topics {
		var t *topic
		code := errInvalidTopicException
		if !internalTopic(rt.Topic) && !allForeign(b, rt.Topic, rt.Partitions, func(p kmsg.ProduceRequestTopicPartition) int32 { return p.Partition }) {
			t, code = b.lookupOrCreate(rt.Topic, true)
		}
		out := kmsg.ProduceResponseTopic{Topic: rt.Topic, TopicID: rt.TopicID}
		out.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for i, rp := range rt.Partitions {
			res := &out.Partitions[i]
			res.Default() // CurrentLeader says "none", not node 0
			res.Partition = rp.Partition
			res.BaseOffset = -1
			res.LogAppendTime = -1
			res.LogStartOffset = -1
			if h, foreign := b.foreignPartition(rt.Topic, rp.Partition); foreign {
				// Another group owns it: name its leader (KIP-951).
				res.ErrorCode = errNotLeaderOrFollower
				res.CurrentLeader.LeaderID, res.CurrentLeader.LeaderEpoch = h.leader, h.epoch
				hints.add(h.leader)
				continue
			}
			if t == nil {
				res.ErrorCode = code
				continue
			}
			if rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
				res.ErrorCode = errUnknownTopicOrPartition
				continue
			}
			p := t.partitions[rp.Partition]
			if r.Acks == -1 && b.notEnoughReplicas(p, t.settings.minISR) {
				res.ErrorCode = errNotEnoughReplicas
				msg := "the partition's in-sync replicas are fewer than its topic's min.insync.replicas"
				res.ErrorMessage = &msg
				continue
			}
			end, code, msg := b.appendBatches(t, p, rp.Records, r.Version, txnID(r), sums)
			res.ErrorCode = code
			if msg != "" {
				res.ErrorMessage = &msg
			}
			if code != 0 {
				continue
			}
			res.BaseOffset = end.base
			res.LogStartOffset = p.Log().StartOffset()
			b.stats.produced(int64(len(rp.Records)), end.records)
			waits = append(waits, produceWait{p: p, end: end.last + 1, result: res})
		}
		resp.Topics = append(resp.Topics, out)
	}
	// One group-commit pass for every partition the request wrote (the
	// appends above only marked them): started by each append, the first
	// partition's pass would leave the others to the next one, and an
	// eight-partition produce would wait for two.
	b.flush.Kick()
	resp.Brokers = hints.produceBrokers(b, r.Version)
	// Each result points into its topic's Partitions array, which copying
	// the topic into resp.Topics shares rather than moves.
	if r.Acks == 0 {
		// No answer at all, as Kafka; but a failed acks=0 produce
		// closes the connection, the only way the client can notice.
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return acks0Failed, nil
				}
			}
		}
		return nil, nil
	}
	if r.Acks != -1 && b.acks != config.AcksAll || len(waits) == 0 {
		return resp, nil
	}
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if b.repl != nil {
		// Replication: acks=all waits at most AckTimeout (and, in
		// static mode, also for every follower: the partition's
		// policy).
		if at := time.Duration(b.cfg.Replication.AckTimeout * float64(time.Second)); at > 0 && at < timeout {
			timeout = at
		}
	}
	return nil, func(ctx context.Context) kmsg.Response {
		b.waitAcked(ctx, waits, timeout)
		for _, w := range waits[:stateWaits] {
			if w.p.HighWatermark() < w.end {
				for _, d := range waits[stateWaits:] {
					d.result.ErrorCode = errRequestTimedOut
				}
				break
			}
		}
		return resp
	}
}

// acks0Failed tells the connection to close instead of answering: an
// acks=0 produce failed.
var acks0Failed kmsg.Response = new(kmsg.ProduceResponse)

// refuseProduce answers every partition of a produce with code.
func (b *Broker) refuseProduce(r *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, code int16) kmsg.Response {
	for _, rt := range r.Topics {
		out := kmsg.ProduceResponseTopic{Topic: rt.Topic, TopicID: rt.TopicID}
		for _, rp := range rt.Partitions {
			res := kmsg.NewProduceResponseTopicPartition()
			res.Partition, res.ErrorCode = rp.Partition, code
			res.BaseOffset, res.LogAppendTime, res.LogStartOffset = -1, -1, -1
			out.Partitions = append(out.Partitions, res)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// waitAcked waits until every wait's partition has committed (and, in
// static replication, every follower holds) what the produce appended,
// at most timeout, and gives every wait that did not get there an error
// code: NOT_LEADER_OR_FOLLOWER when this replica stopped leading,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND below min.insync.replicas,
// REQUEST_TIMED_OUT otherwise (the deadline passed, or ctx ended: the
// connection or the broker is closing; as in Kafka an unknown outcome,
// the records may still be committed later).
func (b *Broker) waitAcked(ctx context.Context, waits []produceWait, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pw := make([]partition.Wait, len(waits))
	for i, w := range waits {
		pw[i] = partition.Wait{P: w.p, Offset: w.end, Acks: true}
	}
	for i, err := range partition.WaitAll(ctx, pw) {
		switch {
		case err == nil:
		case errors.Is(err, partition.ErrStoppedLeading):
			waits[i].result.ErrorCode = errNotLeaderOrFollower
		case errors.Is(err, partition.ErrHeld):
			waits[i].result.ErrorCode = errNotEnoughReplicasAfterAppend
		default:
			waits[i].result.ErrorCode = errRequestTimedOut
		}
	}
}

// minISROf is p's min.insync.replicas: its topic's setting (the default
// for a topic that is gone).
func (b *Broker) minISROf(p *partition.Partition) int {
	if t := b.lookup(p.Topic); t != nil && t.id == p.TopicID {
		return t.settings.minISR
	}
	return defaultMinISR(&b.cfg)
}

// notEnoughReplicas reports whether an acks=all write to p must be refused
// before it is appended (NOT_ENOUGH_REPLICAS): fewer replicas are in sync
// than minISR, p's min.insync.replicas. A single node is one replica.
// Writes the broker makes itself to internal topics follow the same rule
// (they would be lost otherwise); their callers answer their clients with
// the coordinator's error.
func (b *Broker) notEnoughReplicas(p *partition.Partition, minISR int) bool {
	if b.repl == nil {
		return minISR > 1
	}
	return b.repl.underMinISR(p, minISR)
}

// addTxnPartitions adds every partition a transactional Produce v12+ writes
// to its producer's transaction with one state write, and returns what the
// acknowledgement must also wait for. Failures are left for the
// per-partition check, which reports them.
func (b *Broker) addTxnPartitions(r *kmsg.ProduceRequest) []produceWait {
	type producerKey struct {
		pid   int64
		epoch int16
	}
	adds := map[producerKey][]txn.TP{}
	tid := txnID(r)
	remote := b.remoteTxnCoordinator(tid)
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			h, err := recordbatch.ParseHeader(rp.Records)
			if err != nil || !h.Transactional() || h.Control() || b.lookup(rt.Topic) == nil {
				continue
			}
			if _, foreign := b.foreignPartition(rt.Topic, rp.Partition); foreign {
				continue // refused below: another group's
			}
			if remote && openHere(b.lookup(rt.Topic), rp.Partition, h.ProducerID) {
				continue // added with its first batch here
			}
			k := producerKey{h.ProducerID, h.ProducerEpoch}
			adds[k] = append(adds[k], txn.TP{Topic: rt.Topic, Partition: rp.Partition})
		}
	}
	var waits []produceWait
	for k, tps := range adds {
		if remote {
			// Added (durably) by the coordinator's group before the
			// data; a refusal here is the check's to answer.
			b.cl.remoteTxnCheck(b.ctx, tid, k.pid, k.epoch, tps, true)
			continue
		}
		if p, end, code := b.txns.AddImplicitAll(k.pid, k.epoch, tps, partition.FlushWithRequest); code == 0 && p != nil {
			waits = append(waits, produceWait{p: p, end: end, result: &kmsg.ProduceResponseTopicPartition{}})
		}
	}
	return waits
}

// txnID is a Produce request's transactional id ("" without one).
func txnID(r *kmsg.ProduceRequest) string {
	if r.TransactionID == nil {
		return ""
	}
	return *r.TransactionID
}

// openHere reports whether the producer has a transaction open on the
// partition.
func openHere(t *topic, index int32, pid int64) bool {
	if t == nil || index < 0 || int(index) >= len(t.partitions) {
		return false
	}
	_, open := t.partitions[index].OpenTransactions()[pid]
	return open
}

type appended struct {
	base, last int64
	records    int64
}

// startEpochs persists, for the local partitions r writes whose log has
// not yet started the epoch this replica leads in, the epoch's start, all
// at once. Alone, each start is a line appended to the partition's epoch
// history and an fsync; after a failover every partition's first append
// starts the new epoch, and one after another they held a produce over a
// thousand partitions for seconds. A partition the request writes alone
// is left to its append.
func (b *Broker) startEpochs(r *kmsg.ProduceRequest) {
	var starts []storage.EpochStart
	for _, rt := range r.Topics {
		t := b.lookup(rt.Topic)
		if t == nil || internalTopic(rt.Topic) { // clients may not write those
			continue
		}
		for _, rp := range rt.Partitions {
			if rp.Partition < 0 || int(rp.Partition) >= len(t.partitions) {
				continue
			}
			if _, foreign := b.foreignPartition(rt.Topic, rp.Partition); foreign {
				continue
			}
			if p := t.partitions[rp.Partition]; p != nil {
				if s, ok := p.LeaderEpochStart(); ok {
					starts = append(starts, s)
				}
			}
		}
	}
	if len(starts) < 2 {
		return
	}
	// A failure here is the append's to report: it tries again.
	b.persistEpochStarts(starts)
}

// persistEpochStarts persists several logs' epoch starts at once: with one
// sync of the data directory's volume in all, or without a volume a few
// fsyncs at a time.
func (b *Broker) persistEpochStarts(starts []storage.EpochStart) []error {
	if len(starts) == 1 {
		return []error{starts[0].Log.StartEpoch(starts[0].Epoch, starts[0].At)}
	}
	if b.volume != nil {
		return b.volume.StartEpochs(starts)
	}
	errs := make([]error, len(starts))
	idx := make([]int, len(starts))
	for i := range idx {
		idx[i] = i
	}
	parallel.Each(idx, maxParallelEpochStarts, func(i int) {
		errs[i] = starts[i].Log.StartEpoch(starts[i].Epoch, starts[i].At)
	})
	return errs
}

// maxParallelEpochStarts bounds the epoch starts persistEpochStarts
// persists at once without a volume (as the flusher bounds its fsyncs).
const maxParallelEpochStarts = 16

// appendBatches validates a partition's record batches and appends them.
// Validation covers every batch before the first append, so a request is
// stored whole or not at all per partition.
func (b *Broker) appendBatches(t *topic, p *partition.Partition, records []byte, version int16, tid string, sums *recordbatch.Sums) (appended, int16, string) {
	var res appended
	batches, err := recordbatch.SplitSummed(records, sums)
	switch {
	case errors.Is(err, recordbatch.ErrUnsupportedMagic):
		return res, errUnsupportedForMsgFormat, "MoonMQ stores record batch format v2 only (produce v3+)"
	case err != nil:
		b.log.Warn("refused corrupt record batch", "topic", t.name, "partition", p.Index, "err", err)
		return res, errCorruptMessage, err.Error()
	case len(batches) == 0:
		return res, errInvalidRecord, "produce carried no record batch"
	}
	headers := make([]recordbatch.Header, len(batches))
	for i, batch := range batches {
		if len(batch) > t.settings.maxMessageBytes {
			return res, errMessageTooLarge, "record batch exceeds max.message.bytes"
		}
		h, err := recordbatch.ParseHeader(batch)
		if err != nil {
			return res, errCorruptMessage, err.Error()
		}
		headers[i] = h
		if h.Control() {
			// Only the transaction coordinator writes markers.
			return res, errInvalidRecord, "clients may not write control batches"
		}
		if h.Transactional() {
			if placementOf(p).draining(b.clock.Now()) && !openTxn(p, h.ProducerID) {
				// A move waits for this partition's transactions to
				// end before it fences it: none may begin meanwhile.
				return res, errConcurrentTransactions, "the partition is moving to another replication group; retry"
			}
			if version >= 12 && !b.remoteTxnCoordinator(tid) {
				// Transactions v2: the first produce to a partition
				// adds it to the transaction. (With the coordinator
				// in another group, addTxnPartitions asked it to, and
				// the append's check verifies it did.)
				if code := b.txns.AddImplicit(b.ctx, h.ProducerID, h.ProducerEpoch, txn.TP{Topic: t.name, Partition: p.Index}); code != 0 {
					return res, code, "could not add the partition to the producer's transaction"
				}
			}
		}
		if h.ProducerID >= 0 && len(batches) > 1 {
			return res, errInvalidRecord, "an idempotent producer must send one batch per partition"
		}
		res.records += int64(h.RecordsCount)
	}
	txnCheck := func(h recordbatch.Header) int16 {
		return b.txns.CheckProduce(h.ProducerID, h.ProducerEpoch, t.name, p.Index)
	}
	if h := headers[0]; h.Transactional() && b.remoteTxnCoordinator(tid) {
		// The coordinator is asked before the append lock is taken (a
		// round trip must not hold up the partition's other
		// producers). A marker of this producer appended in between
		// means the transaction the answer was about may have ended:
		// the batch is refused then, as retriable, rather than opening
		// a transaction the coordinator no longer knows.
		_, open := p.OpenTransactions()[h.ProducerID]
		marker, _ := p.LastMarker(h.ProducerID)
		code := int16(0)
		if !open {
			code = b.cl.remoteTxnCheck(b.ctx, tid, h.ProducerID, h.ProducerEpoch, []txn.TP{{Topic: t.name, Partition: p.Index}}, false)
		}
		txnCheck = func(h recordbatch.Header) int16 {
			if _, open := p.OpenTransactions()[h.ProducerID]; open {
				return 0 // verified with the transaction's first batch here
			}
			if now, _ := p.LastMarker(h.ProducerID); code == 0 && now != marker {
				return errConcurrentTransactions
			}
			return code
		}
	}
	a, err := p.AppendClient(batches, headers, txnCheck, partition.FlushWithRequest)
	var refused *partition.Refusal
	switch {
	case errors.As(err, &refused) && refused.Transaction:
		return res, refused.Code, "the partition is not part of an ongoing transaction of this producer"
	case errors.As(err, &refused):
		return res, refused.Code, ""
	case errors.Is(err, partition.ErrDeleted):
		return res, errUnknownTopicOrPartition, ""
	case errors.Is(err, errNotServing):
		// Checked under the append lock: this replica stopped leading.
		return res, errNotLeaderOrFollower, ""
	case diskhealth.IsSpaceError(err):
		// The disk monitor logs a full disk, once per interval.
		return res, errKafkaStorageError, "the broker's disk is full; appends resume when space is freed"
	case err != nil:
		b.log.Error("append failed", "topic", t.name, "partition", p.Index, "err", err)
		return res, errKafkaStorageError, ""
	}
	res.base, res.last = a.Base, a.Last
	if a.Duplicate {
		// A retry: answered with its original offsets once they are
		// committed, like the original.
		res.records = 0
	}
	return res, 0, ""
}

// openTxn reports whether producerID has a transaction open on p.
func openTxn(p *partition.Partition, producerID int64) bool {
	_, open := p.OpenTransactions()[producerID]
	return open
}
