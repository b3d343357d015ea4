// Package checker owns the offline verification of operation histories
// recorded against a replicated, Kafka-like log: given what producers sent,
// what consumers polled, what every replica held at the end and what
// consumer groups committed, it reports the anomaly classes listed in the
// reliability notes (inconsistent offsets, duplicates, lost and unseen
// writes, aborted reads, poll skips, ordering violations, truncated reads,
// reads past the high watermark, replica divergence, under-replicated acks,
// and committed group offsets going backwards).
//
// The package is pure: it performs no I/O, reads no clocks and starts no
// goroutines. Times in a history are opaque logical integers (an operation
// index or nanoseconds); only their order matters. Work is linear in the
// size of the history apart from a few sorts, so histories of about a
// million operations check in seconds.
package checker

// Outcome is what a client learned about an operation it issued.
type Outcome int

const (
	// Unknown means the client never learned whether the operation took
	// effect (a timeout, a dropped connection). It is never a failure.
	Unknown Outcome = iota
	// Acked means the operation definitely took effect.
	Acked
	// Failed means the operation definitely did not take effect.
	Failed
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	default:
		return "unknown"
	}
}

// TxnOutcome is the known fate of the transaction a send belonged to.
type TxnOutcome int

const (
	// TxnUnknown means the commit or abort was never confirmed.
	TxnUnknown TxnOutcome = iota
	// TxnCommitted means the transaction committed.
	TxnCommitted
	// TxnAborted means the transaction aborted.
	TxnAborted
)

// String names the transaction outcome.
func (o TxnOutcome) String() string {
	switch o {
	case TxnCommitted:
		return "committed"
	case TxnAborted:
		return "aborted"
	default:
		return "unknown"
	}
}

// Send is one produce of one record.
type Send struct {
	// Producer identifies the producing client.
	Producer string
	// Seq orders the sends of one producer: a later send has a larger Seq.
	Seq int
	// Topic and Partition name where the record was sent.
	Topic     string
	Partition int32
	// Value is the record's payload; it must be unique in the history.
	Value string
	// Start and End bound the operation in logical time (Start <= End).
	Start, End int64
	// Outcome is what the producer learned.
	Outcome Outcome
	// Offset is the offset the broker assigned; meaningful only if Acked.
	Offset int64
	// Txn is the transaction id, empty for a non-transactional send.
	Txn string
	// TxnOutcome is the transaction's fate; ignored when Txn is empty.
	TxnOutcome TxnOutcome
}

// Record is one (offset, value) pair of a partition's log.
type Record struct {
	Offset int64
	Value  string
	// Control marks a transaction marker in a replica dump; its Value is
	// ignored. Polls never return control records.
	Control bool
}

// Mode is how a consumer was attached to its partitions.
type Mode int

const (
	// Assign means the consumer was assigned partitions directly and read
	// each sequentially, so consecutive polls must continue where the
	// previous one stopped.
	Assign Mode = iota
	// Group means the consumer was a group member; partitions may move
	// between members, so only order within one poll is checked.
	Group
)

// Poll is one fetch response for one partition.
type Poll struct {
	// Consumer identifies the consuming client. A harness that seeks or
	// re-assigns should start a new Consumer id. One consumer's polls of a
	// partition are taken to have happened in order of Start (ties in the
	// order they appear in History.Polls); they must not overlap.
	Consumer      string
	Mode          Mode
	ReadCommitted bool
	Topic         string
	Partition     int32
	Records       []Record
	Start, End    int64
	// HW is the high watermark the fetch response reported; -1 if the
	// response carried none.
	HW int64
}

// Dump is the whole log of one partition on one replica at the end of the
// run.
type Dump struct {
	Replica   string
	Topic     string
	Partition int32
	// LogStart is the first offset the replica still holds; offsets below
	// it were trimmed by retention and are not judged.
	LogStart int64
	Records  []Record
	// HW is the replica's final high watermark for the partition.
	HW int64
	// Leader marks the dump of the partition's final leader. If no dump of
	// a partition is marked, the one with the largest last offset is used
	// (ties broken by replica id), and the final high watermark is the
	// largest reported by any replica.
	Leader bool
}

// OffsetCommit is one commit of a consumer group offset.
type OffsetCommit struct {
	Group      string
	Topic      string
	Partition  int32
	Offset     int64
	Start, End int64
	Outcome    Outcome
	// Attempts is how many OffsetCommit requests the client wrote for
	// this commit (its retries included), and Brokers the node each went
	// to, in order; 0 and nil when not recorded.
	Attempts int
	Brokers  []int32
	// Member is the committing member's id, which franz-go also sends
	// as each partition's commit metadata ("" when not recorded).
	Member string
}

// LoggedCommit is one committed-offset record found in a replica's
// __consumer_offsets after the run.
type LoggedCommit struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
	LogOffset int64
	Epoch     int32
}

