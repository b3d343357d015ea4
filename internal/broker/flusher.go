package broker

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// flusher is the broker's single group-commit loop. Appends mark their
// partition dirty; the flusher fsyncs every dirty partition in one pass, so
// concurrent producers share each fsync instead of paying one each. After a
// sync it raises the partition's high watermark to the durable end and
// wakes whoever waits on it (acks=all producers and long-polling fetches).
type flusher struct {
	b *Broker

	mu    sync.Mutex
	dirty map[*partition]struct{}
	kick  chan struct{}
}

func newFlusher(b *Broker) *flusher {
	return &flusher{b: b, dirty: map[*partition]struct{}{}, kick: make(chan struct{}, 1)}
}

// markDirty schedules p for the next sync.
func (f *flusher) markDirty(p *partition) {
	f.mu.Lock()
	f.dirty[p] = struct{}{}
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
	if f.b.repl != nil {
		// Followers long-poll for appends, not only for the high
		// watermark.
		p.wake()
	}
}

// markDirtyLazy schedules p for the next sync without starting one: the
// write rides along with the next pass another write starts, or the idle
// tick's.
func (f *flusher) markDirtyLazy(p *partition) {
	f.mu.Lock()
	f.dirty[p] = struct{}{}
	f.mu.Unlock()
	if f.b.repl != nil {
		p.wake()
	}
}

// lazyFlushEvery bounds how long a lazily marked write stays unsynced when
// nothing else is written.
const lazyFlushEvery = 50 * time.Millisecond

// maxParallelSyncs bounds the fsyncs one pass runs at once.
const maxParallelSyncs = 16

func (f *flusher) run(ctx context.Context) {
	tick := time.NewTicker(lazyFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			f.syncAll()
		case <-tick.C:
			f.syncAll()
		}
	}
}

// syncAll fsyncs every dirty partition and publishes the new high
// watermarks.
func (f *flusher) syncAll() {
	f.mu.Lock()
	if len(f.dirty) == 0 {
		f.mu.Unlock()
		return
	}
	batch := f.dirty
	f.dirty = make(map[*partition]struct{}, len(batch))
	f.mu.Unlock()
	// The files are fsynced in parallel: the journal commits concurrent
	// fsyncs together, so a pass costs about one fsync however many
	// partitions (a produce over 8 partitions, or a transaction's data,
	// state record and markers) it covers.
	type result struct {
		p       *partition
		durable int64
		err     error
	}
	results := make(chan result, len(batch))
	sem := make(chan struct{}, maxParallelSyncs)
	for p := range batch {
		sem <- struct{}{}
		go func(p *partition) {
			defer func() { <-sem }()
			start := time.Now()
			durable, err := p.log.Sync()
			f.b.stats.observeFsync(time.Since(start))
			results <- result{p, durable, err}
		}(p)
	}
	for range batch {
		r := <-results
		p, durable, err := r.p, r.durable, r.err
		if err != nil {
			if p.deleted.Load() {
				continue // the topic was deleted under us
			}
			f.b.fatal(fmt.Errorf("fsync %s/%d: %w", p.topic, p.index, err))
			return
		}
		if f.b.repl != nil {
			// The group decides the high watermark.
			f.b.repl.synced(p, durable)
			continue
		}
		if durable > p.hw.Load() {
			p.hw.Store(durable)
			p.wake()
		}
	}
}
