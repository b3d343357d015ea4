package reqmem

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Frame buffers are pooled in power-of-two classes from minPooled to
// maxPooled bytes. Smaller ones cost little to allocate; larger ones are
// rare enough that keeping them would only hold memory. A franz-go
// producer with its default buffering sends produce requests of 8 to 10
// MiB once it writes to more partitions than one request has batches for
// (each batch up to 1 MiB): at 8 MiB these missed the pool, and their
// growth on the heap and its collection were a quarter of the broker's
// CPU with 10,000 partitions (docs/BENCHMARKS.md). Off the heap a class's
// pages are mapped only once touched, so a large class costs what is used.
const (
	minPooledShift = 16 // 64 KiB
	maxPooledShift = 25 // 32 MiB
	classes        = maxPooledShift - minPooledShift + 1
	// MaxPooled is the largest buffer the pool lends.
	MaxPooled = 1 << maxPooledShift
)

// Pool lends frame buffers. It keeps at most its retain bound of idle
// buffers across all classes; a buffer given back beyond that is left to
// the garbage collector, or, off the heap, unmapped. Off the heap it also
// keeps one buffer above the largest class (spare).
type Pool struct {
	retain  int64
	offHeap bool

	mu   sync.Mutex
	free [classes][]idleBuffer
	// gen counts Trim calls: a buffer still idle since before the last
	// one is released by the next.
	gen    uint64
	idle   int64              // bytes of the buffers in free
	mapped map[*byte]struct{} // off the heap: every buffer lent or idle
	closed bool               // off the heap: Close ran
	// spare is the one buffer above the largest class kept idle, for
	// the next such Get: a consumer reading many partitions asks for an
	// answer of tens of megabytes every time, and mapping and faulting
	// in a fresh one per answer was a fifth of the broker's CPU while it
	// read (docs/BENCHMARKS.md). It is outside retain, which would
	// otherwise trade it for the answer's own read buffers, and Trim
	// releases it once it has been idle through a period.
	spare idleBuffer

	hits, misses atomic.Int64
}

// idleBuffer is a buffer in the pool and the Trim generation it was given
// back in.
type idleBuffer struct {
	b   []byte
	gen uint64
}

// NewPool returns a pool that keeps at most retain bytes of idle buffers.
func NewPool(retain int64) *Pool { return &Pool{retain: retain} }

// NewOffHeapPool returns a pool whose buffers are mapped outside the Go
// heap (where the platform allows; elsewhere it is NewPool's). The
// garbage collector sizes its next heap at twice what is live: frame
// buffers on the heap, which are most of what a loaded broker holds,
// would have it hold about as much again in garbage. Off the heap they
// count once. The price is that a buffer must be given back (Put) to be
// freed, and never used after: the pool unmaps what it does not keep.
func NewOffHeapPool(retain int64) *Pool {
	if !canMap {
		return NewPool(retain)
	}
	return &Pool{retain: retain, offHeap: true, mapped: map[*byte]struct{}{}}
}

// class returns the class of a buffer of n bytes and whether it is pooled.
func class(n int) (int, bool) {
	if n <= 0 || n > 1<<maxPooledShift {
		return 0, false
	}
	shift := bits.Len(uint(n - 1)) // smallest power of two >= n
	return max(shift, minPooledShift) - minPooledShift, true
}

// Get returns a buffer of length n, from the pool when one is idle.
func (p *Pool) Get(n int) []byte {
	c, ok := class(n)
	if !ok && n > MaxPooled && p.offHeap {
		return p.getLarge(n)
	}
	if !ok || n < 1<<minPooledShift/2 {
		return make([]byte, n)
	}
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		// The newest first: the oldest are the ones Trim releases.
		b := p.free[c][l-1].b
		p.free[c] = p.free[c][:l-1]
		p.idle -= int64(cap(b))
		p.mu.Unlock()
		p.hits.Add(1)
		return b[:n]
	}
	if !p.offHeap {
		p.mu.Unlock()
		p.misses.Add(1)
		return make([]byte, n, 1<<(c+minPooledShift))
	}
	defer p.mu.Unlock()
	b, err := mapBuffer(1 << (c + minPooledShift))
	if err != nil {
		// Out of address space or mappings: the heap may still have
		// room, and such a buffer is simply never taken back.
		return make([]byte, n, 1<<(c+minPooledShift))
	}
	p.misses.Add(1)
	p.mapped[&b[0]] = struct{}{}
	return b[:n]
}

