package vfs

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
)

// Pool bounds how many descriptors the files opened through it hold at
// once, so that a process with many rarely read files (the rolled segments
// of thousands of partitions) does not run out of descriptors. A PoolFile
// opens its descriptor when an operation needs it and keeps it in a
// least-recently-used list; when the list is full, the least recently used
// descriptor that no operation is using and that holds no unsynced change
// is closed. When every descriptor is in use, an open waits for one to be
// released; when they are all held by dirty files that nothing uses, it
// goes over the limit instead, since only a Sync could free them. When the
// process itself is out of descriptors (EMFILE, ENFILE), the pool closes
// every idle one and tries once more.
//
// Files must keep their names while they are open through the pool: a
// descriptor opened again after an eviction finds the file by name. Renaming
// another file over one, or removing it, is safe only after Close, or while
// the file is pinned (which keeps its descriptor, and so the old file, open).
type Pool struct {
	fs  FS
	max int

	mu   sync.Mutex
	cond sync.Cond // signalled when a descriptor closes, is freed by Pin or an opening ends
	lru  list.List // of *PoolFile: unpinned files with a descriptor, most recently used first
	// held counts the descriptors of unpinned files, open or being opened;
	// max bounds it.
	held int

	open      atomic.Int64
	opens     atomic.Int64
	evictions atomic.Int64
}

// NewPool returns a pool opening files of fsys (with OpenRW) that keeps at
// most limit descriptors of unpinned files open (at least 1).
func NewPool(fsys FS, limit int) *Pool {
	p := &Pool{fs: fsys, max: max(limit, 1)}
	p.cond.L = &p.mu
	return p
}

// FS is the filesystem the pool opens files of.
func (p *Pool) FS() FS { return p.fs }

// PoolStats are a pool's counters.
type PoolStats struct {
	// Limit is the most descriptors unpinned files may hold.
	Limit int
	// Open is the number of descriptors open through the pool now, pinned
	// files included.
	Open int64
	// Opens counts the descriptors the pool opened (Adopt opens none).
	Opens int64
	// Evictions counts descriptors closed to make room.
	Evictions int64
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{Limit: p.max, Open: p.open.Load(), Opens: p.opens.Load(), Evictions: p.evictions.Load()}
}

// Open returns a handle on name that opens its descriptor (read-write, as
// FS.OpenRW) when first used, so it cannot fail here.
func (p *Pool) Open(name string) *PoolFile {
	return &PoolFile{p: p, name: name}
}

// Adopt hands an open file over to the pool, pinned: it keeps f's
// descriptor, outside the limit, until Unpin.
func (p *Pool) Adopt(name string, f File) *PoolFile {
	p.open.Add(1)
	return &PoolFile{p: p, name: name, f: f, pinned: true}
}

// PoolFile is a File whose descriptor the pool may close while nothing uses
// it and open again when something does. Every operation holds the
// descriptor for its duration, so an eviction never closes one under it.
//
// A Write or Truncate makes the file dirty until a Sync that began after it
// succeeds, and a dirty file keeps its descriptor: a Sync must go to the
// descriptor that the writes went through, since an error reported by the
// kernel for writeback of the file can be lost when that descriptor is
// closed, and a Sync through a new one would then succeed.
type PoolFile struct {
	p    *Pool
	name string

	// Guarded by p.mu.
	f       File // nil while the descriptor is closed
	elem    *list.Element
	refs    int    // operations running
	gen     uint64 // counts operations that made the file dirty
	dirty   bool
	pinned  bool
	opening bool
	counted bool // the descriptor counts in p.held
	closed  bool
}

// errPoolClosed is what operations on a closed PoolFile return.
var errPoolClosed = fmt.Errorf("vfs: pooled file: %w", fs.ErrClosed)

// acquire returns the file's descriptor, opening it if needed, and holds
// it until release. A write marks the file dirty. gen is the write count
// when the operation began.
func (h *PoolFile) acquire(write bool) (File, uint64, error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := h.readyLocked(); err != nil {
		return nil, 0, err
	}
	h.refs++
	if write {
		h.gen++
		h.dirty = true
	}
	if h.elem != nil {
		p.lru.MoveToFront(h.elem)
	}
	return h.f, h.gen, nil
}

