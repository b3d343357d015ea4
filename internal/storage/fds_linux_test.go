//go:build linux

package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// fdMu makes counts one at a time, so that none sees another's descriptor.
var fdMu sync.Mutex

// openFDs is the number of descriptors this process holds.
func openFDs(t testing.TB) int {
	t.Helper()
	fdMu.Lock()
	defer fdMu.Unlock()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents) - 1 // ReadDir's own
}

// An active segment holds one descriptor, its .log; without rolled
// segments a log holds no other.
func TestActiveSegmentHoldsOneDescriptor(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pool=%v", pooled), func(t *testing.T) {
			const n = 50
			root := t.TempDir()
			var pool *vfs.Pool
			if pooled {
				pool = vfs.NewPool(vfs.Default, 4)
			}
			before := openFDs(t)
			var logs []*Log
			for i := range n {
				l, err := Open(filepath.Join(root, fmt.Sprint(i)), Options{Pool: pool, Logger: quiet, RetentionMs: -1, RetentionBytes: -1, IndexIntervalBytes: 64})
				if err != nil {
					t.Fatal(err)
				}
				logs = append(logs, l)
				for j := range 20 {
					if _, err := l.Append(mkBatch(t, 3, int64(j), 50), 0); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			if got := openFDs(t) - before; got != n {
				t.Fatalf("%d logs hold %d descriptors, want one each", n, got)
			}
			for _, l := range logs {
				l.Close()
			}
			// Reopened, the active segment is recovered from its log file
			// alone.
			for i, l := range logs {
				if logs[i], _ = Open(l.Dir(), Options{Pool: pool, Logger: quiet, RetentionMs: -1, RetentionBytes: -1}); logs[i] == nil {
					t.Fatal("reopen failed")
				}
			}
			if got := openFDs(t) - before; got != n {
				t.Fatalf("%d reopened logs hold %d descriptors, want one each", n, got)
			}
			for _, l := range logs {
				if l.EndOffset() != 60 {
					t.Fatalf("end %d after reopen", l.EndOffset())
				}
				l.Close()
			}
			if got := openFDs(t) - before; got != 0 {
				t.Fatalf("%d descriptors left after closing", got)
			}
		})
	}
}

// plog is one log of TestPoolBoundsDescriptors and what was written to it.
type plog struct {
	mu      sync.Mutex
	l       *Log
	batches [][]byte // as stored
	bases   []int64
	recs    [][]recordbatch.Record
	gen     *cgen
}

func (p *plog) append(t testing.TB) error {
	b, recs := p.gen.batch(t)
	base, err := p.l.Append(b, 0)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.batches = append(p.batches, bytes.Clone(b))
	p.bases = append(p.bases, base)
	p.recs = append(p.recs, recs)
	p.mu.Unlock()
	return nil
}

// model rebuilds the compaction model of what the log holds.
func (p *plog) model(t testing.TB) *cmodel {
	m := newCModel()
	for i, b := range p.batches {
		m.add(t, b, p.recs[i], p.bases[i])
	}
	return m
}

