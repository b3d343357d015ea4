package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fdFS is a MemFS that counts the descriptors open on it, can refuse opens
// beyond a limit with EMFILE as a process out of descriptors would, and can
// hold reads and syncs until a test lets them go.
type fdFS struct {
	*MemFS
	limit int64 // OpenRW fails with EMFILE while this many are open; 0: no limit

	open, highWater, opens atomic.Int64

	mu        sync.Mutex
	gate      chan struct{} // when set, ReadAt and Sync of gated names wait on it
	gated     string
	entered   chan string // told (without blocking) that a gated call is waiting
	instances map[string][]*fdFile
}

func newFdFS() *fdFS { return &fdFS{MemFS: NewMem(), instances: map[string][]*fdFile{}} }

type fdFile struct {
	File
	fs     *fdFS
	name   string
	closed atomic.Bool
	writes atomic.Int64
	syncs  atomic.Int64
}

func (d *fdFS) OpenRW(name string) (File, error) {
	// The count and the check are one step, as in the kernel.
	n := d.open.Add(1)
	if d.limit > 0 && n > d.limit {
		d.open.Add(-1)
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
	}
	f, err := d.MemFS.OpenRW(name)
	if err != nil {
		d.open.Add(-1)
		return nil, err
	}
	d.opens.Add(1)
	for {
		hw := d.highWater.Load()
		if n <= hw || d.highWater.CompareAndSwap(hw, n) {
			break
		}
	}
	ff := &fdFile{File: f, fs: d, name: name}
	d.mu.Lock()
	d.instances[name] = append(d.instances[name], ff)
	d.mu.Unlock()
	return ff, nil
}

func (d *fdFS) wait(name string) {
	d.mu.Lock()
	g, gated, entered := d.gate, d.gated, d.entered
	d.mu.Unlock()
	if g != nil && strings.Contains(name, gated) {
		if entered != nil {
			select {
			case entered <- name:
			default:
			}
		}
		<-g
	}
}

// hold makes ReadAt and Sync of names containing substr wait until the
// returned function is called; entered hears of each waiting call.
func (d *fdFS) hold(substr string) (entered chan string, release func()) {
	g := make(chan struct{})
	entered = make(chan string, 16)
	d.mu.Lock()
	d.gate, d.gated, d.entered = g, substr, entered
	d.mu.Unlock()
	var once sync.Once
	return entered, func() {
		once.Do(func() {
			d.mu.Lock()
			d.gate = nil
			d.mu.Unlock()
			close(g)
		})
	}
}

func (f *fdFile) check() error {
	if f.closed.Load() {
		return fmt.Errorf("%s: used after close", f.name)
	}
	return nil
}

func (f *fdFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.wait(f.name)
	if err := f.check(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(b, off)
}

func (f *fdFile) Write(b []byte) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	f.writes.Add(1)
	return f.File.Write(b)
}

func (f *fdFile) Sync() error {
	f.fs.wait(f.name)
	if err := f.check(); err != nil {
		return err
	}
	f.syncs.Add(1)
	return f.File.Sync()
}

func (f *fdFile) Close() error {
	if f.closed.Swap(true) {
		return errors.New("closed twice")
	}
	f.fs.open.Add(-1)
	return f.File.Close()
}

func (d *fdFS) instancesOf(name string) []*fdFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*fdFile(nil), d.instances[name]...)
}

// files creates n files, each holding its own name repeated, and opens
// them through p.
func files(t *testing.T, d *fdFS, p *Pool, n int) ([]*PoolFile, [][]byte) {
	t.Helper()
	var hs []*PoolFile
	var data [][]byte
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		b := bytes.Repeat([]byte(name), 100)
		if err := WriteFileAtomic(d.MemFS, name, b); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, p.Open(name))
		data = append(data, b)
	}
	return hs, data
}

