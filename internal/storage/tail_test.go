package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// onDisk returns the n bytes at pos of the active segment's file, read
// through a descriptor of its own (what a crash would find after a sync).
func onDisk(t *testing.T, l *Log, pos int64, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(segName(l.dir, l.active().base, logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < pos+int64(n) {
		return make([]byte, n) // beyond the file: not written
	}
	return b[pos : pos+int64(n)]
}

// syncer returns l's Sync, or a sync of dir's volume when volume is set
// (as the broker syncs its partitions).
func syncer(t *testing.T, l *Log, dir string, volume bool) func() (int64, error) {
	t.Helper()
	if !volume {
		return l.Sync
	}
	v, err := OpenVolume(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return func() (int64, error) {
		r := v.Sync([]*Log{l})[0]
		return r.Durable, r.Err
	}
}

// waiting reports whether the tail holds anything.
func (t *tail) waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf != nil
}

func needReserve(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only appends into reserved space wait, and space is reserved only on Linux (fallocate)")
	}
}

// A small append into reserved space waits in memory until a read, a
// sync, a truncation or a close needs it in the file.
func TestSmallAppendsWaitForTheirWrite(t *testing.T) {
	needReserve(t)
	for _, c := range []struct{ pool, volume bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		name := map[bool]string{false: "own-files", true: "pool"}[c.pool] + map[bool]string{false: "/log-sync", true: "/volume-sync"}[c.volume]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openOS(t, dir, 8<<20, c.pool)
			syncNow := syncer(t, l, dir, c.volume)
			var m model
			add := func(b []byte) (base, pos int64) {
				t.Helper()
				pos = l.active().size
				base, err := l.Append(b, 0)
				if err != nil {
					t.Fatal(err)
				}
				m.add(b, base)
				return base, pos
			}
			zeros := func(n int) []byte { return make([]byte, n) }

			// Past reserveFrom: the segment reserves space ahead, and this
			// batch, larger than tailBatchMax, is written at once.
			big := mkBatch(t, 70, 0, 1000)
			_, pos := add(big)
			if got := onDisk(t, l, pos, len(big)); !bytes.Equal(got, big) {
				t.Fatal("a large batch was not written at once")
			}
			b1 := mkBatch(t, 2, 100, 100)
			base1, pos1 := add(b1)
			if got := onDisk(t, l, pos1, len(b1)); !bytes.Equal(got, zeros(len(b1))) {
				t.Fatal("a small append into reserved space was written at once: nothing waits")
			}
			// A read of it writes it first.
			if got, err := l.Read(base1, 1<<20, l.EndOffset()); err != nil || !bytes.Equal(got, b1) {
				t.Fatalf("read of the waiting batch: %d bytes, %v", len(got), err)
			}
			if got := onDisk(t, l, pos1, len(b1)); !bytes.Equal(got, b1) {
				t.Fatal("the read did not write the batch")
			}

			// A sync writes them before it syncs.
			b2, b3 := mkBatch(t, 1, 200, 300), mkBatch(t, 3, 300, 50)
			_, pos2 := add(b2)
			add(b3)
			both := append(bytes.Clone(b2), b3...)
			if got := onDisk(t, l, pos2, len(both)); !bytes.Equal(got, zeros(len(both))) {
				t.Fatal("small appends were written at once")
			}
			if d, err := syncNow(); err != nil || d != l.EndOffset() {
				t.Fatalf("sync: durable %d, %v; want %d", d, err, l.EndOffset())
			}
			if got := onDisk(t, l, pos2, len(both)); !bytes.Equal(got, both) {
				t.Fatal("the sync did not write the waiting batches")
			}

			// A large append writes the tail before itself.
			b4 := mkBatch(t, 1, 400, 10)
			_, pos4 := add(b4)
			big2 := mkBatch(t, 20, 500, 1000)
			add(big2)
			if got := onDisk(t, l, pos4, len(b4)+len(big2)); !bytes.Equal(got, append(bytes.Clone(b4), big2...)) {
				t.Fatal("a large append did not follow the tail in the file")
			}

			// A truncation into the tail, then more appends.
			b5, b6 := mkBatch(t, 1, 600, 10), mkBatch(t, 1, 700, 10)
			add(b5)
			base6, _ := add(b6)
			if err := l.Truncate(base6); err != nil {
				t.Fatal(err)
			}
			m.batches, m.bases = m.batches[:len(m.batches)-1], m.bases[:len(m.bases)-1]
			add(mkBatch(t, 2, 800, 20))
			if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("content after the truncation differs")
			}

			// A close writes the tail; the reopened log has it all.
			add(mkBatch(t, 1, 900, 10))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if n := tailsHeld.Load(); n != 0 {
				t.Fatalf("%d tails still held after the only log closed", n)
			}
			l = openOS(t, dir, 8<<20, c.pool)
			defer l.Close()
			if r := l.Recovery(); r.DroppedBytes != 0 || r.Damaged {
				t.Fatalf("recovery after a clean close reports %+v", r)
			}
			if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("content after reopening differs")
			}
		})
	}
}