// readyLocked makes sure h has a descriptor: it waits for an opening under
// way, waits for room below the limit or makes it, and opens one. The
// caller holds p.mu, which is released while the file is opened.
func (h *PoolFile) readyLocked() error {
	p := h.p
	for {
		switch {
		case h.closed:
			return errPoolClosed
		case h.f != nil:
			return nil
		case h.opening:
			p.cond.Wait()
			continue
		}
		if !h.pinned && p.held >= p.max && p.makeRoomLocked() {
			// Something changed while waiting; look again.
			continue
		}
		return h.openLocked()
	}
}

// makeRoomLocked evicts one idle descriptor when the limit is reached. When
// none can go it waits for an operation to end and returns true; it returns
// false when waiting would be in vain because every descriptor is held by
// a dirty file that nothing is using: the limit is exceeded then rather
// than waiting for a Sync that may never come.
func (p *Pool) makeRoomLocked() (waited bool) {
	if p.evictLocked(1) > 0 {
		return true
	}
	busy := false
	for e := p.lru.Front(); e != nil && !busy; e = e.Next() {
		h := e.Value.(*PoolFile)
		busy = h.refs > 0 || h.opening
	}
	// A file closed while in use, or being opened, is not in the list but
	// still holds its place.
	if !busy && p.held <= p.lru.Len() {
		return false
	}
	p.cond.Wait()
	return true
}

// openLocked opens h's descriptor; the caller holds p.mu and has made room.
func (h *PoolFile) openLocked() error {
	p := h.p
	h.opening = true
	if !h.pinned {
		h.counted = true
		p.held++
	}
	p.mu.Unlock()
	f, err := p.fs.OpenRW(h.name)
	if tooManyFiles(err) {
		// The process is out of descriptors: give back every idle one and
		// try once more.
		p.mu.Lock()
		n := p.evictLocked(-1)
		p.mu.Unlock()
		if f, err = p.fs.OpenRW(h.name); tooManyFiles(err) {
			err = fmt.Errorf("vfs: opening %s with %d idle descriptors closed: %w; raise the open-file limit (ulimit -n, LimitNOFILE) or lower the pool's limit (%d)", h.name, n, err, p.max)
		}
	}
	p.mu.Lock()
	h.opening = false
	p.cond.Broadcast()
	if err == nil {
		p.opens.Add(1)
		p.open.Add(1)
		h.f = f
		if h.closed {
			// Closed while opening: nothing may use it any more.
			_ = h.dropLocked()
			return errPoolClosed
		}
		if h.counted {
			h.elem = p.lru.PushFront(h)
		}
		return nil
	}
	if h.counted {
		h.counted = false
		p.held--
	}
	return err
}

// dropLocked closes h's descriptor. It does so holding p.mu, so that the
// place it frees is taken only once the descriptor is gone: the limit holds
// for the process's descriptors, not only for the pool's count of them.
func (h *PoolFile) dropLocked() error {
	p := h.p
	err := h.f.Close()
	if h.elem != nil {
		p.lru.Remove(h.elem)
		h.elem = nil
	}
	if h.counted {
		h.counted = false
		p.held--
	}
	h.f = nil
	p.open.Add(-1)
	p.cond.Broadcast()
	return err
}

// evictLocked closes up to n (all when n < 0) idle, clean descriptors from
// the least recently used end and returns how many it closed.
func (p *Pool) evictLocked(n int) int {
	closed := 0
	for e := p.lru.Back(); e != nil && closed != n; {
		prev := e.Prev()
		h := e.Value.(*PoolFile)
		if h.refs == 0 && !h.dirty {
			// A clean descriptor has nothing to report on close.
			_ = h.dropLocked()
			p.evictions.Add(1)
			closed++
		}
		e = prev
	}
	return closed
}

// release ends an operation that acquire began; synced reports a
// successful Sync, which cleans the file unless something wrote since the
// Sync began (gen).
func (h *PoolFile) release(gen uint64, synced bool) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	h.refs--
	if synced {
		h.cleanLocked(gen)
	}
	if h.refs == 0 {
		if h.closed && h.f != nil {
			// Close's caller has been told; nobody is left to hear this.
			_ = h.dropLocked()
		} else if h.counted {
			// It may be the descriptor someone waits to evict.
			p.cond.Broadcast()
		}
	}
}

// syncMark implements syncTracker: the write count before a volume sync.
func (h *PoolFile) syncMark() uint64 {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.gen
}

// syncedTo implements syncTracker: a volume sync made every write before
// mark durable, and the volume's descriptor, not the file's, heard of
// any writeback error, so the file is clean unless written since.
func (h *PoolFile) syncedTo(mark uint64) {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	h.cleanLocked(mark)
}

