package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/producer"
	"github.com/moonmq/moonmq/internal/recordbatch"
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

func batchInfo(h recordbatch.Header) producer.BatchInfo {
	return producer.BatchInfo{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		BaseSequence: h.BaseSequence, Count: h.LastOffsetDelta + 1}
}

// scanBatches calls fn for every batch header in [from, to).
func scanBatches(p *partition, from, to int64, fn func(h recordbatch.Header)) error {
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
			fn(h)
			off = h.LastOffset() + 1
			data = data[h.Size():]
		}
	}
	return nil
}

// loadProducerState rebuilds a partition's idempotence state from its
// snapshot (if it still matches the log) and the batches after it.
func (b *Broker) loadProducerState(p *partition) error {
	path := filepath.Join(p.log.Dir(), producerSnapshotFile)
	state, from := producer.New(), p.log.StartOffset()
	if data, err := vfs.ReadFile(b.fs, path); err == nil {
		if s, off, err := producer.Load(data); err == nil && off <= p.log.EndOffset() && off >= from {
			state, from = s, off
		} else {
			b.log.Warn("ignoring producer snapshot; rescanning the log", "topic", p.topic, "partition", p.index, "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// A snapshot is only valid for the log it was taken of: remove it now
	// so a crash later cannot pair it with a truncated log.
	_ = b.fs.Remove(path)
	err := scanBatches(p, from, p.log.EndOffset(), func(h recordbatch.Header) {
		if h.ProducerID >= 0 {
			state.Record(batchInfo(h), h.BaseOffset)
		}
	})
	p.producers = state
	return err
}

// saveProducerState writes the snapshot at shutdown.
func (b *Broker) saveProducerState(p *partition) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if p.producers == nil || p.producers.Len() == 0 {
		return
	}
	path := filepath.Join(p.log.Dir(), producerSnapshotFile)
	if err := vfs.WriteFileAtomic(b.fs, path, p.producers.Snapshot(p.log.EndOffset())); err != nil {
		b.log.Warn("could not write producer snapshot; the next start rescans the log", "topic", p.topic, "partition", p.index, "err", err)
	}
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
	p.appendMu.Lock()
	base, err := p.log.Append(batch, b.epoch)
	p.appendMu.Unlock()
	if err != nil {
		return 0, err
	}
	b.flush.markDirty(p)
	if !b.waitHW(b.ctx, p, base+1, 10*time.Second) {
		return 0, errCommitTimeout
	}
	b.pidNext, b.pidLimit = start+1, limit
	return start, nil
}

// lastProducerBlock reads the end of the newest reserved block.
func lastProducerBlock(p *partition) (int64, error) {
	var last int64
	var perr error
	for off := p.log.StartOffset(); off < p.hw.Load(); {
		data, err := p.log.Read(off, 4<<20, p.hw.Load())
		if err != nil || len(data) == 0 {
			perr = err
			break
		}
		batches, err := recordbatch.Split(data)
		if err != nil {
			return 0, err
		}
		for _, batch := range batches {
			h, _ := recordbatch.ParseHeader(batch)
			off = h.LastOffset() + 1
			recs, err := recordbatch.Records(batch, 1<<20)
			if err != nil {
				return 0, err
			}
			for _, r := range recs {
				if len(r.Value) == 8 {
					last = max(last, int64(binary.BigEndian.Uint64(r.Value)))
				}
			}
		}
	}
	return last, perr
}

func (b *Broker) handleInitProducerID(r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		// Transactions need the transaction coordinator (not built
		// yet). A retriable code would make clients spin; this one
		// fails the transactional producer at once.
		b.log.Warn("refused a transactional producer: transactions are not supported yet", "transactional_id", *r.TransactionalID)
		resp.ErrorCode = errInvalidRequest
		return resp
	}
	id, err := b.nextProducerID()
	if err != nil {
		b.log.Error("allocating a producer id failed", "err", err)
		resp.ErrorCode = errKafkaStorageError
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
