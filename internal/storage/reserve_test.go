package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// openOS opens a log in dir on the operating system's filesystem, where
// the active segment reserves space ahead of its appends.
func openOS(t *testing.T, dir string, segmentBytes int64, pool bool) *Log {
	t.Helper()
	opts := Options{FS: vfs.Default, Logger: quiet, SegmentBytes: segmentBytes, RetentionMs: -1, RetentionBytes: -1, VerifyAll: true}
	if pool {
		opts.Pool = vfs.NewPool(vfs.Default, 8)
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// segmentFiles returns the sizes of dir's segment files, oldest first.
func segmentFiles(t *testing.T, dir string) []int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, n := range names {
		sizes = append(sizes, fileSize(t, n))
	}
	return sizes
}

// A busy active segment's file runs ahead of its data; nothing reads the
// zeros, a roll and a close cut them, and recovery after a crash (the
// log left open, its file still long) cuts them without calling it a loss.
func TestReservedSpace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("space is reserved only on Linux (fallocate)")
	}
	for _, pool := range []bool{false, true} {
		t.Run(map[bool]string{false: "own-files", true: "pool"}[pool], func(t *testing.T) {
			dir := t.TempDir()
			l := openOS(t, dir, 3<<20, pool)
			var m model
			add := func(ts int64) {
				t.Helper()
				b := mkBatch(t, 4, ts, 1000)
				base, err := l.Append(b, 0)
				if err != nil {
					t.Fatal(err)
				}
				m.add(b, base)
			}
			reserved := false
			for i := 0; l.Size() < 2<<20; i++ {
				add(int64(i))
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				sizes := segmentFiles(t, dir)
				if sizes[len(sizes)-1] > l.active().size {
					reserved = true
				}
			}
			if !reserved {
				t.Fatal("the active segment's file never ran ahead of its data")
			}
			// Follower truncation inside the reserved file, then more
			// appends: they land right after the cut, not after the zeros.
			cut := len(m.batches) - 3
			if err := l.Truncate(m.bases[cut]); err != nil {
				t.Fatal(err)
			}
			m.batches, m.bases = m.batches[:cut], m.bases[:cut]
			for i := 0; l.Size() < 4<<20; i++ {
				add(int64(1000 + i))
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatalf("read back %d bytes, want the %d appended", len(got), len(m.bytesFrom(0)))
			}
			sizes := segmentFiles(t, dir)
			if len(sizes) < 2 {
				t.Fatalf("segments %v: the log never rolled", sizes)
			}
			var rolled int64
			for _, s := range sizes[:len(sizes)-1] {
				rolled += s
			}
			if want := l.Size() - l.active().size; rolled != want {
				t.Fatalf("rolled segment files hold %d bytes, their data %d: a roll left reserved space", rolled, want)
			}

			// A crash: the log is never closed, its file keeps the zeros.
			for l.active().alloc <= l.active().size {
				add(5000)
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			end := l.EndOffset()
			crashed := openOS(t, dir, 3<<20, pool)
			if r := crashed.Recovery(); r.DroppedBytes != 0 || r.Damaged {
				t.Fatalf("recovery after a crash with reserved space reports %+v", r)
			}
			if crashed.EndOffset() != end {
				t.Fatalf("end %d after recovery, want %d", crashed.EndOffset(), end)
			}
			if got := readAll(t, crashed, 0, 1<<20); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("records changed across the crash")
			}
			l.Close()
			if err := crashed.Close(); err != nil {
				t.Fatal(err)
			}

			// A clean close leaves every file exactly its data.
			l = openOS(t, dir, 3<<20, pool)
			for l.active().alloc <= l.active().size {
				if _, err := l.Append(mkBatch(t, 4, 6000, 1000), 0); err != nil {
					t.Fatal(err)
				}
			}
			size := l.Size()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var onDisk int64
			for _, s := range segmentFiles(t, dir) {
				onDisk += s
			}
			if onDisk != size {
				t.Fatalf("after a clean close the segment files hold %d bytes, the data %d", onDisk, size)
			}
		})
	}
}