// cleanLocked marks h clean after a sync that began at write count gen,
// unless it was written since.
func (h *PoolFile) cleanLocked(gen uint64) {
	if h.gen != gen || !h.dirty {
		return
	}
	h.dirty = false
	// Dirty files may have pushed the pool over its limit.
	if over := h.p.held - h.p.max; over > 0 {
		h.p.evictLocked(over)
	}
}

func tooManyFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Name is the file's name.
func (h *PoolFile) Name() string { return h.name }

// ReadAt implements File.
func (h *PoolFile) ReadAt(b []byte, off int64) (int, error) {
	f, g, err := h.acquire(false)
	if err != nil {
		return 0, err
	}
	defer h.release(g, false)
	return f.ReadAt(b, off)
}

// Write implements File.
func (h *PoolFile) Write(b []byte) (int, error) {
	f, g, err := h.acquire(true)
	if err != nil {
		return 0, err
	}
	defer h.release(g, false)
	return f.Write(b)
}

// Preallocate implements Preallocator for a pinned file only: a closed
// and reopened descriptor would append after the reserved space again.
func (h *PoolFile) Preallocate(size int64) error {
	h.p.mu.Lock()
	pinned := h.pinned
	h.p.mu.Unlock()
	if !pinned {
		return ErrNoPreallocate
	}
	f, g, err := h.acquire(true)
	if err != nil {
		return err
	}
	defer h.release(g, false)
	return Preallocate(f, size)
}

// Truncate implements File.
func (h *PoolFile) Truncate(size int64) error {
	f, g, err := h.acquire(true)
	if err != nil {
		return err
	}
	defer h.release(g, false)
	return f.Truncate(size)
}

// Sync implements File.
func (h *PoolFile) Sync() error {
	f, g, err := h.acquire(false)
	if err != nil {
		return err
	}
	err = f.Sync()
	h.release(g, err == nil)
	return err
}

// Size implements File.
func (h *PoolFile) Size() (int64, error) {
	f, g, err := h.acquire(false)
	if err != nil {
		return 0, err
	}
	defer h.release(g, false)
	return f.Size()
}

// DropCache implements CacheDropper through the file's descriptor (opening
// it if it was evicted: the kernel needs one to take the advice).
func (h *PoolFile) DropCache(off, n int64) error {
	f, g, err := h.acquire(false)
	if err != nil {
		return err
	}
	defer h.release(g, false)
	return DropCache(f, off, n)
}

// Pin opens the file's descriptor if needed and keeps it open, outside the
// pool's limit, until Unpin: for a file written all the time, and for one
// whose name is about to be taken by another file.
func (h *PoolFile) Pin() error {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for h.opening {
		p.cond.Wait()
	}
	if h.closed {
		return errPoolClosed
	}
	h.pinned = true
	if err := h.readyLocked(); err != nil {
		h.pinned = false
		return err
	}
	if h.elem != nil {
		p.lru.Remove(h.elem)
		h.elem = nil
	}
	if h.counted {
		h.counted = false
		p.held--
		p.cond.Broadcast()
	}
	return nil
}

// Unpin puts a pinned file's descriptor under the pool's limit again,
// evicting idle ones if that exceeds it.
func (h *PoolFile) Unpin() {
	p := h.p
	p.mu.Lock()
	for h.opening {
		p.cond.Wait()
	}
	if !h.pinned || h.closed {
		p.mu.Unlock()
		return
	}
	h.pinned = false
	if h.f != nil {
		h.counted = true
		p.held++
		h.elem = p.lru.PushFront(h)
		if over := p.held - p.max; over > 0 {
			p.evictLocked(over)
		}
	}
	p.mu.Unlock()
}

// Close implements File: the file leaves the pool, and its descriptor is
// closed now or, when operations are running, as the last one ends (its
// error is then lost, so sync what matters first).
func (h *PoolFile) Close() error {
	p := h.p
	p.mu.Lock()
	if h.closed {
		p.mu.Unlock()
		return errPoolClosed
	}
	h.closed = true
	// Whoever waits to open it can give up.
	p.cond.Broadcast()
	if h.elem != nil {
		p.lru.Remove(h.elem)
		h.elem = nil
	}
	var err error
	if h.refs == 0 && h.f != nil {
		err = h.dropLocked()
	}
	p.mu.Unlock()
	return err
}
