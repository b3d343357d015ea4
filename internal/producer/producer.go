// Package producer owns the per-partition state of idempotent producers:
// for each producer id its epoch, the sequence ranges of its last five
// batches and when it last wrote, and the rules that turn a new batch into
// "append", "duplicate of an earlier append" or an error (Kafka's KIP-98
// semantics), and that forget producers idle for longer than
// producer.id.expiration.ms.
//
// It is a pure state machine: no I/O, no clocks (the caller passes times
// in), no locks. The caller
// serialises Check and Record with the partition's appends, rebuilds state
// by calling Record for every stored batch (or loads a Snapshot), and
// persists snapshots where it likes.
package producer

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Kafka error codes the state machine answers with (numbers from kerr).
var (
	ErrOutOfOrderSequence   = kerr.OutOfOrderSequenceNumber.Code
	ErrInvalidProducerEpoch = kerr.InvalidProducerEpoch.Code
)

// keep is how many recent batches per producer are remembered, as in Kafka:
// a client has at most five requests in flight, so a retry always names one
// of them.
const keep = 5

// BatchInfo is what the state machine needs of a batch header.
type BatchInfo struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Count is the number of records (lastOffsetDelta + 1).
	Count int32
	// AppendMs is when the batch was appended, in Unix milliseconds, by
	// the broker's clock (a batch found while rebuilding from the log
	// counts as appended at the rebuild); expiry is measured from it.
	AppendMs int64
}

// LastSequence is the sequence of the batch's last record; sequences wrap
// at 2^31 as in Kafka.
func (b BatchInfo) LastSequence() int32 {
	return int32((int64(b.BaseSequence) + int64(b.Count) - 1) % (1 << 31))
}

// entry is one appended batch of a producer.
type entry struct {
	FirstSeq, LastSeq int32
	BaseOffset        int64
}

// producer is one producer id's state in a partition.
type producer struct {
	Epoch   int16
	Batches []entry // oldest first, at most keep
	LastMs  int64   // latest AppendMs of its batches and markers
}

// State is the idempotence state of one partition.
type State struct {
	producers map[int64]*producer
}

// New returns empty state.
func New() *State { return &State{producers: map[int64]*producer{}} }

// Verdict is Check's answer for a batch.
type Verdict struct {
	// Code is 0 for a batch to append, or a Kafka error code.
	Code int16
	// Duplicate is set when the batch was already appended; BaseOffset is
	// where, and the producer must be told success with that offset.
	Duplicate  bool
	BaseOffset int64
}

// Check decides what to do with a batch from an idempotent producer. It
// does not change the state; call Record after appending.
func (s *State) Check(b BatchInfo) Verdict {
	p := s.producers[b.ProducerID]
	if p == nil {
		// A producer we have no state for (its batches were removed by
		// retention or truncation, or it was idle past
		// producer.id.expiration.ms) is accepted at any sequence, as
		// Kafka does since 2.5 (KIP-360): UNKNOWN_PRODUCER_ID is
		// retried forever by the Java client, fatal or abortable for
		// others, and a duplicate of a batch we no longer know cannot
		// be detected either way.
		return Verdict{}
	}
	switch {
	case b.ProducerEpoch < p.Epoch:
		return Verdict{Code: ErrInvalidProducerEpoch}
	case b.ProducerEpoch > p.Epoch:
		// A bumped epoch restarts the sequence.
		if b.BaseSequence != 0 {
			return Verdict{Code: ErrOutOfOrderSequence}
		}
		return Verdict{}
	}
	last := b.LastSequence()
	for _, e := range p.Batches {
		if e.FirstSeq == b.BaseSequence && e.LastSeq == last {
			return Verdict{Duplicate: true, BaseOffset: e.BaseOffset}
		}
	}
	if len(p.Batches) == 0 {
		return Verdict{}
	}
	next := int32((int64(p.Batches[len(p.Batches)-1].LastSeq) + 1) % (1 << 31))
	if b.BaseSequence != next {
		return Verdict{Code: ErrOutOfOrderSequence}
	}
	return Verdict{}
}

// Record notes an appended batch at baseOffset. It is also how state is
// rebuilt from the log: Record every stored idempotent batch in order.
func (s *State) Record(b BatchInfo, baseOffset int64) {
	if b.ProducerID < 0 {
		return
	}
	p := s.producers[b.ProducerID]
	if p == nil {
		p = &producer{Epoch: b.ProducerEpoch}
		s.producers[b.ProducerID] = p
	}
	if b.ProducerEpoch > p.Epoch {
		p.Epoch = b.ProducerEpoch
		p.Batches = p.Batches[:0]
	}
	p.LastMs = max(p.LastMs, b.AppendMs)
	p.Batches = append(p.Batches, entry{FirstSeq: b.BaseSequence, LastSeq: b.LastSequence(), BaseOffset: baseOffset})
	if len(p.Batches) > keep {
		p.Batches = append(p.Batches[:0], p.Batches[len(p.Batches)-keep:]...)
	}
}

