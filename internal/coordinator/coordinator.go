// Package coordinator holds what the group and transaction coordinators
// share: Writer, the one door through which a coordinator writes its
// internal topic, and the errors a write through it ends with, each mapped
// to the Kafka code a coordinator answers (Code).
//
// It owns no state. A coordinator gets a Writer when it is built and
// nothing else of the broker's: it never creates topics, checks the ISR or
// waits on a high watermark by itself, so cluster mode can hand it a
// partition in another replication group behind the same interface.
package coordinator

import (
	"context"
	"errors"
	"unicode"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/partition"
)

// Writer appends a coordinator's own records and waits for them. The
// broker implements it; every write of __consumer_offsets and
// __transaction_state goes through it.
type Writer interface {
	// Partition returns the partition of the internal topic name that
	// holds key's state (PartitionFor over the topic's partitions),
	// creating the topic with configs on first use. It fails with
	// ErrNotServing when that partition is not this broker's to write
	// (in cluster mode, another group owns it).
	Partition(name, key string, configs map[string]string) (*partition.Partition, error)
	// Append appends a batch the coordinator encoded itself and returns the
	// offset after it: what Wait must reach. It is refused with
	// ErrBelowMinISR while the partition's ISR is below
	// min.insync.replicas, as Kafka's coordinators are, and with
	// ErrNotServing when this replica does not lead.
	Append(p *partition.Partition, batch []byte, flush partition.Flush) (int64, error)
	// Wait waits until the write ending at end is committed (in a
	// replication group: on the ISR), for a bounded time.
	Wait(ctx context.Context, p *partition.Partition, end int64) error
}

// PartitionFor is the partition of a coordinator topic with n partitions
// that holds key (a group id or a transactional id): Kafka's
// abs(key.hashCode()) % n, with Java's String.hashCode over the key's
// UTF-16 code units and Kafka's abs (the sign bit dropped), so a key lands
// where a Kafka cluster with as many partitions would put it.
func PartitionFor(key string, n int) int32 {
	if n <= 1 {
		return 0
	}
	var h int32
	for _, r := range key {
		if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
			h = 31*(31*h+r1) + r2 // a surrogate pair: two code units
			continue
		}
		h = 31*h + r
	}
	return int32(int(h&0x7fffffff) % n)
}

// ErrCommitTimeout fails a write that was not committed in time. Its fate
// is unknown: it may still commit.
var ErrCommitTimeout = errors.New("commit not durable before the timeout")

// ErrBelowMinISR fails a write whose partition's ISR is (or fell) below
// min.insync.replicas: it would otherwise be acknowledged on too few
// replicas.
var ErrBelowMinISR = errors.New("fewer in-sync replicas than min.insync.replicas")

// ErrStoppedLeading fails a write whose replica stopped leading before the
// write was known to be on the ISR. Its fate is unknown: the new leader may
// or may not have it (a follower that fetched it keeps it and, leading,
// commits it), as in Kafka.
var ErrStoppedLeading = errors.New("this replica stopped leading before the write was known to be on the in-sync replicas; the next leader may keep it")

// ErrNotServing refuses an append on a replica that is not running as
// leader.
var ErrNotServing = errors.New("this replica is not the serving leader")

// Code is the error a coordinator answers when writing its state failed
// with err: COORDINATOR_NOT_AVAILABLE (retriable) below
// min.insync.replicas, as Kafka's coordinators answer for
// NOT_ENOUGH_REPLICAS; REQUEST_TIMED_OUT when durability did not come in
// time; NOT_COORDINATOR when this replica stopped leading meanwhile (the
// client finds the new coordinator), also when it had stopped before the
// append; KAFKA_STORAGE_ERROR otherwise.
func Code(err error) int16 {
	switch {
	case errors.Is(err, ErrBelowMinISR):
		return kerr.CoordinatorNotAvailable.Code
	case errors.Is(err, ErrCommitTimeout):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, ErrStoppedLeading), errors.Is(err, ErrNotServing):
		return kerr.NotCoordinator.Code
	}
	return kerr.KafkaStorageError.Code
}
