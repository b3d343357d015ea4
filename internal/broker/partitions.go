package broker

import (
	"errors"
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
type brokerFence struct{ b *Broker }

// Leading refuses a client's or the broker's own append on a failover
// replica that is not running as leader; otherwise it gives the epoch to
// stamp.
func (f brokerFence) Leading() (int32, error) {
	if f.b.fenced() {
		return 0, errNotServing
	}
	return f.b.epoch.Load(), nil
}

// Following refuses a shipped append or truncation on a failover replica
// that is not following.
func (f brokerFence) Following() error {
	if f.b.repl == nil {
		return nil
	}
	return f.b.repl.mayFollow()
}