// ObserveEpoch notes that a transaction marker was written for producerID
// at epoch. A marker with a newer epoch (a fencing abort, or a transactions
// v2 commit) raises the stored epoch, so a delayed batch from the older
// epoch is refused with INVALID_PRODUCER_EPOCH instead of landing after the
// marker, as Kafka does. nowMs is when the marker was appended.
func (s *State) ObserveEpoch(producerID int64, epoch int16, nowMs int64) {
	p := s.producers[producerID]
	if p == nil {
		s.producers[producerID] = &producer{Epoch: epoch, LastMs: nowMs}
		return
	}
	p.LastMs = max(p.LastMs, nowMs)
	if epoch > p.Epoch {
		p.Epoch = epoch
		p.Batches = p.Batches[:0]
	}
}

// Each calls fn for every producer with its epoch, last sequence, the
// base offset of its last batch and the time of its last write (for
// DescribeProducers).
func (s *State) Each(fn func(id int64, epoch int16, lastSeq int32, lastOffset, lastMs int64)) {
	ids := make([]int64, 0, len(s.producers))
	for id := range s.producers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		p := s.producers[id]
		lastSeq, lastOff := int32(-1), int64(-1)
		if n := len(p.Batches); n > 0 {
			lastSeq, lastOff = p.Batches[n-1].LastSeq, p.Batches[n-1].BaseOffset
		}
		fn(id, p.Epoch, lastSeq, lastOff, p.LastMs)
	}
}

// EpochOf returns the epoch stored for a producer.
func (s *State) EpochOf(producerID int64) (int16, bool) {
	p := s.producers[producerID]
	if p == nil {
		return 0, false
	}
	return p.Epoch, true
}

// ExpireIdle forgets every producer that has written nothing (no batch, no
// marker) for maxIdleMs as of nowMs, except those busy reports (the
// caller's test for an open transaction, which must keep its producer: its
// epoch fences zombies until the transaction ends). It returns the ids
// forgotten, sorted. A forgotten producer that writes again is accepted at
// whatever sequence it is at, as in Kafka after producer.id.expiration.ms;
// a retry of a batch it wrote before it was forgotten can then no longer
// be recognised as a duplicate.
func (s *State) ExpireIdle(nowMs, maxIdleMs int64, busy func(id int64) bool) []int64 {
	var out []int64
	for id, p := range s.producers {
		if nowMs-p.LastMs >= maxIdleMs && (busy == nil || !busy(id)) {
			out = append(out, id)
		}
	}
	for _, id := range out {
		delete(s.producers, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Len is the number of producers tracked.
func (s *State) Len() int { return len(s.producers) }

// snapshot is the JSON form of State, with the log offset it covers.
type snapshot struct {
	Offset    int64
	Producers []snapshotProducer
}

type snapshotProducer struct {
	ID      int64
	Epoch   int16
	Batches []entry
	LastMs  int64 `json:",omitempty"`
}

// Snapshot serialises the state as of log offset end (the next offset to
// scan from when it is loaded).
func (s *State) Snapshot(end int64) []byte {
	snap := snapshot{Offset: end}
	for id, p := range s.producers {
		snap.Producers = append(snap.Producers, snapshotProducer{ID: id, Epoch: p.Epoch, Batches: p.Batches, LastMs: p.LastMs})
	}
	sort.Slice(snap.Producers, func(i, j int) bool { return snap.Producers[i].ID < snap.Producers[j].ID })
	b, _ := json.Marshal(snap)
	return b
}

// Load restores a snapshot and returns the offset it covers. A producer
// without a last-write time (a snapshot from before expiry existed) counts
// as having written at nowMs.
func Load(data []byte, nowMs int64) (*State, int64, error) {
	var snap snapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return nil, 0, fmt.Errorf("producer snapshot: %w", err)
	}
	s := New()
	for _, p := range snap.Producers {
		if len(p.Batches) > keep {
			return nil, 0, fmt.Errorf("producer snapshot: %d batches for producer %d", len(p.Batches), p.ID)
		}
		last := p.LastMs
		if last == 0 {
			last = nowMs
		}
		s.producers[p.ID] = &producer{Epoch: p.Epoch, Batches: p.Batches, LastMs: last}
	}
	return s, snap.Offset, nil
}