// Random appends, reads, syncs, truncations, rolls and reopens against a
// model, with readers running beside the appender: a reader never sees a
// byte of a waiting batch unwritten, and everything synced is in the
// files whatever follows.
func TestTailRandomized(t *testing.T) {
	needReserve(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	const segBytes = 256 << 10
	l := openOS(t, dir, segBytes, true)
	var m model
	var waited int

	stop := make(chan struct{})
	var readers sync.WaitGroup
	var cur atomic.Pointer[Log]
	cur.Store(l)
	var readErr atomic.Value
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l := cur.Load()
				end := l.EndOffset()
				for off := l.StartOffset(); off < end; {
					b, err := l.Read(off, 64<<10, end)
					if err != nil {
						// A truncation or a reopen under the reader.
						if errors.Is(err, ErrOffsetOutOfRange) || errors.Is(err, ErrClosed) {
							break
						}
						readErr.Store(fmt.Errorf("read at %d: %w", off, err))
						return
					}
					if b == nil {
						break
					}
					bs, err := recordbatch.Split(b)
					if err != nil {
						readErr.Store(fmt.Errorf("read at %d returned a damaged batch: %w", off, err))
						return
					}
					h, _ := recordbatch.ParseHeader(bs[len(bs)-1])
					off = h.LastOffset() + 1
				}
			}
		}()
	}

	for i := range 3000 {
		switch r := rng.IntN(100); {
		case r < 80:
			n, size := 1+rng.IntN(4), 10+rng.IntN(2000)
			if r < 8 {
				n, size = 20+rng.IntN(30), 1000 // larger than tailBatchMax
			}
			b := mkBatch(t, n, int64(i), size)
			waits := l.active().tail.waiting()
			base, err := l.Append(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !waits && l.active().tail.waiting() {
				waited++
			}
			m.add(b, base)
		case r < 90:
			want := l.EndOffset()
			if d, err := syncer(t, l, dir, r%2 == 0)(); err != nil || d != want {
				t.Fatalf("sync: durable %d, %v; want %d", d, err, want)
			}
		case r < 95:
			if len(m.bases) < 2 {
				continue
			}
			k := len(m.bases) - 1 - rng.IntN(min(len(m.bases)-1, 10))
			if err := l.Truncate(m.bases[k]); err != nil {
				t.Fatal(err)
			}
			m.batches, m.bases = m.batches[:k], m.bases[:k]
		default:
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openOS(t, dir, segBytes, true)
			cur.Store(l)
			if r := l.Recovery(); r.DroppedBytes != 0 || r.Damaged {
				t.Fatalf("recovery after a clean close reports %+v", r)
			}
		}
		if err, _ := readErr.Load().(error); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			verify(t, l, &m)
		}
	}
	close(stop)
	readers.Wait()
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	verify(t, l, &m)
	if waited == 0 {
		t.Fatal("no append waited: the run did not exercise the tail")
	}
	// A crash after a sync: the log is never closed.
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := openOS(t, dir, segBytes, true)
	defer crashed.Close()
	if r := crashed.Recovery(); r.DroppedBytes != 0 || r.Damaged {
		t.Fatalf("recovery after a crash reports %+v", r)
	}
	verify(t, crashed, &m)
}