// getLarge lends a buffer above the largest class, off the heap: a fetch
// answer over many partitions can be tens of megabytes, and on the heap
// the garbage collector would let as much again in garbage build up
// before it ran. It is the spare when that is large enough, else mapped
// afresh; Put keeps the larger of it and the spare and unmaps the other.
func (p *Pool) getLarge(n int) []byte {
	size := (n + 1<<minPooledShift - 1) &^ (1<<minPooledShift - 1)
	p.mu.Lock()
	if s := p.spare.b; cap(s) >= size {
		p.spare = idleBuffer{}
		p.mu.Unlock()
		p.hits.Add(1)
		return s[:n]
	}
	p.mu.Unlock()
	b, err := mapBuffer(size)
	if err != nil {
		return make([]byte, n)
	}
	p.misses.Add(1)
	p.mu.Lock()
	p.mapped[&b[0]] = struct{}{}
	p.mu.Unlock()
	return b[:n]
}

// Put gives a buffer back. The caller must not use it afterwards, nor
// keep any slice of it. Putting a buffer the pool did not lend (from the
// heap, or nil) does nothing.
func (p *Pool) Put(b []byte) {
	if cap(b) > MaxPooled && p.offHeap {
		p.putLarge(b)
		return
	}
	c, ok := class(cap(b))
	if !ok || cap(b) != 1<<(c+minPooledShift) {
		return // not one of ours
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b = b[:cap(b)]
	if p.offHeap {
		// Only what this pool mapped may go back: a heap slice of a
		// class's size must not be unmapped.
		if _, ok := p.mapped[&b[0]]; !ok {
			return
		}
		if p.closed || p.idle+int64(cap(b)) > p.retain {
			delete(p.mapped, &b[0])
			unmapBuffer(b)
			return
		}
	} else if p.idle+int64(cap(b)) > p.retain {
		return
	}
	p.free[c] = append(p.free[c], idleBuffer{b[:0], p.gen})
	p.idle += int64(cap(b))
}

func (p *Pool) putLarge(b []byte) {
	b = b[:cap(b)]
	p.mu.Lock()
	if _, ok := p.mapped[&b[0]]; !ok {
		p.mu.Unlock()
		return
	}
	drop := b
	if !p.closed && cap(p.spare.b) < cap(b) {
		drop, p.spare = p.spare.b[:cap(p.spare.b)], idleBuffer{b[:0], p.gen}
	}
	if cap(drop) > 0 {
		delete(p.mapped, &drop[0])
	}
	p.mu.Unlock()
	if cap(drop) > 0 {
		unmapBuffer(drop)
	}
}

// Trim releases the buffers that have stayed idle since the previous
// Trim: called periodically, it lets a load that has passed give its
// memory back, while the buffers a steady load reuses stay.
func (p *Pool) Trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.free {
		keep := p.free[c][:0]
		for _, ib := range p.free[c] {
			if ib.gen == p.gen {
				keep = append(keep, ib)
				continue
			}
			b := ib.b[:cap(ib.b)]
			p.idle -= int64(cap(b))
			if p.offHeap {
				delete(p.mapped, &b[0])
				unmapBuffer(b)
			}
		}
		clear(p.free[c][len(keep):])
		p.free[c] = keep
	}
	if cap(p.spare.b) > 0 && p.spare.gen != p.gen {
		p.releaseSpareLocked()
	}
	p.gen++
}

// releaseSpareLocked unmaps the spare; the caller holds mu.
func (p *Pool) releaseSpareLocked() {
	b := p.spare.b[:cap(p.spare.b)]
	p.spare = idleBuffer{}
	delete(p.mapped, &b[0])
	unmapBuffer(b)
}

// Close unmaps the idle buffers of an off-heap pool, and every buffer given
// back after it; a heap pool has nothing to do.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.offHeap || p.closed {
		return
	}
	p.closed = true
	for c := range p.free {
		for _, ib := range p.free[c] {
			b := ib.b[:cap(ib.b)]
			delete(p.mapped, &b[0])
			unmapBuffer(b)
		}
		p.free[c] = nil
	}
	p.idle = 0
	if cap(p.spare.b) > 0 {
		p.releaseSpareLocked()
	}
}

// Mapped is the number of off-heap buffers lent or idle.
func (p *Pool) Mapped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mapped)
}

// Lent is the number of off-heap buffers lent and not given back.
func (p *Pool) Lent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.mapped)
	for c := range p.free {
		n -= len(p.free[c])
	}
	if cap(p.spare.b) > 0 {
		n--
	}
	return n
}

// Idle is the number of bytes the pool keeps now, the spare included.
func (p *Pool) Idle() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle + int64(cap(p.spare.b))
}

// Hits and Misses count Gets served from the pool and allocated afresh.
func (p *Pool) Hits() int64   { return p.hits.Load() }
func (p *Pool) Misses() int64 { return p.misses.Load() }
