package vfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

func readAll(t *testing.T, f vfs.File) []byte {
	t.Helper()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b
}

func onDisk(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLossyKeepsUnsyncedInMemory: readers see every write, the disk only
// what was synced; a closed file keeps its unsynced bytes for the next
// opener and the next Sync.
func TestLossyKeepsUnsyncedInMemory(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a.log")
	l := vfs.NewLossy()
	f, err := l.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, f)); got != "hello world" {
		t.Fatalf("read %q", got)
	}
	if got := onDisk(t, name); got != "hello " {
		t.Fatalf("disk holds %q before the second sync", got)
	}
	if l.Unsynced() != 5 {
		t.Fatalf("Unsynced %d, want 5", l.Unsynced())
	}
	// A read across the synced/unsynced boundary, and one past the end.
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 4); n != 4 || err != nil || string(buf) != "o wo" {
		t.Fatalf("ReadAt(4) = %d %v %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 9); n != 2 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt(9) = %d %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := l.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, r)); got != "hello world" {
		t.Fatalf("reopened file reads %q", got)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if got := onDisk(t, name); got != "hello world" {
		t.Fatalf("disk holds %q after a sync through another handle", got)
	}
	if l.Unsynced() != 0 {
		t.Fatalf("Unsynced %d after sync", l.Unsynced())
	}
}

// TestLossyTruncateRenameRemove covers the operations that change a file's
// size or name while it holds unsynced bytes.
func TestLossyTruncateRenameRemove(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	l := vfs.NewLossy()
	f, _ := l.OpenRW(a)
	f.Write([]byte("0123456789"))
	f.Sync()
	f.Write([]byte("abcdef"))
	if err := f.Truncate(12); err != nil { // within the unsynced tail
		t.Fatal(err)
	}
	if got := string(readAll(t, f)); got != "0123456789ab" {
		t.Fatalf("after truncate(12): %q", got)
	}
	if err := f.Truncate(4); err != nil { // into the synced part
		t.Fatal(err)
	}
	f.Write([]byte("XY"))
	if got := string(readAll(t, f)); got != "0123XY" {
		t.Fatalf("after truncate(4)+write: %q", got)
	}
	if got := onDisk(t, a); got != "0123" {
		t.Fatalf("disk %q", got)
	}
	if err := l.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	g, err := l.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, g)); got != "0123XY" {
		t.Fatalf("renamed file reads %q", got)
	}
	g.Close()
	if err := f.Sync(); err != nil { // the old handle follows the rename
		t.Fatal(err)
	}
	f.Close()
	if got := onDisk(t, b); got != "0123XY" {
		t.Fatalf("disk after rename and sync: %q", got)
	}
	h, _ := l.Create(b)
	h.Write([]byte("new"))
	h.Close()
	if err := l.Remove(b); err != nil {
		t.Fatal(err)
	}
	if l.Unsynced() != 0 {
		t.Fatalf("removed file still holds %d unsynced bytes", l.Unsynced())
	}
	if _, err := l.Open(b); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open removed file: %v", err)
	}
	if err := vfs.WriteFileAtomic(l, a, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(t, a); got != "state" {
		t.Fatalf("WriteFileAtomic left %q on disk", got)
	}
}

func batch(t *testing.T, v string) []byte {
	t.Helper()
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{Value: []byte(v)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLossyStorageLosesExactlyUnsynced runs storage.Log on a LossyFS,
// "kills" it (drops the filesystem without closing anything) and recovers
// the directory from the real disk: the log ends where its last Sync said.
// The broken-fsync mode loses everything.
func TestLossyStorageLosesExactlyUnsynced(t *testing.T) {
	for _, mode := range []string{vfs.LoseUnsynced, vfs.LoseUnsyncedBrokenSync} {
		t.Run(mode, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "p")
			l, err := vfs.FromTestEnv(mode)
			if err != nil {
				t.Fatal(err)
			}
			opts := storage.Options{FS: l, RetentionMs: -1, RetentionBytes: -1, SegmentBytes: 300,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			lg, err := storage.Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if _, err := lg.Append(batch(t, "synced-"+string(rune('a'+i))), 1); err != nil {
					t.Fatal(err)
				}
			}
			durable, err := lg.Sync()
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := lg.Append(batch(t, "lost-"+string(rune('a'+i))), 1); err != nil {
					t.Fatal(err)
				}
			}
			if lg.EndOffset() != durable+3 {
				t.Fatalf("end %d, durable %d", lg.EndOffset(), durable)
			}
			// No Close: the process dies with its memory.
			if mode == vfs.LoseUnsyncedBrokenSync {
				// Not one record reached a segment file.
				segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
				if len(segs) < 2 {
					t.Fatalf("want rolled segments, have %v", segs)
				}
				for _, s := range segs {
					if got := onDisk(t, s); got != "" {
						t.Fatalf("%s holds %d bytes under a lying fsync", s, len(got))
					}
				}
				return
			}
			opts.FS = vfs.Default
			re, err := storage.Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer re.Close()
			if re.EndOffset() != durable {
				t.Fatalf("recovered end %d, want %d", re.EndOffset(), durable)
			}
			data, err := re.Read(durable-1, 1<<20, durable)
			if err != nil || !bytes.Contains(data, []byte("synced-j")) {
				t.Fatalf("last durable record: %v %q", err, data)
			}
		})
	}
}

func TestFromTestEnv(t *testing.T) {
	if l, err := vfs.FromTestEnv(""); l != nil || err != nil {
		t.Fatalf("empty value: %v %v", l, err)
	}
	if _, err := vfs.FromTestEnv("yes"); err == nil {
		t.Fatal("unknown value accepted")
	}
}
