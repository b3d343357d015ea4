package txn

import (
	"fmt"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes of the transaction APIs (numbers from kerr; each is an
// int16, the type of every ErrorCode field in kmsg).
var (
	ErrInvalidProducerEpoch      = kerr.InvalidProducerEpoch.Code
	ErrInvalidTxnState           = kerr.InvalidTxnState.Code
	ErrInvalidProducerIDMapping  = kerr.InvalidProducerIDMapping.Code
	ErrInvalidTransactionTimeout = kerr.InvalidTransactionTimeout.Code
	ErrConcurrentTransactions    = kerr.ConcurrentTransactions.Code
	ErrProducerFenced            = kerr.ProducerFenced.Code
)

// MaxTimeoutMs is the largest transaction timeout accepted (Kafka's
// transaction.max.timeout.ms default, 15 minutes).
const MaxTimeoutMs = 15 * 60 * 1000

// TP names a partition.
type TP struct {
	Topic     string
	Partition int32
}

// Metadata is one transactional id's state, as stored in
// __transaction_state.
type Metadata struct {
	ID         string
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	State      kmsg.TransactionState
	Partitions map[TP]struct{}
	StartMs    int64
	UpdateMs   int64
	// ClientTransactionVersion is 2 once the producer uses transactions
	// v2 (KIP-890: partitions added by its produce, the epoch bumped by
	// every EndTxn), else 0. Stored as Kafka stores it (a tagged field of
	// the value's version 1), because a decision read back after a
	// restart must say how its markers relate to its data (StrictMarkers).
	ClientTransactionVersion int16
	// NextProducerID is transient coordinator bookkeeping (-2: move to a
	// fresh producer id when completing); it is not persisted.
	NextProducerID int64
}

// Clone returns a deep copy, so a proposed change can be written to the log
// before it replaces the current state.
func (m *Metadata) Clone() *Metadata {
	c := *m
	c.Partitions = make(map[TP]struct{}, len(m.Partitions))
	for tp := range m.Partitions {
		c.Partitions[tp] = struct{}{}
	}
	return &c
}

// SortedPartitions lists the partitions in a stable order.
func (m *Metadata) SortedPartitions() []TP {
	out := make([]TP, 0, len(m.Partitions))
	for tp := range m.Partitions {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// CheckProducer validates a request's producer id and epoch against the
// current ones. newErrors selects PRODUCER_FENCED (newer request versions)
// over INVALID_PRODUCER_EPOCH for a fenced producer.
func (m *Metadata) CheckProducer(pid int64, epoch int16, newErrors bool) int16 {
	switch {
	case pid != m.ProducerID:
		return ErrInvalidProducerIDMapping
	case epoch != m.Epoch:
		if newErrors {
			return ErrProducerFenced
		}
		return ErrInvalidProducerEpoch
	}
	return 0
}

// AddPartitions returns the state after adding tps, or an error code. A
// transaction in the middle of completing answers CONCURRENT_TRANSACTIONS,
// which clients retry.
func (m *Metadata) AddPartitions(tps []TP, nowMs int64) (*Metadata, int16) {
	switch m.State {
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
		return nil, ErrConcurrentTransactions
	case kmsg.TransactionStateDead, kmsg.TransactionStatePrepareEpochFence:
		return nil, ErrInvalidTxnState
	}
	next := m.Clone()
	if m.State != kmsg.TransactionStateOngoing {
		next.Partitions = map[TP]struct{}{}
		next.StartMs = nowMs
	}
	next.State = kmsg.TransactionStateOngoing
	for _, tp := range tps {
		next.Partitions[tp] = struct{}{}
	}
	next.UpdateMs = nowMs
	return next, 0
}

// EndAction is what EndTxn must do.
type EndAction int

// EndTxn outcomes.
const (
	// EndWrite: write the prepare state, the markers and the complete state.
	EndWrite EndAction = iota
	// EndDone: the transaction already ended this way (a retry); answer OK.
	EndDone
	// EndFail: answer the error code.
	EndFail
)

// End decides an EndTxn. For EndWrite, prepared is the Prepare* state to
// write first.
func (m *Metadata) End(commit bool, nowMs int64) (EndAction, *Metadata, int16) {
	switch m.State {
	case kmsg.TransactionStateOngoing:
		next := m.Clone()
		next.State = kmsg.TransactionStatePrepareAbort
		if commit {
			next.State = kmsg.TransactionStatePrepareCommit
		}
		next.UpdateMs = nowMs
		return EndWrite, next, 0
	case kmsg.TransactionStateCompleteCommit:
		if commit {
			return EndDone, nil, 0
		}
	case kmsg.TransactionStateCompleteAbort:
		if !commit {
			return EndDone, nil, 0
		}
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
		return EndFail, nil, ErrConcurrentTransactions
	}
	return EndFail, nil, ErrInvalidTxnState
}

// Complete returns the Complete* state that follows a Prepare* state.
func (m *Metadata) Complete(nowMs int64) *Metadata {
	next := m.Clone()
	if m.State == kmsg.TransactionStatePrepareCommit {
		next.State = kmsg.TransactionStateCompleteCommit
	} else {
		next.State = kmsg.TransactionStateCompleteAbort
	}
	next.Partitions = map[TP]struct{}{}
	next.UpdateMs = nowMs
	return next
}

// StrictMarkers reports whether a Prepare* state's markers carry an epoch
// above that of its transaction's data, so that a partition must refuse
// them once the producer wrote at their epoch there: under transactions
// v2 each EndTxn bumps the epoch and the producer's next transaction
// writes its data at the epoch of the previous one's markers, and a
// marker repeated after that (a coordinator that restarted before its
// Complete* record was durable completes the decision again) would close
// the next transaction with the old decision. Kafka refuses such markers
// the same way. Near the end of the epoch space the producer id changes
// instead and the markers keep the data's epoch; at MaxInt16-2, which a
// bump can reach too, the two cannot be told apart, and the markers are
// taken as unbumped.
func (m *Metadata) StrictMarkers() bool {
	return m.ClientTransactionVersion >= 2 && m.Epoch < math.MaxInt16-2
}

// Committing reports whether a Prepare* state commits.
func (m *Metadata) Committing() bool { return m.State == kmsg.TransactionStatePrepareCommit }

// Preparing reports whether the transaction is between its decision and its
// completion (markers possibly not all written).
func (m *Metadata) Preparing() bool {
	return m.State == kmsg.TransactionStatePrepareCommit || m.State == kmsg.TransactionStatePrepareAbort
}

// Expired reports whether an open transaction outlived its timeout.
func (m *Metadata) Expired(nowMs int64) bool {
	return m.State == kmsg.TransactionStateOngoing && nowMs-m.StartMs > int64(m.TimeoutMs)
}

// Idle reports whether a transactional id has had no transaction and no
// change for expirationMs as of nowMs (Kafka's
// transactional.id.expiration.ms): only an id with nothing in flight
// (Empty, CompleteCommit, CompleteAbort) can be idle.
func (m *Metadata) Idle(nowMs, expirationMs int64) bool {
	switch m.State {
	case kmsg.TransactionStateEmpty, kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort:
		return nowMs-m.UpdateMs >= expirationMs
	}
	return false
}

// EncodeKey and EncodeValue give the __transaction_state record of m in
// Kafka's own format (kmsg's TxnMetadataKey v0 and TxnMetadataValue v0,
// or v1 for a transactions-v2 producer).
func EncodeKey(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: 0, TransactionalID: id}
	return k.AppendTo(nil)
}

// EncodeValue encodes m.
func EncodeValue(m *Metadata) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.Version = 0
	if m.ClientTransactionVersion >= 2 {
		v.Version = 1 // the first to carry the client's version
		v.ClientTransactionVersion = m.ClientTransactionVersion
	}
	v.ProducerID, v.ProducerEpoch, v.TimeoutMillis = m.ProducerID, m.Epoch, m.TimeoutMs
	v.State = m.State
	v.LastUpdateTimestamp, v.StartTimestamp = m.UpdateMs, m.StartMs
	byTopic := map[string][]int32{}
	for _, tp := range m.SortedPartitions() {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	topics := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: t, Partitions: byTopic[t]})
	}
	return v.AppendTo(nil)
}

