package partition

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	// WakeOnAppend wakes a partition's waiters on every append, not only
	// when its high watermark rises: replication followers long-poll for
	// appends.
	WakeOnAppend bool
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
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	if f.cfg.WakeOnAppend {
		p.Wake()
	}
}

// lazyFlushEvery bounds how long a lazily marked write stays unsynced when
// nothing else is written.
const lazyFlushEvery = 50 * time.Millisecond

// maxParallelSyncs bounds the fsyncs one pass runs at once.
const maxParallelSyncs = 16

// Run syncs as soon as there is work, and every lazyFlushEvery, until ctx
// ends.
func (f *Flusher) Run(ctx context.Context) {
	tick := time.NewTicker(lazyFlushEvery)
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
		if r.err != nil {
			if r.p.deleted.Load() {
				continue // the topic was deleted under us
			}
			f.cfg.Fatal(fmt.Errorf("fsync %s/%d: %w", r.p.Topic, r.p.Index, r.err))
			return
		}
		r.p.synced(r.durable)
	}
}
