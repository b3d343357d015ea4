package reqmem

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBudgetNeverExceedsTotal: many goroutines taking and giving back
// random amounts never hold more than the total at once, and every one
// gets its turn.
func TestBudgetNeverExceedsTotal(t *testing.T) {
	b := NewBudget(1000)
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				n := int64((g*37+i*101)%900 + 1)
				got, err := b.Acquire(context.Background(), n)
				if err != nil || got != n {
					t.Errorf("Acquire(%d) = %d, %v", n, got, err)
					return
				}
				h := held.Add(n)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				held.Add(-n)
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 1000 {
		t.Fatalf("held %d bytes at once, budget 1000", p)
	}
	if u := b.Used(); u != 0 {
		t.Fatalf("used %d after everything was released", u)
	}
}

// TestBudgetOrderAndCancel: a waiter that gives up leaves its place, and
// the one behind it is served; a request larger than the total takes the
// whole budget instead of waiting forever.
func TestBudgetOrderAndCancel(t *testing.T) {
	b := NewBudget(100)
	if got, _ := b.Acquire(context.Background(), 500); got != 100 {
		t.Fatalf("oversized Acquire took %d, want the whole budget", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := b.Acquire(ctx, 60); first <- err }()
	waitFor(t, func() bool { return b.Waiting() == 1 })
	second := make(chan int64, 1)
	go func() { n, _ := b.Acquire(context.Background(), 30); second <- n }()
	waitFor(t, func() bool { return b.Waiting() == 2 })
	cancel()
	if err := <-first; err == nil {
		t.Fatal("a cancelled Acquire returned no error")
	}
	select {
	case <-second:
		t.Fatal("served while the budget was spent")
	case <-time.After(50 * time.Millisecond):
	}
	b.Release(100)
	if n := <-second; n != 30 {
		t.Fatalf("second waiter got %d", n)
	}
	if u := b.Used(); u != 30 {
		t.Fatalf("used %d, want 30 (the cancelled waiter took nothing)", u)
	}
	if b.Waits() != 2 {
		t.Fatalf("waits = %d, want 2", b.Waits())
	}
}

// TestBudgetForce: forced bytes make later Acquires wait.
func TestBudgetForce(t *testing.T) {
	b := NewBudget(10)
	b.Force(15)
	got := make(chan struct{})
	go func() { b.Acquire(context.Background(), 1); close(got) }()
	waitFor(t, func() bool { return b.Waiting() == 1 })
	b.Release(15)
	<-got
}

func TestPoolBoundsIdleMemory(t *testing.T) {
	p := NewPool(3 << 20)
	var bufs [][]byte
	for i := 0; i < 8; i++ {
		b := p.Get(1 << 20)
		if len(b) != 1<<20 || cap(b) != 1<<20 {
			t.Fatalf("Get(1 MiB): len %d cap %d", len(b), cap(b))
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		p.Put(b)
	}
	if idle := p.Idle(); idle != 3<<20 {
		t.Fatalf("idle %d, want the 3 MiB bound", idle)
	}
	b := p.Get(700 << 10)
	if cap(b) != 1<<20 || p.Hits() != 1 {
		t.Fatalf("Get(700 KiB) did not reuse a 1 MiB buffer: cap %d hits %d", cap(b), p.Hits())
	}
	// Not ours: a buffer of an odd capacity, one too large.
	p.Put(make([]byte, 100<<10))
	p.Put(make([]byte, 2*MaxPooled))
	if idle := p.Idle(); idle != 2<<20 {
		t.Fatalf("idle %d after foreign Puts, want 2 MiB", idle)
	}
	if b := p.Get(MaxPooled + 1); len(b) != MaxPooled+1 {
		t.Fatal("Get beyond the largest class")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOffHeapPoolUnmapsWhatItDoesNotKeep(t *testing.T) {
	if !canMap {
		t.Skip("no anonymous mappings on this platform: NewOffHeapPool is NewPool, tested above")
	}
	p := NewOffHeapPool(2 << 20)
	var bufs [][]byte
	for i := 0; i < 5; i++ {
		b := p.Get(1 << 20)
		if len(b) != 1<<20 || cap(b) != 1<<20 {
			t.Fatalf("Get(1 MiB): len %d cap %d", len(b), cap(b))
		}
		for j := range b {
			if b[j] != 0 {
				t.Fatalf("fresh buffer %d not zeroed at %d", i, j)
			}
		}
		b[0], b[len(b)-1] = byte(i+1), byte(i+1) // the memory is writable
		bufs = append(bufs, b)
	}
	if n := p.Mapped(); n != 5 {
		t.Fatalf("mapped %d buffers, want the 5 lent", n)
	}
	// A heap slice of a class's exact size is not the pool's: it must
	// neither be kept nor unmapped.
	foreign := make([]byte, 1<<20)
	p.Put(foreign)
	foreign[0] = 1
	if idle := p.Idle(); idle != 0 {
		t.Fatalf("idle %d after a foreign Put, want 0", idle)
	}
	for _, b := range bufs {
		p.Put(b[:10]) // a shortened slice of a lent buffer is still it
	}
	if idle, n := p.Idle(), p.Mapped(); idle != 2<<20 || n != 2 {
		t.Fatalf("idle %d, mapped %d after giving back 5: want the 2 MiB bound kept and the rest unmapped", idle, n)
	}
	b := p.Get(900 << 10)
	if p.Hits() != 1 || cap(b) != 1<<20 {
		t.Fatalf("Get did not reuse an idle buffer: hits %d cap %d", p.Hits(), cap(b))
	}
	p.Close()
	if idle, n := p.Idle(), p.Mapped(); idle != 0 || n != 1 {
		t.Fatalf("after Close: idle %d, mapped %d; want 0 idle and only the lent buffer mapped", idle, n)
	}
	b[0] = 7 // still lent, still mapped
	p.Put(b)
	if n := p.Mapped(); n != 0 {
		t.Fatalf("a buffer given back after Close stayed mapped (%d)", n)
	}
	// After Close the pool still lends, and takes back by unmapping.
	c := p.Get(64 << 10)
	c[0] = 1
	p.Put(c)
	if idle, n := p.Idle(), p.Mapped(); idle != 0 || n != 0 {
		t.Fatalf("after Close, Get+Put left idle %d, mapped %d", idle, n)
	}
}

// TestPoolTrim: a buffer idle through a whole Trim period is released (and
// unmapped, off the heap); one reused in between stays.
func TestPoolTrim(t *testing.T) {
	for _, p := range []*Pool{NewPool(64 << 20), NewOffHeapPool(64 << 20)} {
		a, b := p.Get(1<<20), p.Get(1<<20)
		p.Put(a)
		p.Put(b)
		if p.Idle() != 2<<20 {
			t.Fatalf("idle %d after two puts", p.Idle())
		}
		p.Trim() // both were given back in this period: kept
		if p.Idle() != 2<<20 {
			t.Fatalf("idle %d after the first trim, want both kept", p.Idle())
		}
		p.Put(p.Get(1 << 20)) // one is used again
		p.Trim()
		if p.Idle() != 1<<20 {
			t.Fatalf("idle %d after the second trim, want only the reused buffer", p.Idle())
		}
		if p.offHeap && p.Mapped() != 1 {
			t.Fatalf("%d buffers mapped, want 1", p.Mapped())
		}
		p.Trim()
		if p.Idle() != 0 || p.offHeap && p.Mapped() != 0 {
			t.Fatalf("idle %d, mapped %d after a period without use", p.Idle(), p.Mapped())
		}
		if got := p.Get(1 << 20); len(got) != 1<<20 {
			t.Fatalf("Get after trims: %d bytes", len(got))
		}
	}
}

// TestOffHeapPoolLargeBuffers: a buffer above the largest class is mapped
// off the heap; given back, it is kept as the one spare, which the next
// large Get that fits reuses and a larger buffer replaces; Trim releases
// the spare once idle through a period, Close at once; a heap slice that
// large is not the pool's.
func TestOffHeapPoolLargeBuffers(t *testing.T) {
	if !canMap {
		t.Skip("no anonymous mappings on this platform")
	}
	p := NewOffHeapPool(64 << 20)
	n := MaxPooled + 3<<20 + 1
	b := p.Get(n)
	if len(b) != n || cap(b)%(1<<minPooledShift) != 0 {
		t.Fatalf("Get(%d): len %d cap %d", n, len(b), cap(b))
	}
	b[0], b[n-1] = 1, 1 // writable to the end
	if p.Mapped() != 1 || p.Lent() != 1 {
		t.Fatalf("mapped %d lent %d, want the large buffer", p.Mapped(), p.Lent())
	}
	foreign := make([]byte, n)
	p.Put(foreign)
	foreign[0] = 2
	if p.Mapped() != 1 || p.Idle() != 0 {
		t.Fatalf("a foreign large Put changed the pool: mapped %d idle %d", p.Mapped(), p.Idle())
	}
	p.Put(b[:5])
	if p.Mapped() != 1 || p.Lent() != 0 || p.Idle() != int64(cap(b)) {
		t.Fatalf("a large buffer given back: mapped %d lent %d idle %d, want it kept as the spare", p.Mapped(), p.Lent(), p.Idle())
	}

	// A smaller large answer reuses the spare, a larger one cannot.
	hits := p.Hits()
	c := p.Get(MaxPooled + 1)
	if p.Hits() != hits+1 || &c[:1][0] != &b[:1][0] || len(c) != MaxPooled+1 || p.Idle() != 0 {
		t.Fatalf("Get below the spare's size: hits %d (was %d), same memory %v, len %d, idle %d", p.Hits(), hits, &c[:1][0] == &b[:1][0], len(c), p.Idle())
	}
	d := p.Get(n + 5<<20)
	if &d[:1][0] == &c[:1][0] || p.Mapped() != 2 {
		t.Fatalf("a larger Get while the spare is lent: mapped %d, want a second mapping", p.Mapped())
	}
	// Given back, the larger stays and the smaller is unmapped,
	// whichever comes back first.
	p.Put(c)
	p.Put(d)
	if p.Mapped() != 1 || p.Idle() != int64(cap(d)) {
		t.Fatalf("after both came back: mapped %d idle %d, want only the larger kept (%d)", p.Mapped(), p.Idle(), cap(d))
	}
	e := p.Get(n)
	if &e[:1][0] != &d[:1][0] {
		t.Fatal("the larger spare was not reused")
	}
	p.Put(e)

	p.Trim() // given back in this period: kept
	if p.Mapped() != 1 {
		t.Fatalf("mapped %d after the first trim, want the spare kept", p.Mapped())
	}
	p.Trim() // idle through a whole period: released
	if p.Mapped() != 0 || p.Idle() != 0 {
		t.Fatalf("after an idle period: mapped %d idle %d, want the spare released", p.Mapped(), p.Idle())
	}

	f := p.Get(n)
	p.Put(f)
	p.Close()
	if p.Mapped() != 0 || p.Idle() != 0 {
		t.Fatalf("after Close: mapped %d idle %d", p.Mapped(), p.Idle())
	}
	g := p.Get(n) // after Close: lent, and unmapped when given back
	g[n-1] = 3
	p.Put(g)
	if p.Mapped() != 0 {
		t.Fatalf("a large buffer given back after Close stayed mapped (%d)", p.Mapped())
	}
}