// failFS reserves space like the operating system's filesystem and fails
// writes while fail is set.
type failFS struct {
	vfs.FS
	fail *atomic.Bool
}

func (f failFS) Create(name string) (vfs.File, error) {
	g, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return failFile{g, f.fail}, nil
}

func (f failFS) OpenRW(name string) (vfs.File, error) {
	g, err := f.FS.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return failFile{g, f.fail}, nil
}

type failFile struct {
	vfs.File
	fail *atomic.Bool
}

func (f failFile) Write(p []byte) (int, error) {
	if f.fail.Load() {
		return 0, syscall.EIO
	}
	return f.File.Write(p)
}

func (f failFile) Preallocate(size int64) error { return vfs.Preallocate(f.File, size) }

// When writing the tail fails, nothing in it becomes durable or readable,
// and the log fails as after a failed fsync.
func TestTailWriteFailureFailsTheLog(t *testing.T) {
	needReserve(t)
	var fail atomic.Bool
	l, err := Open(t.TempDir(), Options{FS: failFS{vfs.Default, &fail}, Logger: quiet, SegmentBytes: 8 << 20, RetentionMs: -1, RetentionBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(mkBatch(t, 70, 0, 1000), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.DurableEnd()
	base, err := l.Append(mkBatch(t, 2, 100, 100), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !l.active().tail.waiting() {
		t.Fatal("the small append did not wait")
	}
	fail.Store(true)
	if _, err := l.Read(base, 1<<20, l.EndOffset()); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a batch whose write failed: %v, want EIO", err)
	}
	if d, err := l.Sync(); !errors.Is(err, syscall.EIO) || d != durable {
		t.Fatalf("sync after the tail's write failed: durable %d, %v; want %d and EIO", d, err, durable)
	}
	fail.Store(false)
	if _, err := l.Append(mkBatch(t, 1, 200, 10), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after the failure: %v, want the log failed with EIO", err)
	}
	if d, err := l.Sync(); err == nil || d != durable {
		t.Fatalf("a later sync: durable %d, %v; want %d and an error", d, err, durable)
	}
}

// A tail takes batches up to tailBatchMax until it holds tailMax bytes,
// and no more than tailsMax tails hold bytes at once.
func TestTailBounds(t *testing.T) {
	start, startBytes := tailsHeld.Load(), tailBytes.Load()
	var tl tail
	if tl.add(make([]byte, tailBatchMax+1), 0) {
		t.Fatal("a batch larger than tailBatchMax waited")
	}
	pos := int64(0)
	for range tailMax / tailBatchMax {
		if !tl.add(make([]byte, tailBatchMax), pos) {
			t.Fatalf("a tail holding %d bytes refused %d more", pos, tailBatchMax)
		}
		pos += tailBatchMax
	}
	if tl.add([]byte{1}, pos) {
		t.Fatal("a full tail took one more byte")
	}
	if got := Tails(); got.Tails != start+1 || got.Bytes != startBytes+tailMax {
		t.Fatalf("Tails() %+v holding one full tail, want %d tails, %d bytes", got, start+1, startBytes+tailMax)
	}
	tl.discard()
	if got := Tails(); got.Tails != start || got.Bytes != startBytes {
		t.Fatalf("Tails() %+v after the tail let go, want %d tails, %d bytes", got, start, startBytes)
	}

	tails := make([]tail, tailsMax-start)
	for i := range tails {
		if !tails[i].add([]byte{1}, 0) {
			t.Fatalf("tail %d of %d refused its first batch", i, tailsMax)
		}
	}
	var extra tail
	if extra.add([]byte{1}, 0) {
		t.Fatalf("%d tails held bytes at once", tailsMax+1)
	}
	tails[0].discard()
	if !extra.add([]byte{1}, 0) {
		t.Fatal("a tail was refused after another let go")
	}
	extra.discard()
	for i := range tails {
		tails[i].discard()
	}
	if n := tailsHeld.Load(); n != start {
		t.Fatalf("%d tails held after all let go, want %d", n, start)
	}
}
