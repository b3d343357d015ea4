package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moonmq/moonmq/internal/producer"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/vfs"
)

// snapshotFile holds a partition's idempotence state at a clean shutdown,
// so start-up scans only what was appended after it.
const snapshotFile = "producer-snapshot.json"

// snapshot is what snapshotFile holds: the idempotence and transaction
// state of a partition as of Offset.
type snapshot struct {
	Offset    int64
	Producers json.RawMessage
	Txns      json.RawMessage
}

// batchInfo is what the producer state needs of a batch appended at nowMs.
func batchInfo(h recordbatch.Header, nowMs int64) producer.BatchInfo {
	return producer.BatchInfo{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		BaseSequence: h.BaseSequence, Count: h.LastOffsetDelta + 1, AppendMs: nowMs}
}

// apply updates the producer and transaction state for a stored batch. It
// is used both when rebuilding from the log and after every append, so the
// two can never disagree. nowMs is the append's time (the rebuild's, for a
// batch found in the log), from which an idle producer's expiry is
// measured. The caller holds the append lock (or owns p alone).
func (p *Partition) apply(h recordbatch.Header, batch []byte, nowMs int64) error {
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
		// A value too short for the epoch (no writer of ours makes
		// one) counts as epoch 0, the lowest: it fences nothing.
		coordEpoch, _ := txn.ParseControlValue(recs[0].Value)
		p.txnMu.Lock()
		p.txns.OnMarker(h.ProducerID, h.ProducerEpoch, typ, coordEpoch, h.BaseOffset)
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

// Scan calls fn for every stored batch in [from, to).
func (p *Partition) Scan(from, to int64, fn func(h recordbatch.Header, batch []byte) error) error {
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

// loadState rebuilds the idempotence and transaction state from the
// snapshot (if it still matches the log) and the batches after it.
func (p *Partition) loadState() error {
	path := filepath.Join(p.log.Dir(), snapshotFile)
	p.producers, p.txns = producer.New(), txn.NewPartition()
	from := p.log.StartOffset()
	now := p.clock.Now().UnixMilli()
	if data, err := vfs.ReadFile(p.fs, path); err == nil {
		var snap snapshot
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
			p.logger.Warn("ignoring producer snapshot; rescanning the log", "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// A snapshot is only valid for the log it was taken of: remove it now
	// so a crash later cannot pair it with a truncated log.
	_ = p.fs.Remove(path)
	return p.Scan(from, p.log.EndOffset(), func(h recordbatch.Header, batch []byte) error {
		return p.apply(h, batch, now)
	})
}

// rebuildState rebuilds the producer and transaction state from the whole
// log (after a truncation). The caller holds the append lock.
func (p *Partition) rebuildState() error {
	ps, ts := producer.New(), txn.NewPartition()
	p.txnMu.Lock()
	p.producers, p.txns = ps, ts
	p.txnMu.Unlock()
	now := p.clock.Now().UnixMilli()
	return p.Scan(p.log.StartOffset(), p.log.EndOffset(), func(h recordbatch.Header, batch []byte) error {
		return p.apply(h, batch, now)
	})
}

// SaveState writes the snapshot, at shutdown.
func (p *Partition) SaveState() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producers == nil || p.producers.Len() == 0 && p.txns.Empty() {
		return
	}
	end := p.log.EndOffset()
	p.txnMu.Lock()
	snap := snapshot{Offset: end, Producers: p.producers.Snapshot(end), Txns: p.txns.Snapshot()}
	p.txnMu.Unlock()
	data, _ := json.Marshal(snap)
	path := filepath.Join(p.log.Dir(), snapshotFile)
	if err := vfs.WriteFileAtomic(p.fs, path, data); err != nil {
		p.logger.Warn("could not write producer snapshot; the next start rescans the log", "err", err)
	}
}

// ExpireProducers forgets the idempotent producers that have written
// nothing for maxIdleMs as of nowMs and have no open transaction here, and
// returns their ids.
func (p *Partition) ExpireProducers(nowMs, maxIdleMs int64) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producers == nil {
		return nil
	}
	return p.producers.ExpireIdle(nowMs, maxIdleMs, func(id int64) bool {
		p.txnMu.Lock()
		defer p.txnMu.Unlock()
		return p.txns.IsOpen(id)
	})
}

// ProducerEpoch is the latest epoch the partition saw of a producer.
func (p *Partition) ProducerEpoch(producerID int64) (int16, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.producers.EpochOf(producerID)
}

// ProducerInfo is what the partition remembers of an idempotent producer.
type ProducerInfo struct {
	ID                 int64
	Epoch              int16
	LastSequence       int32
	LastOffset, LastMs int64
}

// Producers returns the idempotent producers the partition remembers and
// its open transactions (producer id to first offset), taken at one moment.
func (p *Partition) Producers() ([]ProducerInfo, map[int64]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	var out []ProducerInfo
	p.producers.Each(func(id int64, epoch int16, lastSeq int32, lastOffset, lastMs int64) {
		out = append(out, ProducerInfo{ID: id, Epoch: epoch, LastSequence: lastSeq, LastOffset: lastOffset, LastMs: lastMs})
	})
	return out, p.txns.OpenTransactions()
}

// LSO is the last stable offset given the high watermark hw.
func (p *Partition) LSO(hw int64) int64 {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	return p.txns.LSO(hw)
}

// TrimAborted forgets aborted transactions wholly below the log start, so
// the index (and its snapshot) does not grow forever.
func (p *Partition) TrimAborted() {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	p.txns.TrimBelow(p.log.StartOffset())
}

// AbortedIn lists aborted transactions overlapping [from, to).
func (p *Partition) AbortedIn(from, to int64) []txn.Aborted {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	return p.txns.AbortedIn(from, to)
}

// OpenTransactions maps each producer with an open transaction here to
// the transaction's first offset.
func (p *Partition) OpenTransactions() map[int64]int64 {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	return p.txns.OpenTransactions()
}

// LastMarker is the latest transaction marker of a producer here.
func (p *Partition) LastMarker(producerID int64) (txn.Marker, bool) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	return p.txns.LastMarker(producerID)
}
