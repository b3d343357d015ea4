package broker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/producer"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/vfs"
)

// producerIDsTopic holds producer-id block reservations. Like committed
// offsets, this state lives in an internal topic so that it survives
// restarts (and, with replication, a change of leader) without ever handing
// out an id twice.
const producerIDsTopic = "__producer_ids"

// producerIDBlock is how many ids one reservation covers.
const producerIDBlock = 1000

// producerSnapshotFile holds a partition's idempotence state at a clean
// shutdown, so start-up scans only what was appended after it.
const producerSnapshotFile = "producer-snapshot.json"

// batchInfo is what the producer state needs of a batch appended at nowMs.
func batchInfo(h recordbatch.Header, nowMs int64) producer.BatchInfo {
	return producer.BatchInfo{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		BaseSequence: h.BaseSequence, Count: h.LastOffsetDelta + 1, AppendMs: nowMs}
}

// scanBatches calls fn for every stored batch in [from, to) of p.
func scanBatches(p *partition, from, to int64, fn func(h recordbatch.Header, batch []byte) error) error {
	for off := from; off < to; {
		data, err := p.log.Read(off, 4<<20, to)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
		for len(data) >= recordbatch.HeaderSize {
			h, err := recordbatch.ParseHeader(data)
			if err != nil || h.Size() > len(data) {
				return fmt.Errorf("batch at offset %d: %v", off, err)
			}
			if err := fn(h, data[:h.Size()]); err != nil {
				return err
			}
			off = h.LastOffset() + 1
			data = data[h.Size():]
		}
	}
	return nil
}

// partitionSnapshot is what producer-snapshot.json holds: the idempotence
// and transaction state of a partition as of Offset.
type partitionSnapshot struct {
	Offset    int64
	Producers json.RawMessage
	Txns      json.RawMessage
}

// applyBatch updates a partition's producer and transaction state for a
// stored batch. It is used both when rebuilding from the log and after
// every append, so the two can never disagree. nowMs is the append's time
// (the rebuild's, for a batch found in the log), from which an idle
// producer's expiry is measured.
func applyBatch(p *partition, h recordbatch.Header, batch []byte, nowMs int64) error {
	if h.ProducerID < 0 {
		return nil
	}
	if h.Control() {
		recs, err := recordbatch.Records(batch, 1<<16)
		if err != nil || len(recs) == 0 {
			return fmt.Errorf("control batch at %d: %v", h.BaseOffset, err)
		}
		typ, err := txn.ParseControlKey(recs[0].Key)
		if err != nil {
			return err
		}
		p.txnMu.Lock()
		p.txns.OnMarker(h.ProducerID, h.ProducerEpoch, typ, h.BaseOffset)
		p.txnMu.Unlock()
		p.producers.ObserveEpoch(h.ProducerID, h.ProducerEpoch, nowMs)
		return nil
	}
	if h.BaseSequence >= 0 {
		p.producers.Record(batchInfo(h, nowMs), h.BaseOffset)
	}
	if h.Transactional() {
		p.txnMu.Lock()
		p.txns.OnData(h.ProducerID, h.BaseOffset)
		p.txnMu.Unlock()
	}
	return nil
}

