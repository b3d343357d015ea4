package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
)

// fetchTarget is a resolved partition of a fetch request.
type fetchTarget struct {
	p   *partition.Partition
	req *kmsg.FetchRequestTopicPartition
	out *kmsg.FetchResponseTopicPartition
}

func (b *Broker) handleFetch(r *kmsg.FetchRequest) (kmsg.Response, func(context.Context) kmsg.Response) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	if r.SessionID != 0 || r.SessionEpoch > 0 {
		// We never hand out sessions (SessionID 0 in every answer), so
		// a client naming one is confused; this makes it start over.
		resp.ErrorCode = errFetchSessionIDNotFound
		return resp, nil
	}
	var targets []fetchTarget
	var hints leaderHints
	resp.Topics = make([]kmsg.FetchResponseTopic, len(r.Topics))
	for ti := range r.Topics {
		rt := &r.Topics[ti]
		var t *topic
		if r.Version >= 13 {
			b.mu.RLock()
			t = b.byID[rt.TopicID]
			b.mu.RUnlock()
		} else {
			t = b.lookup(rt.Topic)
		}
		var name string // for the ownership check, cluster mode only
		if b.cl != nil {
			name = b.fetchTopicName(r, rt)
			if t != nil && b.cl.local(t.name) == nil {
				t = nil // not (or no longer) the metadata's topic
			}
		}
		out := &resp.Topics[ti]
		out.Topic, out.TopicID = rt.Topic, rt.TopicID
		out.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			op := &out.Partitions[pi]
			op.Default() // tagged fields (diverging epoch, current leader) say "none", not zero
			op.Partition = rp.Partition
			op.HighWatermark, op.LastStableOffset, op.LogStartOffset = -1, -1, -1
			op.PreferredReadReplica = -1
			// Never null: librdkafka rejects a MessageSetSize of -1.
			op.RecordBatches = []byte{}
			h, foreign := b.foreignPartition(name, rp.Partition)
			switch {
			case foreign:
				// Another group owns it: name its leader (KIP-951).
				op.ErrorCode = errNotLeaderOrFollower
				op.CurrentLeader.LeaderID, op.CurrentLeader.LeaderEpoch = h.leader, h.epoch
				hints.add(h.leader)
			case t == nil && r.Version >= 13:
				op.ErrorCode = errUnknownTopicID
			case t == nil || rp.Partition < 0 || int(rp.Partition) >= len(t.partitions):
				op.ErrorCode = errUnknownTopicOrPartition
			default:
				p := t.partitions[rp.Partition]
				if op.ErrorCode = b.checkLeaderEpoch(p, rp.CurrentLeaderEpoch); op.ErrorCode == 0 {
					targets = append(targets, fetchTarget{p: p, req: rp, out: op})
				}
			}
		}
	}
	resp.Brokers = hints.fetchBrokers(b, r.Version)
	maxBytes := int(r.MaxBytes)
	if r.Version < 3 || maxBytes <= 0 {
		maxBytes = 50 << 20
	}
	committedOnly := r.IsolationLevel == 1
	if n := b.collect(targets, maxBytes, committedOnly); n >= int(r.MinBytes) || r.MaxWaitMillis <= 0 || len(targets) == 0 || anyError(targets) {
		b.stats.fetched(n, targets)
		return resp, nil
	}
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	return nil, func(ctx context.Context) kmsg.Response {
		n := b.longPoll(ctx, targets, maxBytes, int(r.MinBytes), wait, committedOnly)
		b.stats.fetched(n, targets)
		return resp
	}
}

// outOfRange answers a fetch offset outside p's log: OFFSET_OUT_OF_RANGE,
// unless another group owns p now. A move's last step empties the old
// owner's copy, and a long poll that began before the cut-over would
// otherwise be told that the offset it waits at is gone, which
// librdkafka's consumers take as a reason to skip to the end. The copy is
// emptied only after this broker's metadata names the new owner, so a
// read that saw it emptied sees the new owner here too.
func (b *Broker) outOfRange(p *partition.Partition, out *kmsg.FetchResponseTopicPartition) int16 {
	if h, foreign := b.foreignPartition(p.Topic, p.Index); foreign {
		out.CurrentLeader.LeaderID, out.CurrentLeader.LeaderEpoch = h.leader, h.epoch
		return errNotLeaderOrFollower
	}
	return errOffsetOutOfRange
}

