package broker

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// newFlusher is the broker's group-commit loop (internal/partition). A
// failed fsync stops the broker; with replication, appends also wake the
// followers' long polls.
func newFlusher(b *Broker) *partition.Flusher {
	// Without a volume (not Linux, a filesystem wrapper that cannot sync
	// one) every pass fsyncs file by file, which is only slower.
	vol, err := storage.OpenVolume(b.fs, b.topicsDir())
	if err != nil && !errors.Is(err, vfs.ErrNoVolume) {
		b.log.Warn("the data directory's volume cannot be synced whole; each partition is fsynced on its own",
			"dir", b.topicsDir(), "err", err)
	}
	if vol != nil {
		if err := vol.Settle(); err != nil {
			b.log.Warn("the data directory's filesystem reports a write that failed before this start; the partitions are recovered from what is on disk",
				"dir", b.topicsDir(), "err", err)
		}
	}
	b.volume = vol
	return partition.NewFlusher(partition.FlusherConfig{
		Fatal:        func(err error) { b.fatal(err) },
		ObserveFsync: func(d time.Duration) { b.stats.observeFsync(d) },
		Volume:       vol,
		WakeOnAppend: b.repl != nil,
		IdleEvery:    b.flushIdle,
	})
}

// commitPolicy is what decides the high watermark of this broker's
// partitions: the durable end on a single node, the group's rule
// (replication.Leader) with replication.
func (b *Broker) commitPolicy() partition.Policy {
	if b.repl != nil {
		return replicaPolicy{b.repl}
	}
	return partition.Durable{}
}

// brokerFence is what a partition asks under its append lock before it
// appends.
type brokerFence struct {
	b  *Broker
	pl *placement
}

// placement is what cluster mode says about one partition on this
// broker: the epoch base its exposed leader epoch adds to the group's
// term (0 outside cluster mode and until a move hands the partition over),
// and whether the group's Raft log fences it because a move takes it to
// another group. The cluster-mode code writes both, before it answers
// clients from the metadata that changed them.
type placement struct {
	base  atomic.Int32
	moved atomic.Bool
	// drainUntil (Unix nanoseconds of broker time, which a step of the
	// wall clock does not move) is set on the source group's leader
	// while a move waits for the partition's open transactions to end:
	// until then no new one may begin on it (draining). Each of the
	// target's asks to fence pushes it moveDrainHold ahead, so the
	// refusal spans the gaps between asks: otherwise back-to-back
	// transactions longer than one ask's wait would keep the partition
	// from ever draining. Open ones end by their own timeout at the
	// latest; once the target stops asking, the refusal runs out.
	drainUntil atomic.Int64
}

// draining reports whether a move refuses new transactions on the
// partition at broker time now.
func (pl *placement) draining(now time.Time) bool { return now.UnixNano() < pl.drainUntil.Load() }

// Leading refuses a client's or the broker's own append on a failover
// replica that is not running as leader, or on a partition fenced for a
// move; otherwise it gives the epoch to stamp.
func (f brokerFence) Leading() (int32, error) {
	if f.b.fenced() || f.pl.moved.Load() {
		return 0, errNotServing
	}
	return f.b.epoch.Load() + f.pl.base.Load(), nil
}

// Following refuses a shipped append or truncation on a failover replica
// that is not following.
func (f brokerFence) Following() error {
	if f.b.repl == nil {
		return nil
	}
	return f.b.repl.mayFollow()
}

// Copying refuses a move's copy on a replica that is not its group's
// running leader. The move fence does not: a group may take back a
// partition it once handed over, and copies it before the fence lifts.
func (f brokerFence) Copying() error {
	if f.b.fenced() {
		return errNotServing
	}
	return nil
}

// placementOf is p's placement.
func placementOf(p *partition.Partition) *placement {
	if f, ok := p.Fence().(brokerFence); ok {
		return f.pl
	}
	return &placement{}
}

// exposedEpoch is the leader epoch clients see for p: the group's epoch
// plus the partition's base.
func (b *Broker) exposedEpoch(p *partition.Partition) int32 {
	return b.epoch.Load() + placementOf(p).base.Load()
}

// checkLeaderEpoch is KIP-320's check of a client's current leader epoch
// of p (-1: none given).
func (b *Broker) checkLeaderEpoch(p *partition.Partition, current int32) int16 {
	e := b.exposedEpoch(p)
	switch {
	case current >= 0 && current < e:
		return errFencedLeaderEpoch
	case current > e:
		return errUnknownLeaderEpoch
	}
	return 0
}