// OffsetFetch is one read of a consumer group's committed offset.
type OffsetFetch struct {
	Group     string
	Topic     string
	Partition int32
	// Offset is the committed offset returned, -1 if none was committed.
	Offset     int64
	Start, End int64
}

// History is everything a fault-injection run recorded.
type History struct {
	Sends         []Send
	Polls         []Poll
	Dumps         []Dump
	Commits       []OffsetCommit
	OffsetFetches []OffsetFetch
	// OffsetsLog is the final leader's __consumer_offsets (what
	// compaction left of it): refused commits must not be in it.
	OffsetsLog []LoggedCommit
}

// Options tunes the checker.
type Options struct {
	// MinISR is the min.insync.replicas the acknowledged sends relied on;
	// an acknowledged record held by fewer final replicas is reported.
	// Zero disables the check.
	MinISR int
	// MaxPerKind bounds how many anomalies of one kind are kept in
	// Report.Anomalies (Counts always counts all). Zero means 1000;
	// negative means no bound.
	MaxPerKind int
}

// Kind names an anomaly class.
type Kind string

// The anomaly classes the checker reports.
const (
	// InconsistentOffset: one offset of a partition holds two values
	// across acknowledgements, polls and the final leader's log.
	InconsistentOffset Kind = "inconsistent-offset"
	// Duplicate: one value appears at two offsets (or two partitions).
	Duplicate Kind = "duplicate"
	// LostWrite: acknowledged (and committed, if transactional), never
	// read, absent from every final dump, and below the highest offset a
	// poll of the partition reached.
	LostWrite Kind = "lost-write"
	// Unseen: acknowledged (and committed, if transactional), never read
	// and absent from the final leader's log, but not a LostWrite.
	Unseen Kind = "unseen"
	// Unexpected: read or held by a replica, but never sent to that
	// partition.
	Unexpected Kind = "unexpected"
	// AbortedRead (G1a): a read_committed poll returned a value of an
	// aborted transaction, or any poll returned a value whose send failed.
	AbortedRead Kind = "aborted-read"
	// NonMonotonicPoll: offsets did not strictly increase within one poll
	// or across consecutive polls of one assign-mode consumer.
	NonMonotonicPoll Kind = "non-monotonic-poll"
	// PollSkip: a poll (or the step between consecutive polls of one
	// assign-mode consumer) skipped an offset that the final leader's log
	// holds and that the consumer should have returned. Control records,
	// and under read_committed records of aborted, undecided or failed
	// sends, may be skipped.
	PollSkip Kind = "poll-skip"
	// NonMonotonicSend: a producer's later acknowledged send to a
	// partition got a lower offset than an earlier one.
	NonMonotonicSend Kind = "non-monotonic-send"
	// RealTimeOrder: a send that started after another send to the same
	// partition was acknowledged at offset o got an offset below o.
	RealTimeOrder Kind = "real-time-order"
	// TruncatedRead: a polled (offset, value) is not in the final
	// leader's log.
	TruncatedRead Kind = "truncated-read"
	// ReadPastHW: a poll returned an offset at or above the high
	// watermark it reported.
	ReadPastHW Kind = "read-past-hw"
	// ReplicaDivergence: two replicas hold different records at one
	// offset below the final high watermark.
	ReplicaDivergence Kind = "replica-divergence"
	// UnderReplicated: an acknowledged record is held by fewer than
	// Options.MinISR replicas in the final dumps.
	UnderReplicated Kind = "under-replicated"
	// CommittedOffsetRegression: an offset fetch returned a value no
	// linearizable register per (group, partition) could have held: older
	// than a commit that completed before the fetch began (offsets going
	// backwards), from a commit that began after the fetch ended, or never
	// committed at all. Each fetch is judged against the commits alone (a
	// necessary condition of linearizability; orders between fetches are
	// not searched).
	CommittedOffsetRegression Kind = "committed-offset-regression"
	// RefusedCommitWritten: a commit the coordinator refused (a failed
	// outcome: one request, answered with a rebalance or fencing error)
	// is in the final __consumer_offsets, written by the same member
	// with the same offset, and no commit of that member with that
	// offset had another outcome.
	RefusedCommitWritten Kind = "refused-commit-written"
)

// Kinds lists every Kind in report order.
var Kinds = []Kind{
	InconsistentOffset, Duplicate, LostWrite, Unseen, Unexpected,
	AbortedRead, NonMonotonicPoll, PollSkip, NonMonotonicSend,
	RealTimeOrder, TruncatedRead, ReadPastHW, ReplicaDivergence,
	UnderReplicated, CommittedOffsetRegression, RefusedCommitWritten,
}

// Anomaly is one violation with the operations that witness it.
type Anomaly struct {
	Kind      Kind
	Topic     string
	Partition int32
	// Offset is the offset concerned, -1 when none applies.
	Offset int64
	// Value is the value concerned, empty when none applies.
	Value string
	// Witness describes, one line each, the operations that show it.
	Witness []string
}
