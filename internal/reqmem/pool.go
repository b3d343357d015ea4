package reqmem

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Frame buffers are pooled in power-of-two classes from minPooled to
// maxPooled bytes. Smaller ones cost little to allocate; larger ones are
// rare enough that keeping them would only hold memory.
const (
	minPooledShift = 16 // 64 KiB
	maxPooledShift = 23 // 8 MiB
	classes        = maxPooledShift - minPooledShift + 1
	// MaxPooled is the largest buffer the pool lends.
	MaxPooled = 1 << maxPooledShift
)

// Pool lends frame buffers. It keeps at most its retain bound of idle
// buffers across all classes; a buffer given back beyond that is left to
// the garbage collector.
type Pool struct {
	retain int64

	mu   sync.Mutex
	free [classes][][]byte
	idle int64 // bytes of the buffers in free

	hits, misses atomic.Int64
}

// NewPool returns a pool that keeps at most retain bytes of idle buffers.
func NewPool(retain int64) *Pool { return &Pool{retain: retain} }

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
	if !ok || n < 1<<minPooledShift/2 {
		return make([]byte, n)
	}
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c] = p.free[c][:l-1]
		p.idle -= int64(cap(b))
		p.mu.Unlock()
		p.hits.Add(1)
		return b[:n]
	}
	p.mu.Unlock()
	p.misses.Add(1)
	return make([]byte, n, 1<<(c+minPooledShift))
}

// Put gives a buffer back. The caller must not use it afterwards, nor
// keep any slice of it.
func (p *Pool) Put(b []byte) {
	c, ok := class(cap(b))
	if !ok || cap(b) != 1<<(c+minPooledShift) {
		return // not one of ours
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+int64(cap(b)) > p.retain {
		return
	}
	p.free[c] = append(p.free[c], b[:0])
	p.idle += int64(cap(b))
}

// Idle is the number of bytes the pool keeps now.
func (p *Pool) Idle() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// Hits and Misses count Gets served from the pool and allocated afresh.
func (p *Pool) Hits() int64   { return p.hits.Load() }
func (p *Pool) Misses() int64 { return p.misses.Load() }