// loadProducerState rebuilds a partition's idempotence and transaction
// state from its snapshot (if it still matches the log) and the batches
// after it.
func (b *Broker) loadProducerState(p *partition) error {
	path := filepath.Join(p.log.Dir(), producerSnapshotFile)
	p.producers, p.txns = producer.New(), txn.NewPartition()
	from := p.log.StartOffset()
	now := time.Now().UnixMilli()
	if data, err := vfs.ReadFile(b.fs, path); err == nil {
		var snap partitionSnapshot
		err := json.Unmarshal(data, &snap)
		var ps *producer.State
		var ts *txn.Partition
		if err == nil {
			ps, _, err = producer.Load(snap.Producers, now)
		}
		if err == nil {
			ts, err = txn.LoadPartition(snap.Txns)
		}
		if err == nil && snap.Offset <= p.log.EndOffset() && snap.Offset >= from {
			p.producers, p.txns, from = ps, ts, snap.Offset
		} else {
			b.log.Warn("ignoring producer snapshot; rescanning the log", "topic", p.topic, "partition", p.index, "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// A snapshot is only valid for the log it was taken of: remove it now
	// so a crash later cannot pair it with a truncated log.
	_ = b.fs.Remove(path)
	return scanBatches(p, from, p.log.EndOffset(), func(h recordbatch.Header, batch []byte) error {
		return applyBatch(p, h, batch, now)
	})
}

// saveProducerState writes the snapshot at shutdown.
func (b *Broker) saveProducerState(p *partition) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if p.producers == nil || p.producers.Len() == 0 && p.txns.Empty() {
		return
	}
	end := p.log.EndOffset()
	p.txnMu.Lock()
	snap := partitionSnapshot{Offset: end, Producers: p.producers.Snapshot(end), Txns: p.txns.Snapshot()}
	p.txnMu.Unlock()
	data, _ := json.Marshal(snap)
	path := filepath.Join(p.log.Dir(), producerSnapshotFile)
	if err := vfs.WriteFileAtomic(b.fs, path, data); err != nil {
		b.log.Warn("could not write producer snapshot; the next start rescans the log", "topic", p.topic, "partition", p.index, "err", err)
	}
}

// ExpireProducers forgets, in every partition, the idempotent producers
// that have written nothing there for ProducerIdExpirationMs as of now and
// have no open transaction there (Kafka's producer.id.expiration.ms), and
// returns how many it forgot. Every replica runs it on its own state;
// nothing is written.
func (b *Broker) ExpireProducers(now time.Time) int {
	n := 0
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			p.appendMu.Lock()
			var gone []int64
			if p.producers != nil {
				gone = p.producers.ExpireIdle(now.UnixMilli(), b.cfg.ProducerIdExpirationMs, func(id int64) bool {
					p.txnMu.Lock()
					defer p.txnMu.Unlock()
					return p.txns.IsOpen(id)
				})
			}
			p.appendMu.Unlock()
			if len(gone) > 0 {
				n += len(gone)
				b.log.Info("forgot idle producers", "topic", t.name, "partition", p.index, "producers", len(gone), "expiration_ms", b.cfg.ProducerIdExpirationMs)
			}
		}
	}
	b.stats.expiredProducers.Add(int64(n))
	return n
}

// nextProducerID hands out a producer id, reserving a new block in
// __producer_ids (durably) when the current one is used up.
func (b *Broker) nextProducerID() (int64, error) {
	b.pidMu.Lock()
	defer b.pidMu.Unlock()
	if b.pidNext < b.pidLimit {
		id := b.pidNext
		b.pidNext++
		return id, nil
	}
	p, err := b.internalPartition(producerIDsTopic, nil)
	if err != nil {
		return 0, err
	}
	if b.pidLimit == 0 {
		if b.pidLimit, err = lastProducerBlock(p); err != nil {
			return 0, err
		}
	}
	start, limit := b.pidLimit, b.pidLimit+producerIDBlock
	val := binary.BigEndian.AppendUint64(nil, uint64(limit))
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1},
		[]recordbatch.Record{{Key: []byte("block"), Value: val, Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		return 0, err
	}
	end, err := b.appendOwn(p, batch)
	if err != nil {
		return 0, err
	}
	if err := b.waitOwn(b.ctx, p, end); err != nil {
		return 0, err
	}
	b.pidNext, b.pidLimit = start+1, limit
	return start, nil
}

// lastProducerBlock reads the end of the newest reserved block.
func lastProducerBlock(p *partition) (int64, error) {
	var last int64
	err := scanBatches(p, p.log.StartOffset(), p.hw.Load(), func(h recordbatch.Header, batch []byte) error {
		recs, err := recordbatch.Records(batch, 1<<20)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if len(r.Value) == 8 {
				last = max(last, int64(binary.BigEndian.Uint64(r.Value)))
			}
		}
		return nil
	})
	return last, err
}

// handleInitProducerID serves idempotent (non-transactional) producers.
func (b *Broker) handleInitProducerID(r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id, err := b.nextProducerID()
	if err != nil {
		b.log.Error("allocating a producer id failed", "err", err)
		resp.ErrorCode = coordinatorCode(err)
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
