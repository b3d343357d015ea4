// Package reqmem owns the memory the broker spends on client requests
// across all connections: a budget of request bytes being read and handled
// (Kafka's queued.max.request.bytes) and a bounded pool of frame buffers.
//
// A connection takes a frame's announced size from the Budget before it
// reads the frame's body and gives it back once the handler no longer
// needs the bytes; while the budget is spent, readers wait, so the broker
// stops reading sockets instead of growing. The Pool lends large frame
// buffers to whichever connection needs one next, so memory kept for
// reuse is bounded for the whole broker rather than per connection.
//
// The package knows nothing of Kafka, sockets or the broker; it may not
// touch them.
package reqmem

import (
	"context"
	"sync"
	"sync/atomic"
)

// Budget is a count of bytes that readers take before reading a request
// and give back after it has been handled. Waiters are served in arrival
// order, so a large request is not starved by a stream of small ones.
type Budget struct {
	total int64

	mu      sync.Mutex
	used    int64
	waiters []*waiter

	waits   atomic.Int64 // Acquire calls that had to wait
	waiting atomic.Int64 // readers waiting now
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

// NewBudget returns a budget of total bytes (at least 1).
func NewBudget(total int64) *Budget {
	return &Budget{total: max(total, 1)}
}

// Total is the budget's size.
func (b *Budget) Total() int64 { return b.total }

// Used is the number of bytes taken now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Waiting is the number of readers waiting for bytes now.
func (b *Budget) Waiting() int64 { return b.waiting.Load() }

// Waits counts the Acquire calls that had to wait.
func (b *Budget) Waits() int64 { return b.waits.Load() }

// Acquire takes n bytes, at most the whole budget, waiting while they are
// not free. It returns what it took, to be given to Release, or ctx's
// error (taking nothing) when ctx ends first.
func (b *Budget) Acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 0), b.total)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.total {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	b.waits.Add(1)
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready:
			// Granted while ctx ended: give it back.
			b.releaseLocked(n)
		default:
			for i, o := range b.waiters {
				if o == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			// The head may have been waiting behind this one.
			b.grantLocked()
		}
		return 0, ctx.Err()
	}
}

// Release gives back n bytes taken by Acquire.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.releaseLocked(n)
	b.mu.Unlock()
}

func (b *Budget) releaseLocked(n int64) {
	b.used -= n
	if b.used < 0 {
		panic("reqmem: released more than was acquired")
	}
	b.grantLocked()
}

// grantLocked wakes waiters in order for as long as the head fits.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if b.used+w.n > b.total {
			return
		}
		b.used += w.n
		b.waiters = b.waiters[1:]
		close(w.ready)
	}
}

// Force takes n bytes without waiting, even past the total: for memory
// already allocated that must be counted so that others wait for it.
func (b *Budget) Force(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}