func TestPoolBoundUnderConcurrentReaders(t *testing.T) {
	d := newFdFS()
	const limit = 4
	p := NewPool(d, limit)
	hs, data := files(t, d, p, 20)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 40)
			for range 2000 {
				i := rng.IntN(len(hs))
				off := rng.Int64N(int64(len(data[i]) - len(buf)))
				if _, err := hs[i].ReadAt(buf, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, data[i][off:off+int64(len(buf))]) {
					errs <- fmt.Errorf("file %d at %d: wrong bytes", i, off)
					return
				}
				if n := p.Stats().Open; n > limit {
					errs <- fmt.Errorf("%d descriptors open, limit %d", n, limit)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if hw := d.highWater.Load(); hw > limit {
		t.Fatalf("%d descriptors were open at once, limit %d", hw, limit)
	}
	st := p.Stats()
	if st.Opens != d.opens.Load() || st.Evictions == 0 || st.Open != d.open.Load() {
		t.Fatalf("stats %+v; the filesystem saw %d opens, %d open", st, d.opens.Load(), d.open.Load())
	}
	for _, h := range hs {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if d.open.Load() != 0 || p.Stats().Open != 0 {
		t.Fatalf("%d descriptors open after closing every file", d.open.Load())
	}
}

// A read in flight holds its descriptor: an open that needs room waits for
// it to end instead of closing it, and the limit holds.
func TestPoolInFlightReadKeepsDescriptor(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 1)
	hs, _ := files(t, d, p, 2)
	entered, release := d.hold("f000")
	done := make(chan error, 1)
	go func() {
		_, err := hs[0].ReadAt(make([]byte, 10), 0)
		done <- err
	}()
	<-entered
	second := make(chan error, 1)
	go func() {
		_, err := hs[1].ReadAt(make([]byte, 10), 0)
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("second read ran while the only descriptor was in use (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if hw := d.highWater.Load(); hw != 1 {
		t.Fatalf("%d descriptors open at once, limit 1", hw)
	}
	if n := len(d.instancesOf("f000")); n != 1 {
		t.Fatalf("f000 opened %d times", n)
	}
}

func TestPoolDirtyFileKeepsDescriptor(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 2)
	hs, _ := files(t, d, p, 6)
	w := hs[0]
	if _, err := w.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	readAround := func() {
		for range 3 {
			for _, h := range hs[1:] {
				if _, err := h.ReadAt(make([]byte, 4), 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	readAround()
	if err := w.Truncate(10); err != nil {
		t.Fatal(err)
	}
	readAround()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	inst := d.instancesOf("f000")
	if len(inst) != 1 || inst[0].closed.Load() || inst[0].writes.Load() != 1 || inst[0].syncs.Load() != 1 {
		t.Fatalf("the write and the sync did not go through one descriptor that stayed open: %d instances", len(inst))
	}
	// Only one of the two places was left for the others while it was dirty.
	if hw := d.highWater.Load(); hw > 2 {
		t.Fatalf("%d descriptors open at once, limit 2", hw)
	}
	readAround()
	if !inst[0].closed.Load() {
		t.Fatal("a clean, idle descriptor was not evicted")
	}
	if size, err := w.Size(); err != nil || size != 10 {
		t.Fatalf("size after reopening: %d, %v", size, err)
	}
}

// A write that starts while a Sync runs is not covered by it: the file
// stays dirty.
func TestPoolWriteDuringSyncStaysDirty(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 1)
	hs, _ := files(t, d, p, 2)
	w := hs[0]
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	entered, release := d.hold("f000")
	synced := make(chan error, 1)
	go func() { synced <- w.Sync() }()
	<-entered
	if _, err := w.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if _, err := hs[1].ReadAt(make([]byte, 4), 0); err != nil {
		t.Fatal(err)
	}
	if d.instancesOf("f000")[0].closed.Load() {
		t.Fatal("a file written during its Sync was evicted before another Sync")
	}
	// Every place is held by a dirty file: the pool goes over its limit
	// rather than wait for a Sync.
	if hw := d.highWater.Load(); hw != 2 {
		t.Fatalf("high water %d, want 2", hw)
	}
	// The Sync that cleans it brings the pool back under its limit.
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := p.Stats().Open; n != 1 {
		t.Fatalf("%d open after the Sync, limit 1", n)
	}
	for _, h := range []*PoolFile{hs[1], hs[0], hs[1]} {
		if _, err := h.ReadAt(make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Stats().Open; n != 1 {
		t.Fatalf("%d open, limit 1", n)
	}
}

func TestPoolCloseWhileReading(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 2)
	hs, data := files(t, d, p, 1)
	h := hs[0]
	entered, release := d.hold("f000")
	got := make(chan error, 1)
	buf := make([]byte, 8)
	go func() {
		_, err := h.ReadAt(buf, 4)
		got <- err
	}()
	<-entered
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	inst := d.instancesOf("f000")
	if inst[0].closed.Load() {
		t.Fatal("Close closed the descriptor under a running read")
	}
	release()
	if err := <-got; err != nil || !bytes.Equal(buf, data[0][4:12]) {
		t.Fatalf("read during Close: %q, %v", buf, err)
	}
	if !inst[0].closed.Load() || d.open.Load() != 0 || p.Stats().Open != 0 {
		t.Fatal("the descriptor stayed open after the read ended")
	}
	if _, err := h.ReadAt(buf, 0); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if err := h.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// Out of descriptors, the pool closes its idle ones and tries once more;
// when that does not help, the error says what to raise.
func TestPoolRetriesAfterEMFILE(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 10)
	hs, _ := files(t, d, p, 4)
	d.limit = 3 // the process's limit, below the pool's
	buf := make([]byte, 4)
	for _, h := range hs[:3] {
		if _, err := h.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hs[3].ReadAt(buf, 0); err != nil {
		t.Fatalf("no retry after evicting idle descriptors: %v", err)
	}
	if st := p.Stats(); st.Evictions != 3 || st.Open != 1 {
		t.Fatalf("stats %+v, want 3 evictions and 1 open", st)
	}
	// Nothing idle to give back: three reads in flight hold every
	// descriptor the process may have.
	entered, release := d.hold("f00")
	var wg sync.WaitGroup
	for _, h := range hs[:3] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.ReadAt(make([]byte, 1), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	for range 3 {
		<-entered
	}
	_, err := hs[3].ReadAt(buf, 0)
	release()
	wg.Wait()
	if err == nil {
		// f003's descriptor was idle and evicted for the three; its read
		// had no room left.
		t.Fatal("open beyond the process's limit succeeded")
	}
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "ulimit") {
		t.Fatalf("error %v: want EMFILE saying what to raise", err)
	}
	// Once the reads are done the file opens again.
	if _, err := hs[3].ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
}

func TestPoolPinned(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 1)
	hs, _ := files(t, d, p, 3)
	f, err := d.OpenRW("active")
	if err != nil {
		t.Fatal(err)
	}
	a := p.Adopt("active", f)
	if err := hs[0].Pin(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, h := range hs[1:] {
			if _, err := h.ReadAt(make([]byte, 1), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d.instancesOf("f000")[0].closed.Load() || f.(*fdFile).closed.Load() {
		t.Fatal("a pinned descriptor was evicted")
	}
	// Pinned files are outside the limit: two pinned plus one.
	if n := p.Stats().Open; n != 3 {
		t.Fatalf("%d open, want 3", n)
	}
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	a.Unpin()
	hs[0].Unpin()
	if n := p.Stats().Open; n != 1 {
		t.Fatalf("%d open after unpinning, limit 1", n)
	}
	if b, err := ReadFile(d.MemFS, "active"); err != nil || string(b) != "x" {
		t.Fatalf("adopted file holds %q, %v", b, err)
	}
	if _, err := a.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatalf("reading an adopted file after its eviction: %v", err)
	}
	if inst := d.instancesOf("active"); len(inst) != 2 {
		t.Fatalf("the adopted file was opened %d times, want again once", len(inst))
	}
	for _, h := range append(hs, a) {
		h.Close()
	}
	if d.open.Load() != 0 {
		t.Fatalf("%d open after Close", d.open.Load())
	}
}

// dropFile records the cache drops asked of it.
type dropFile struct {
	*fdFile
	drops *[][2]int64
}

func (f dropFile) DropCache(off, n int64) error {
	*f.drops = append(*f.drops, [2]int64{off, n})
	return nil
}

type dropFS struct {
	*fdFS
	drops [][2]int64
}

func (d *dropFS) OpenRW(name string) (File, error) {
	f, err := d.fdFS.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return dropFile{f.(*fdFile), &d.drops}, nil
}

// DropCache goes through to the descriptor, which is opened for it if it
// was evicted.
func TestPoolDropCache(t *testing.T) {
	d := &dropFS{fdFS: newFdFS()}
	p := NewPool(d, 1)
	hs, _ := files(t, d.fdFS, p, 2)
	for _, h := range []*PoolFile{hs[0], hs[1], hs[0]} {
		if err := DropCache(h, 10, 20); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.drops) != 3 || d.drops[2] != [2]int64{10, 20} {
		t.Fatalf("drops %v", d.drops)
	}
	if n := len(d.instancesOf("f000")); n != 2 {
		t.Fatalf("f000 opened %d times, want 2", n)
	}
}

// DropCache through the pool reaches the operating system's file.
func TestPoolDropCacheOS(t *testing.T) {
	dir := t.TempDir()
	name := dir + "/seg"
	if err := WriteFileAtomic(Default, name, make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	p := NewPool(Default, 1)
	h := p.Open(name)
	defer h.Close()
	if _, ok := File(h).(CacheDropper); !ok {
		t.Fatal("a pooled file is no CacheDropper")
	}
	if err := DropCache(h, 0, 1<<16); err != nil {
		t.Fatal(err)
	}
	if n := p.Stats().Open; n != 1 {
		t.Fatalf("%d open", n)
	}
}

// TestVolumeSyncCleansPooledFiles: a volume sync tells pooled files their
// writes are durable, so that dirty files over the limit give their
// descriptors back; a file written after the sync's mark stays dirty.
func TestVolumeSyncCleansPooledFiles(t *testing.T) {
	d := newFdFS()
	p := NewPool(d, 1)
	a, b := p.Open("a"), p.Open("b")
	for _, f := range []*PoolFile{a, b} {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.open.Load(); n != 2 {
		t.Fatalf("%d descriptors open with two dirty files, want 2 (dirty files keep theirs)", n)
	}
	ma, mb := SyncMark(a), SyncMark(b)
	if _, err := b.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	SyncedTo(a, ma)
	SyncedTo(b, mb)
	if n := d.open.Load(); n != 1 {
		t.Fatalf("%d descriptors open after the volume sync, want 1", n)
	}
	if _, err := b.ReadAt(make([]byte, 2), 0); err != nil {
		t.Fatal(err)
	}
	if a.f != nil || b.f == nil {
		t.Fatalf("open after the volume sync: a %v, b %v; want only b, written since", a.f != nil, b.f != nil)
	}
}