// Decode reads a __transaction_state record; a nil value is a tombstone
// (returns nil metadata).
func Decode(key, value []byte) (string, *Metadata, error) {
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(key); err != nil {
		return "", nil, fmt.Errorf("txn state key: %w", err)
	}
	if value == nil {
		return k.TransactionalID, nil, nil
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(value); err != nil {
		return "", nil, fmt.Errorf("txn state value of %q: %w", k.TransactionalID, err)
	}
	m := &Metadata{ID: k.TransactionalID, ProducerID: v.ProducerID, Epoch: v.ProducerEpoch, TimeoutMs: v.TimeoutMillis,
		State: v.State, StartMs: v.StartTimestamp, UpdateMs: v.LastUpdateTimestamp, Partitions: map[TP]struct{}{},
		ClientTransactionVersion: v.ClientTransactionVersion}
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			m.Partitions[TP{t.Topic, p}] = struct{}{}
		}
	}
	return k.TransactionalID, m, nil
}

// StateName is the name DescribeTransactions and ListTransactions use.
func StateName(s kmsg.TransactionState) string {
	switch s {
	case kmsg.TransactionStateEmpty:
		return "Empty"
	case kmsg.TransactionStateOngoing:
		return "Ongoing"
	case kmsg.TransactionStatePrepareCommit:
		return "PrepareCommit"
	case kmsg.TransactionStatePrepareAbort:
		return "PrepareAbort"
	case kmsg.TransactionStateCompleteCommit:
		return "CompleteCommit"
	case kmsg.TransactionStateCompleteAbort:
		return "CompleteAbort"
	case kmsg.TransactionStatePrepareEpochFence:
		return "PrepareEpochFence"
	}
	return "Dead"
}
