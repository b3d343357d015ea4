// Package txn owns the rules of Kafka transactions, without I/O: the
// transaction coordinator's per-transactional-id state machine (what
// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn may do in
// each state) and, per partition, which transactions are open (the last
// stable offset) and which were aborted (the index read_committed fetches
// need).
//
// It may not touch sockets, files or clocks: the broker feeds it batch
// headers and times and writes what it decides to the logs.
package txn

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Control record types (the key of a control batch's single record).
const (
	ControlAbort  int16 = 0
	ControlCommit int16 = 1
)

// ControlKey encodes a control record key: version 0 and the marker type.
func ControlKey(typ int16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
}

// ControlValue encodes a control record value: version 0 and the
// coordinator epoch.
func ControlValue(coordinatorEpoch int32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
}

// ParseControlValue returns the coordinator epoch of a control record
// value.
func ParseControlValue(value []byte) (int32, error) {
	if len(value) < 6 {
		return 0, errors.New("txn: control record value shorter than 6 bytes")
	}
	return int32(binary.BigEndian.Uint32(value[2:])), nil
}

// ParseControlKey returns the marker type of a control record key.
func ParseControlKey(key []byte) (int16, error) {
	if len(key) < 4 {
		return 0, errors.New("txn: control record key shorter than 4 bytes")
	}
	return int16(binary.BigEndian.Uint16(key[2:])), nil
}

// Aborted is an aborted transaction's range in one partition.
type Aborted struct {
	ProducerID  int64
	FirstOffset int64
	// LastOffset is the offset of the abort marker.
	LastOffset int64
}

// Marker is the last control batch a producer wrote to a partition.
type Marker struct {
	Epoch  int16
	Commit bool
	Offset int64
	// CoordinatorEpoch is the leader epoch of the coordinator's
	// partition of the transaction state topic when it wrote the marker
	// (Kafka's EndTxnMarker field).
	CoordinatorEpoch int32 `json:",omitempty"`
}

// Partition tracks a partition's open and aborted transactions, and each
// producer's last marker: a coordinator that restarts after writing a
// decision's markers but before its own record of the decision became
// durable finds the decision there (see the broker's transaction
// coordinator).
type Partition struct {
	open    map[int64]int64  // producer id -> first offset of its open transaction
	aborted []Aborted        // by LastOffset
	markers map[int64]Marker // producer id -> its last marker here
}

// NewPartition returns empty state.
func NewPartition() *Partition {
	return &Partition{open: map[int64]int64{}, markers: map[int64]Marker{}}
}

// OnData notes a transactional data batch appended at [base, last].
func (p *Partition) OnData(producerID int64, base int64) {
	if _, ok := p.open[producerID]; !ok {
		p.open[producerID] = base
	}
}

// OnMarker notes a control batch at offset for producerID, written at
// epoch by a coordinator at coordinatorEpoch. A marker for a producer with
// no open transaction here closes nothing (markers are written to every
// partition of a transaction, and a retry may repeat one), but it is
// still remembered as the producer's last.
func (p *Partition) OnMarker(producerID int64, epoch int16, typ int16, coordinatorEpoch int32, offset int64) {
	p.markers[producerID] = Marker{Epoch: epoch, Commit: typ == ControlCommit, Offset: offset, CoordinatorEpoch: coordinatorEpoch}
	first, ok := p.open[producerID]
	if !ok {
		return
	}
	delete(p.open, producerID)
	if typ == ControlAbort {
		p.aborted = append(p.aborted, Aborted{ProducerID: producerID, FirstOffset: first, LastOffset: offset})
	}
}

// FencedMarker reports whether a marker for producerID from a coordinator
// at coordinatorEpoch must be refused: a coordinator of a later epoch
// already wrote one here. The earlier coordinator is a zombie (its group
// failed over, or the state partition moved away) whose retries of an old
// decision could otherwise close the producer's next transaction, which
// has the same producer epoch under the older transaction protocol.
func (p *Partition) FencedMarker(producerID int64, coordinatorEpoch int32) bool {
	m, ok := p.markers[producerID]
	return ok && m.CoordinatorEpoch > coordinatorEpoch
}

// LastMarker returns producerID's last marker here.
func (p *Partition) LastMarker(producerID int64) (Marker, bool) {
	m, ok := p.markers[producerID]
	return m, ok
}

// IsOpen reports whether producerID has an open transaction here.
func (p *Partition) IsOpen(producerID int64) bool {
	_, ok := p.open[producerID]
	return ok
}

// LSO is the last stable offset: the first offset of the oldest open
// transaction, or hw when none is open below it.
func (p *Partition) LSO(hw int64) int64 {
	lso := hw
	for _, first := range p.open {
		lso = min(lso, first)
	}
	return lso
}

// AbortedIn lists the aborted transactions a read_committed fetch of
// [from, to) must be told about: those whose range overlaps it.
func (p *Partition) AbortedIn(from, to int64) []Aborted {
	i := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].LastOffset >= from })
	var out []Aborted
	for ; i < len(p.aborted); i++ {
		if a := p.aborted[i]; a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// TrimBelow drops aborted ranges wholly below the log start offset.
func (p *Partition) TrimBelow(start int64) {
	n := 0
	for _, a := range p.aborted {
		if a.LastOffset >= start {
			p.aborted[n] = a
			n++
		}
	}
	p.aborted = p.aborted[:n]
}

// Empty reports whether there is nothing to remember.
func (p *Partition) Empty() bool {
	return len(p.open) == 0 && len(p.aborted) == 0 && len(p.markers) == 0
}

// OpenTransactions lists open transactions (producer id -> first offset),
// for DescribeProducers.
func (p *Partition) OpenTransactions() map[int64]int64 {
	out := make(map[int64]int64, len(p.open))
	for k, v := range p.open {
		out[k] = v
	}
	return out
}

type partitionSnapshot struct {
	Open    map[int64]int64
	Aborted []Aborted
	// Markers is required: a snapshot without it predates marker
	// tracking and cannot stand in for a scan of the log.
	Markers map[int64]Marker
}

// Snapshot serialises the state.
func (p *Partition) Snapshot() []byte {
	b, _ := json.Marshal(partitionSnapshot{Open: p.open, Aborted: p.aborted, Markers: p.markers})
	return b
}

// LoadPartition restores a snapshot.
func LoadPartition(data []byte) (*Partition, error) {
	var s partitionSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("txn partition snapshot: %w", err)
	}
	if s.Markers == nil {
		return nil, errors.New("txn partition snapshot: no producer markers (written by an older version)")
	}
	p := NewPartition()
	for k, v := range s.Markers {
		p.markers[k] = v
	}
	for k, v := range s.Open {
		p.open[k] = v
	}
	p.aborted = s.Aborted
	sort.Slice(p.aborted, func(i, j int) bool { return p.aborted[i].LastOffset < p.aborted[j].LastOffset })
	return p, nil
}
