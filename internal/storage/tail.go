package storage

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/moonmq/moonmq/internal/vfs"
)

// An active segment's small appends wait in memory until something needs
// them in the file: the next sync, a read of them, a larger append, a
// truncation or the segment's end. One write then carries them all. Each
// write into the page cache pays for a system call and for finding,
// locking and dirtying every page it touches (ext4's buffer heads too),
// and small appends to one partition share pages: with many producers,
// transactions' markers or many partitions most batches are small, and a
// partition with eight appends between two syncs makes one write that
// touches each page once instead of eight that touch the last page
// again and again (docs/DURABILITY.md has the measurements).
//
// Only appends into space reserved ahead (Log.reserve) wait: their blocks
// are allocated, so writing them later cannot fail for want of space, and
// a disk filling up is still refused at the append that finds it full.
// Should the later write fail all the same (an I/O error), the log fails
// as after a failed fsync: nothing that waited was acknowledged, since
// acknowledgements wait for the sync, which writes the tail first.
const (
	// tailBatchMax is the largest batch that waits; larger ones are
	// written at once (after the tail before them).
	tailBatchMax = 16 << 10
	// tailMax bounds one segment's tail: an append that would grow it
	// past this writes it first.
	tailMax = 64 << 10
	// tailsMax bounds the tails held at once across all logs (tailMax
	// each), so that thousands of partitions with a few small appends
	// each cannot hold much memory: past it, appends are written at once.
	tailsMax = 512
)

var (
	tailBufs  = sync.Pool{New: func() any { b := make([]byte, 0, tailMax); return &b }}
	tailsHeld atomic.Int64
	tailBytes atomic.Int64 // appended to tails and not yet written or dropped
)

// TailStats are the process's appends waiting in memory for their write.
type TailStats struct {
	Tails int64 // segments whose tail holds appends (at most 512)
	Bytes int64 // bytes those appends hold (at most 64 KiB a tail)
}

// Tails reports the appends waiting in memory across every log.
func Tails() TailStats {
	return TailStats{Tails: tailsHeld.Load(), Bytes: tailBytes.Load()}
}

// tail is a segment's unwritten appends. Only the appender (holding
// Log.amu) adds to it; whoever needs the bytes in the file writes them
// (flush): the appender, a sync, a reader. The appender writes a larger
// batch itself only after flushing, and nothing is added meanwhile, so the
// file's own write position is always where buf belongs.
type tail struct {
	mu  sync.Mutex
	buf *[]byte // nil while empty
	at  int64   // file position of the first byte of buf
	err error   // sticky: a failed write of the tail
}

// add appends batch, which belongs at file position pos, to the tail and
// reports whether it did; if not, the caller must flush and write it.
func (t *tail) add(batch []byte, pos int64) bool {
	if len(batch) > tailBatchMax {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false
	}
	if t.buf == nil {
		if tailsHeld.Add(1) > tailsMax {
			tailsHeld.Add(-1)
			return false
		}
		t.buf, t.at = tailBufs.Get().(*[]byte), pos
	}
	if len(*t.buf)+len(batch) > tailMax || t.at+int64(len(*t.buf)) != pos {
		return false
	}
	*t.buf = append(*t.buf, batch...)
	tailBytes.Add(int64(len(batch)))
	return true
}

// flush writes the tail to f, the segment's file, if it holds anything.
func (t *tail) flush(f io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushLocked(f)
}

// flushFor is flush when the tail holds any of the n bytes at off.
func (t *tail) flushFor(off int64, n int, f io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.buf == nil || off+int64(n) <= t.at {
		return t.err
	}
	return t.flushLocked(f)
}

func (t *tail) flushLocked(f io.Writer) error {
	if t.err != nil || t.buf == nil {
		return t.err
	}
	if _, err := f.Write(*t.buf); err != nil {
		t.err = err
		return err
	}
	t.release()
	return nil
}

// release drops the tail's bytes; the caller holds mu or owns t.
func (t *tail) release() {
	if t.buf == nil {
		return
	}
	tailBytes.Add(-int64(len(*t.buf)))
	*t.buf = (*t.buf)[:0]
	tailBufs.Put(t.buf)
	t.buf = nil
	tailsHeld.Add(-1)
}

// discard drops the tail unwritten: its segment is being closed or removed.
func (t *tail) discard() {
	t.mu.Lock()
	t.release()
	t.mu.Unlock()
}

// tailReader reads a segment's file, writing its tail first when a read
// covers any of it.
type tailReader struct {
	t *tail
	f vfs.File
}

func (r tailReader) ReadAt(p []byte, off int64) (int, error) {
	if err := r.t.flushFor(off, len(p), r.f); err != nil {
		return 0, err
	}
	return r.f.ReadAt(p, off)
}