// Many logs with many rolled segments each, sharing a pool of 8
// descriptors, while they are appended to, read, truncated, compacted and
// reopened: the process's descriptors stay within one per log (the active
// segment) plus the pool's 8 and a few in passing (index files being
// written at a roll, a directory being synced), and every record reads back.
func TestPoolBoundsDescriptors(t *testing.T) {
	const (
		nlogs   = 30
		limit   = 8
		writers = 2
		readers = 4
	)
	batches := 120
	if testing.Short() || raceEnabled {
		batches = 60
	}
	// A roll has at most one index file and the directory open at once;
	// compaction one .cleaned file more.
	slack := 2*writers + 2
	root := t.TempDir()
	pool := vfs.NewPool(vfs.Default, limit)
	opts := func() Options {
		return Options{Pool: pool, Logger: quiet, RetentionMs: -1, RetentionBytes: -1, SegmentBytes: 2048, IndexIntervalBytes: 256, VerifyAll: true}
	}
	before := openFDs(t)
	bound := before + nlogs + limit

	var highWater atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if n := int64(openFDs(t)); n > highWater.Load() {
				highWater.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	checkNow := func(when string) {
		t.Helper()
		if got := openFDs(t); got > bound {
			t.Fatalf("%s: %d descriptors open, want at most %d (%d before, %d logs, pool of %d)", when, got, bound, before, nlogs, limit)
		}
	}

	logs := make([]*plog, nlogs)
	for i := range logs {
		l, err := Open(filepath.Join(root, fmt.Sprint(i)), opts())
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = &plog{l: l, gen: &cgen{rng: rand.New(rand.NewPCG(uint64(i), 3)), nkeys: 20, clock: 1_000_000, seq: map[int64]int32{}}}
	}
	defer func() {
		for _, p := range logs {
			p.l.Close()
		}
	}()

	// Appends from a few writers while readers read random batches back.
	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range batches {
				for i := w; i < nlogs; i += writers {
					if err := logs[i].append(t); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	var rwg sync.WaitGroup
	for r := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				p := logs[rng.IntN(nlogs)]
				p.mu.Lock()
				n := len(p.batches)
				if n == 0 {
					p.mu.Unlock()
					continue
				}
				j := rng.IntN(n)
				base, want := p.bases[j], p.batches[j]
				p.mu.Unlock()
				got, err := p.l.Read(base, 1, p.l.EndOffset())
				if err != nil {
					errs <- fmt.Errorf("read %d: %w", base, err)
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("read %d: wrong bytes", base)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rolled := 0
	for _, p := range logs {
		rolled += p.l.SegmentCount() - 1
	}
	if rolled < 4*nlogs {
		t.Fatalf("only %d rolled segments", rolled)
	}
	checkNow("after appends")

	// Truncate a third of the logs into a rolled segment and append again.
	for _, p := range logs[:nlogs/3] {
		cut := p.bases[len(p.bases)/2] + 1
		if err := p.l.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		// The batch holding cut goes whole.
		k := 0
		for k < len(p.bases) && p.bases[k]+int64(len(p.recs[k])) <= cut {
			k++
		}
		p.batches, p.bases, p.recs = p.batches[:k], p.bases[:k], p.recs[:k]
		for range 20 {
			if err := p.append(t); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkNow("after truncating")

	// Compact half of them.
	compacted := map[*plog]bool{}
	for _, p := range logs[nlogs/4 : nlogs*3/4] {
		st, err := p.l.Compact(time.UnixMilli(p.gen.clock), CompactOptions{DeleteRetentionMs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if st.SegmentsRewritten > 0 {
			compacted[p] = true
		}
	}
	if len(compacted) == 0 {
		t.Fatal("compaction rewrote nothing")
	}
	checkNow("after compacting")

	check := func(when string) {
		t.Helper()
		for i, p := range logs {
			if compacted[p] {
				checkContent(t, p.l, p.model(t))
				continue
			}
			if got := readAll(t, p.l, 0, 700); !bytes.Equal(got, bytes.Join(p.batches, nil)) {
				t.Fatalf("%s: log %d content differs", when, i)
			}
		}
	}
	check("before reopening")
	for _, p := range logs {
		if _, err := p.l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := p.l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := openFDs(t); got > before {
		t.Fatalf("%d descriptors open after closing every log, %d before", got, before)
	}
	for _, p := range logs {
		l, err := Open(p.l.Dir(), opts())
		if err != nil {
			t.Fatal(err)
		}
		if r := l.Recovery(); r.DroppedBytes != 0 || r.Damaged {
			t.Fatalf("recovery %+v", r)
		}
		p.l = l
	}
	checkNow("after reopening")
	check("after reopening")
	checkNow("after reading everything back")
	close(stop)
	sampler.Wait()
	if hw := int(highWater.Load()); hw > bound+slack {
		t.Fatalf("%d descriptors were open at once, want at most %d", hw, bound+slack)
	}
	st := pool.Stats()
	if st.Evictions == 0 || st.Opens == 0 {
		t.Fatalf("pool stats %+v", st)
	}
	t.Logf("%d logs, %d rolled segments, pool %+v, at most %d descriptors (%d before)", nlogs, rolled, st, highWater.Load(), before)
}
