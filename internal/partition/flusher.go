package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/storage"
)

// Flusher is the single group-commit loop shared by a broker's partitions.
// Appends mark their partition dirty; the flusher fsyncs every dirty
// partition in one pass, so concurrent producers share each fsync instead
// of paying one each, and then tells each partition its durable end, from
// which the partition's policy raises its high watermark.
type Flusher struct {
	cfg FlusherConfig

	mu    sync.Mutex
	dirty map[*Partition]struct{}
	kick  chan struct{}
}

// FlusherConfig configures a Flusher.
type FlusherConfig struct {
	// Fatal is called when an fsync fails, and the pass stops: a retried
	// fsync can report success for data the kernel already dropped, so
	// the process must stop.
	Fatal func(error)
	// ObserveFsync, if set, is told how long each fsync took.
	ObserveFsync func(time.Duration)
	// Volume, if set, is the filesystem holding the partitions: a pass
	// over many dirty partitions syncs it whole (storage.Volume) instead
	// of fsyncing each.
	Volume *storage.Volume
	// WakeOnAppend wakes a partition's waiters on every append, not only
	// when its high watermark rises: replication followers long-poll for
	// appends.
	WakeOnAppend bool
	// IdleEvery is how long a write marked for a later pass stays unsynced
	// when nothing starts one; lazyFlushEvery when zero. Tests lengthen it
	// to prove that a path starts its own pass.
	IdleEvery time.Duration
}

// NewFlusher returns a flusher; Run starts its loop.
func NewFlusher(cfg FlusherConfig) *Flusher {
	return &Flusher{cfg: cfg, dirty: map[*Partition]struct{}{}, kick: make(chan struct{}, 1)}
}

// markDirty schedules p for the next sync, starting a pass at once when
// kick is set; otherwise the write rides along with the next pass another
// write starts, or the idle tick's.
func (f *Flusher) markDirty(p *Partition, kick bool) {
	f.mu.Lock()
	f.dirty[p] = struct{}{}
	f.mu.Unlock()
	if kick {
		f.Kick()
	}
	if f.cfg.WakeOnAppend {
		p.Wake()
	}
}

// Kick starts a pass at once (or right after the one under way) for
// whatever is marked: the end of a request whose appends were marked
// FlushWithRequest.
func (f *Flusher) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// lazyFlushEvery bounds how long a lazily marked write stays unsynced when
// nothing else is written.
const lazyFlushEvery = 50 * time.Millisecond

// maxParallelSyncs bounds the fsyncs one pass runs at once.
const maxParallelSyncs = 16

// volumeSyncAt is the number of dirty partitions from which a pass syncs
// the volume whole. Every fsync pays for a device flush of its own unless
// the filesystem's journal commits concurrent ones together, which it
// does not always (ext4 without a journal, as on this project's
// machines): one syncfs of 10,000 dirty files took 50-180 ms against
// 480-830 ms for their fsyncs, and with 8 and 64 partitions a syncfs per
// pass carried 10-14% and 37% more acks=all records per second than 8 and
// 64 parallel fsyncs (docs/BENCHMARKS.md). A volume sync also writes back
// whatever else is dirty on the filesystem, so the broker's own large
// background writes (compaction) sync themselves as they go.
const volumeSyncAt = 2

// Run syncs as soon as there is work, and every IdleEvery (lazyFlushEvery
// by default), until ctx ends.
func (f *Flusher) Run(ctx context.Context) {
	every := f.cfg.IdleEvery
	if every <= 0 {
		every = lazyFlushEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			f.SyncAll()
		case <-tick.C:
			f.SyncAll()
		}
	}
}

// SyncAll fsyncs every dirty partition and publishes the new high
// watermarks.
func (f *Flusher) SyncAll() {
	f.mu.Lock()
	if len(f.dirty) == 0 {
		f.mu.Unlock()
		return
	}
	batch := f.dirty
	f.dirty = make(map[*Partition]struct{}, len(batch))
	f.mu.Unlock()
	if f.cfg.Volume != nil && len(batch) >= volumeSyncAt {
		f.syncVolume(batch)
		return
	}
	if len(batch) == 1 {
		// One file: sync it here, with no goroutine to start and wait
		// for (the wake-ups saved were not measurable next to the
		// fsync, but nothing is gained by them either).
		for p := range batch {
			f.syncOne(p)
		}
		return
	}
	// The files are fsynced in parallel: the journal commits concurrent
	// fsyncs together, so a pass costs about one fsync however many
	// partitions (a produce over 8 partitions, or a transaction's data,
	// state record and markers) it covers.
	type result struct {
		p       *Partition
		durable int64
		err     error
	}
	results := make(chan result, len(batch))
	sem := make(chan struct{}, maxParallelSyncs)
	for p := range batch {
		sem <- struct{}{}
		go func(p *Partition) {
			defer func() { <-sem }()
			start := time.Now()
			durable, err := p.log.Sync()
			if f.cfg.ObserveFsync != nil {
				f.cfg.ObserveFsync(time.Since(start))
			}
			results <- result{p, durable, err}
		}(p)
	}
	for range batch {
		r := <-results
		if !f.done(r.p, r.durable, r.err) {
			return
		}
	}
}

// syncOne is a pass over a single partition.
func (f *Flusher) syncOne(p *Partition) {
	start := time.Now()
	durable, err := p.log.Sync()
	if f.cfg.ObserveFsync != nil {
		f.cfg.ObserveFsync(time.Since(start))
	}
	f.done(p, durable, err)
}

// syncVolume is a pass that syncs the volume once for every partition.
func (f *Flusher) syncVolume(batch map[*Partition]struct{}) {
	parts := make([]*Partition, 0, len(batch))
	logs := make([]*storage.Log, 0, len(batch))
	for p := range batch {
		parts = append(parts, p)
		logs = append(logs, p.log)
	}
	start := time.Now()
	res := f.cfg.Volume.Sync(logs)
	if f.cfg.ObserveFsync != nil {
		f.cfg.ObserveFsync(time.Since(start))
	}
	for i, r := range res {
		if !f.done(parts[i], r.Durable, r.Err) {
			return
		}
	}
}

// done publishes one partition's sync; false means the pass must stop.
func (f *Flusher) done(p *Partition, durable int64, err error) bool {
	if err != nil {
		if p.deleted.Load() {
			return true // the topic was deleted under us
		}
		f.cfg.Fatal(fmt.Errorf("fsync %s/%d: %w", p.Topic, p.Index, err))
		return false
	}
	p.synced(durable)
	return true
}
