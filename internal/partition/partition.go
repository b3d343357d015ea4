// Package partition is the one owner of a partition's commit state: its
// log handle, the append lock, the producer (idempotence) and transaction
// state kept in step with every append, the group-commit flusher that makes
// appends durable, the high watermark, and the waits for it.
//
// Every append goes through one path (lock, fence check, append, producer
// and transaction state, mark dirty), whoever makes it: a client's produce
// (AppendClient), a write the broker makes to its own internal topics
// (AppendOwn) or a batch shipped from the leader (AppendReplica). The high
// watermark is written by one function, raised only as far as the
// partition's Policy allows (a single node: the durable end; a replication
// group: the ISR rule of replication.Leader) and never above the durable
// end; WaitCommitted is the wait of every acks=all produce and every
// internal-topic write.
//
// It may not decide leadership, epochs or the ISR (its Fence and Policy
// tell it), speak the Kafka protocol beyond the error codes the producer
// state hands back, or read the broker's topic registry or configuration.
// Reads, retention and compaction use the log handle (Log) directly: they
// change no commit state.
package partition

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/producer"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/vfs"
)

// ErrDeleted refuses an append to a partition whose topic was deleted.
var ErrDeleted = errors.New("the partition was deleted")

// Fence tells a partition, under its append lock, whether this replica may
// write it now.
type Fence interface {
	// Leading returns the leader epoch to stamp on a client's or the
	// broker's own batches, or why this replica may not append them.
	Leading() (int32, error)
	// Following returns why this replica may not write what its leader
	// shipped (nil: it may).
	Following() error
	// Copying returns why this replica may not write a copy of the
	// partition taken from another replication group, as the leader of
	// the group a move takes the partition to (nil: it may).
	Copying() error
}

// Config describes a partition to New.
type Config struct {
	Topic   string
	TopicID [16]byte
	Index   int32
	// Log is the partition's opened log; the Partition owns it from now
	// on and closes it in Close or Delete.
	Log *storage.Log
	// Policy decides how far the high watermark may go (nil: Durable).
	Policy Policy
	// Fence is asked before every append (nil: always leading in epoch
	// 0, always allowed to follow).
	Fence Fence
	// Flusher makes appends durable; nil only for a partition that is
	// never appended to through this package (tests).
	Flusher *Flusher
	// UncommittedTail says that what is durable here may still be
	// truncated (a failover group): the high watermark starts at the log
	// start and comes only from the group, not from the local durable end.
	UncommittedTail bool
	// FS holds the producer-state snapshot (nil: vfs.Default).
	FS     vfs.FS
	Logger *slog.Logger
	// Clock stamps appends for producer-id expiry, which compares the
	// stamps with broker time (nil: clock.New()).
	Clock *clock.Clock
}

// Partition is one partition's log and the state that makes its records
// committed and visible.
type Partition struct {
	// Topic, TopicID and Index name the partition; they never change.
	Topic   string
	TopicID [16]byte
	Index   int32

	log    *storage.Log
	policy Policy
	fence  Fence
	flush  *Flusher
	fs     vfs.FS
	logger *slog.Logger
	clock  *clock.Clock

	// mu is the append lock: it serialises appends so the offsets a
	// produce gets match the order its batches reach the log, and keeps
	// the producer state in step with the log.
	mu sync.Mutex
	// producers is the idempotent producers' state, guarded by mu.
	producers *producer.State
	// txns tracks open and aborted transactions (LSO, aborted index).
	// Appends change it under mu and txnMu; readers take txnMu only, so
	// a fetch never waits for an append.
	txnMu sync.Mutex
	txns  *txn.Partition

	// hw is the high watermark: consumers only see records below it, so
	// a crash or a failover can never take back a record that was read.
	// Only storeHW writes it.
	hw atomic.Int64

	// deleted is set when the topic is deleted, so the flusher does not
	// mistake the closed log's error for a failed fsync.
	deleted atomic.Bool

	waitMu  sync.Mutex
	waiters map[chan struct{}]struct{}
}

// New makes cfg.Log a partition: it fsyncs what recovery kept (so the high
// watermark never covers bytes a second crash could lose), sets the first
// high watermark and rebuilds the producer and transaction state from the
// snapshot and the log. On error the log is left open for the caller.
func New(cfg Config) (*Partition, error) {
	p := &Partition{Topic: cfg.Topic, TopicID: cfg.TopicID, Index: cfg.Index, log: cfg.Log,
		policy: cfg.Policy, fence: cfg.Fence, flush: cfg.Flusher, fs: cfg.FS, logger: cfg.Logger,
		clock: cfg.Clock, waiters: map[chan struct{}]struct{}{}}
	if p.policy == nil {
		p.policy = Durable{}
	}
	if p.fence == nil {
		p.fence = alwaysLeading{}
	}
	if p.fs == nil {
		p.fs = vfs.Default
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	if p.clock == nil {
		p.clock = clock.New()
	}
	p.logger = p.logger.With("topic", p.Topic, "partition", p.Index)
	durable, err := p.log.Sync()
	if err != nil {
		return nil, fmt.Errorf("sync partition %s/%d: %w", p.Topic, p.Index, err)
	}
	first := durable
	if cfg.UncommittedTail {
		first = p.log.StartOffset()
	}
	p.storeHW(func(int64) int64 { return first })
	if err := p.loadState(); err != nil {
		return nil, fmt.Errorf("rebuild producer state of %s/%d: %w", p.Topic, p.Index, err)
	}
	return p, nil
}

// alwaysLeading is the fence of a partition that nothing fences.
type alwaysLeading struct{}

func (alwaysLeading) Leading() (int32, error) { return 0, nil }
func (alwaysLeading) Following() error        { return nil }
func (alwaysLeading) Copying() error          { return nil }

// Log is the partition's log, for reads, retention, compaction and
// inspection. Appends and truncations go through the Partition.
func (p *Partition) Log() *storage.Log { return p.log }

// Fence is the fence the partition asks before every append.
func (p *Partition) Fence() Fence { return p.fence }

// Deleted reports whether the partition's topic was deleted.
func (p *Partition) Deleted() bool { return p.deleted.Load() }

// Delete marks the partition deleted, closes its log and wakes its waiters
// (a long poll answers UNKNOWN_TOPIC_OR_PARTITION).
func (p *Partition) Delete() {
	p.deleted.Store(true)
	p.log.Close()
	p.Wake()
}

// Close closes the partition's log.
func (p *Partition) Close() error { return p.log.Close() }

// Barrier returns once no append that started before it is still running.
func (p *Partition) Barrier() {
	p.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier
	p.mu.Unlock()
}
