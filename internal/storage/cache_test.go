package storage

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// dropFS wraps a MemFS and records every DropCache call per file name.
type dropFS struct {
	*vfs.MemFS
	mu    sync.Mutex
	drops map[string][][2]int64 // base name -> [off, end) ranges
}

type dropFile struct {
	vfs.File
	fs   *dropFS
	name string
}

func (f dropFile) DropCache(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.drops[filepath.Base(f.name)] = append(f.fs.drops[filepath.Base(f.name)], [2]int64{off, off + n})
	return nil
}

func (d *dropFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return dropFile{File: f, fs: d, name: name}, nil
}

func (d *dropFS) Create(name string) (vfs.File, error) {
	f, err := d.MemFS.Create(name)
	return d.wrap(name, f, err)
}

func (d *dropFS) OpenRW(name string) (vfs.File, error) {
	f, err := d.MemFS.OpenRW(name)
	return d.wrap(name, f, err)
}

func (d *dropFS) Open(name string) (vfs.File, error) {
	f, err := d.MemFS.Open(name)
	return d.wrap(name, f, err)
}

// dropped returns the bytes of file name dropped so far and checks that
// the ranges are contiguous from 0: nothing is dropped twice or skipped.
func (d *dropFS) dropped(t *testing.T, name string) int64 {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var end int64
	for _, r := range d.drops[name] {
		if r[0] != end || r[1] <= r[0] {
			t.Fatalf("%s: drop ranges %v are not contiguous from 0", name, d.drops[name])
		}
		end = r[1]
	}
	return end
}

// TestDropCache: only durable bytes are dropped, the newest keep bytes of
// the active segment stay, a rolled segment goes whole, and the data reads
// back unchanged.
func TestDropCache(t *testing.T) {
	fs := &dropFS{MemFS: vfs.NewMem(), drops: map[string][][2]int64{}}
	l := openLog(t, fs, Options{SegmentBytes: 4000})
	defer l.Close()
	b := mkBatch(t, 2, 0, 300)
	seg0 := "00000000000000000000.log"
	appendOne := func() {
		t.Helper()
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		appendOne()
	}
	l.DropCache(0)
	if got := fs.dropped(t, seg0); got != 0 {
		t.Fatalf("dropped %d bytes before any Sync", got)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	appendOne() // not durable: must stay cached
	size := int64(len(b))
	l.DropCache(100)
	if got, want := fs.dropped(t, seg0), 3*size-100; got != want {
		t.Fatalf("after Sync of 3 batches and DropCache(100): dropped %d bytes, want %d", got, want)
	}
	l.DropCache(100) // nothing new
	if got, want := fs.dropped(t, seg0), 3*size-100; got != want {
		t.Fatalf("a second DropCache changed the dropped range to %d, want %d", got, want)
	}
	// Fill the segment until it rolls: the rolled one is dropped whole.
	for l.SegmentCount() < 2 {
		appendOne()
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.DropCache(100)
	rolled := l.segs[0].size
	if got := fs.dropped(t, seg0); got != rolled {
		t.Fatalf("rolled segment: dropped %d bytes, want all %d", got, rolled)
	}
	// A truncation into the active segment: nothing beyond what a later
	// Sync made durable is dropped.
	active := filepath.Base(segName("", l.segs[1].base, logSuffix))
	appendOne()
	appendOne()
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.DropCache(0)
	if err := l.Truncate(l.EndOffset() - 2); err != nil {
		t.Fatal(err)
	}
	cut := l.segs[1].size
	fs.mu.Lock()
	delete(fs.drops, active)
	fs.mu.Unlock()
	appendOne()
	l.DropCache(0)
	fs.mu.Lock()
	after := fs.drops[active]
	fs.mu.Unlock()
	if len(after) != 0 {
		t.Fatalf("after a truncation, an unsynced append was dropped: %v", after)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.DropCache(0)
	fs.mu.Lock()
	after = fs.drops[active]
	fs.mu.Unlock()
	if len(after) != 1 || after[0] != [2]int64{cut, cut + size} {
		t.Fatalf("after a truncation to %d bytes and a synced append of %d: drops %v, want [[%d %d]]", cut, size, after, cut, cut+size)
	}
	want := readAll(t, l, 0, 1<<20)
	if len(want) == 0 || !bytes.Equal(want, readAll(t, l, 0, 1<<20)) {
		t.Fatal("log unreadable after DropCache")
	}
}
