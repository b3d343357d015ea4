package broker

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// producerIDsTopic holds producer-id block reservations. Like committed
// offsets, this state lives in an internal topic so that it survives
// restarts (and, with replication, a change of leader) without ever handing
// out an id twice.
const producerIDsTopic = "__producer_ids"

// producerIDBlock is how many ids one reservation covers.
const producerIDBlock = 1000

// ExpireProducers forgets, in every partition, the idempotent producers
// that have written nothing there for ProducerIdExpirationMs as of now and
// have no open transaction there (Kafka's producer.id.expiration.ms), and
// returns how many it forgot. Every replica runs it on its own state;
// nothing is written.
func (b *Broker) ExpireProducers(now time.Time) int {
	n := 0
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			gone := p.ExpireProducers(now.UnixMilli(), b.cfg.ProducerIdExpirationMs)
			if len(gone) > 0 {
				n += len(gone)
				b.log.Info("forgot idle producers", "topic", t.name, "partition", p.Index, "producers", len(gone), "expiration_ms", b.cfg.ProducerIdExpirationMs)
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
	if b.cl != nil {
		// Unique across the cluster: the metadata log hands out blocks.
		start, limit, err := b.cl.takeProducerIDs(b.ctx)
		if err != nil {
			return 0, err
		}
		b.pidNext, b.pidLimit = start+1, limit
		return start, nil
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
		[]recordbatch.Record{{Key: []byte("block"), Value: val, Timestamp: b.clock.Now().UnixMilli()}})
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
func lastProducerBlock(p *partition.Partition) (int64, error) {
	var last int64
	err := p.Scan(p.Log().StartOffset(), p.HighWatermark(), func(h recordbatch.Header, batch []byte) error {
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

// resetProducerIDs drops the id block this replica took in an earlier
// term: a new leader takes a fresh block from __producer_ids on the next
// InitProducerId, past every block any leader took.
func (b *Broker) resetProducerIDs(context.Context) error {
	b.pidMu.Lock()
	b.pidNext, b.pidLimit = 0, 0
	b.pidMu.Unlock()
	return nil
}