func anyError(ts []fetchTarget) bool {
	for _, t := range ts {
		if t.out.ErrorCode != 0 {
			return true
		}
	}
	return false
}

// longPoll re-collects whenever a partition's high watermark moves, until
// MinBytes are there or the wait expires. An expired wait still answers,
// with whatever there is (possibly nothing).
func (b *Broker) longPoll(ctx context.Context, targets []fetchTarget, maxBytes, minBytes int, wait time.Duration, committedOnly bool) int {
	parts := make([]*partition.Partition, len(targets))
	for i, t := range targets {
		parts[i] = t.p
	}
	n := 0
	partition.WaitUntil(ctx, parts, wait, func() bool {
		n = b.collect(targets, maxBytes, committedOnly)
		return n >= minBytes || anyError(targets)
	})
	return n
}

// collect reads every target below its high watermark (read_committed:
// below its last stable offset) into its response, sharing maxBytes across
// partitions in request order, and returns the bytes gathered.
func (b *Broker) collect(targets []fetchTarget, maxBytes int, committedOnly bool) int {
	// Answers in flight share one budget: when it is spent, a fetch
	// gets its first batch only, so memory stays bounded however many
	// consumers ask at once.
	maxBytes = b.mem.fetchRoom(maxBytes)
	total := 0
	for _, t := range targets {
		p, out := t.p, t.out
		hw := p.HighWatermark()
		lso := p.LSO(hw)
		out.HighWatermark = hw
		out.LastStableOffset = lso
		out.AbortedTransactions = nil
		limit := hw
		if committedOnly {
			limit = lso
		}
		out.LogStartOffset = p.Log().StartOffset()
		// A long poll collects again: what the last round read is
		// replaced, so its buffer goes back.
		b.mem.frames.Put(out.RecordBatches)
		out.RecordBatches = []byte{}
		if p.Deleted() {
			out.ErrorCode = errUnknownTopicOrPartition
			continue
		}
		off := t.req.FetchOffset
		if off < out.LogStartOffset || off > p.Log().EndOffset() {
			out.ErrorCode = b.outOfRange(p, out)
			continue
		}
		remaining := maxBytes - total
		if remaining <= 0 || off >= limit {
			continue
		}
		max := int(t.req.PartitionMaxBytes)
		if max <= 0 || max > remaining {
			max = remaining
		}
		var lent []byte
		data, err := p.Log().ReadAlloc(b.mem.readInto(&lent), off, max, limit)
		// A batch larger than what is left goes only to the first
		// partition with data (KIP-74); later ones wait for the next
		// fetch.
		keep := err == nil && len(data) > 0 && (total == 0 || len(data) <= remaining)
		if !keep {
			b.mem.frames.Put(lent)
		}
		if errors.Is(err, storage.ErrOffsetOutOfRange) {
			out.ErrorCode = b.outOfRange(p, out)
			continue
		}
		if err != nil {
			// A consumer retries at once; one line per partition per
			// interval says enough.
			if b.readFailures.due(p.Topic, p.Index) {
				b.log.Error("read failed; fetches of this partition answer KAFKA_STORAGE_ERROR while it fails, the broker serves the rest",
					"topic", p.Topic, "partition", p.Index, "offset", off, "err", err, "hint", "check the disk (dmesg, SMART)")
			}
			out.ErrorCode = errKafkaStorageError
			continue
		}
		if !keep {
			continue
		}
		out.RecordBatches = data
		total += len(data)
		if committedOnly && len(data) > 0 {
			out.AbortedTransactions = abortedIn(p, off, lastOffsetIn(data)+1)
		}
	}
	return total
}

// lastOffsetIn is the last offset covered by a run of whole batches.
func lastOffsetIn(data []byte) int64 {
	last := int64(-1)
	for len(data) >= recordbatch.HeaderSize {
		h, err := recordbatch.ParseHeader(data)
		if err != nil || h.Size() > len(data) {
			break
		}
		last = h.LastOffset()
		data = data[h.Size():]
	}
	return last
}

// abortedIn lists aborted transactions overlapping [from, to) of p for a
// read_committed answer.
func abortedIn(p *partition.Partition, from, to int64) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	var out []kmsg.FetchResponseTopicPartitionAbortedTransaction
	for _, a := range p.AbortedIn(from, to) {
		out = append(out, kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return out
}
