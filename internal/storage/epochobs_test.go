package storage

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// TestEpochObserver: every durable change of the epoch history (a new
// epoch, a truncation, a trim from the start, a full reset) reaches the
// observer with the history as written; appends in the same epoch do not.
func TestEpochObserver(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	var seen [][]EpochEntry
	l.SetEpochObserver(func(h []EpochEntry) { seen = append(seen, h) })
	for _, ep := range []int32{1, 1, 3, 3} {
		if _, err := l.Append(mkBatch(t, 2, 0, 1), ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Truncate(4); err != nil { // drops epoch 3 (started at 4)
		t.Fatal(err)
	}
	if _, err := l.DeleteRecords(2); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateFullyAndStartAt(10); err != nil {
		t.Fatal(err)
	}
	want := [][]EpochEntry{
		{{1, 0}},
		{{1, 0}, {3, 4}},
		{{1, 0}},
		{{1, 2}},
		{},
	}
	if len(seen) != len(want) {
		t.Fatalf("observer saw %v, want %v", seen, want)
	}
	for i := range want {
		if !slices.Equal(seen[i], want[i]) {
			t.Fatalf("change %d: %v, want %v", i, seen[i], want[i])
		}
		if !slices.Equal(seen[len(seen)-1], l.EpochHistory()) {
			t.Fatalf("last seen %v, history %v", seen[len(seen)-1], l.EpochHistory())
		}
	}
}

// TestEpochHistoryAppendedLines: the history file is the document written
// whole followed by appended lines; reading keeps the lines up to the
// first that is not a whole entry following the one before (a torn append
// or damage), and rewrites the file without the rest so that the next
// epoch's line follows a whole one.
func TestEpochHistoryAppendedLines(t *testing.T) {
	const doc = `{"version":1,"entries":[{"epoch":1,"startOffset":0}]}`
	for _, c := range []struct {
		name, file string
		want       []EpochEntry
		rewritten  bool
	}{
		{"written whole", doc, []EpochEntry{{1, 0}}, false},
		{"a new log's, empty", "", nil, false},
		{"appended lines", doc + "\n" + `{"epoch":2,"startOffset":4}` + "\n" + `{"epoch":5,"startOffset":9}`, []EpochEntry{{1, 0}, {2, 4}, {5, 9}}, false},
		{"appended to empty", "\n" + `{"epoch":2,"startOffset":4}`, []EpochEntry{{2, 4}}, false},
		{"torn line", doc + "\n" + `{"epoch":2,"startOffset":4}` + "\n" + `{"epoch":5,"sta`, []EpochEntry{{1, 0}, {2, 4}}, true},
		{"torn after the newline", doc + "\n", []EpochEntry{{1, 0}}, true},
		{"a field missing", doc + "\n" + `{"epoch":2}`, []EpochEntry{{1, 0}}, true},
		{"zeros where the appended bytes were", doc + "\x00\x00\x00\x00", []EpochEntry{{1, 0}}, true},
		{"zeros after a whole line", doc + "\n" + `{"epoch":2,"startOffset":4}` + "\x00\x00", []EpochEntry{{1, 0}, {2, 4}}, true},
		{"a blank line", doc + "\n\n" + `{"epoch":2,"startOffset":4}`, []EpochEntry{{1, 0}}, true},
		{"out of order", doc + "\n" + `{"epoch":2,"startOffset":4}` + "\n" + `{"epoch":2,"startOffset":6}` + "\n" + `{"epoch":3,"startOffset":8}`, []EpochEntry{{1, 0}, {2, 4}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			if err := fs.MkdirAll(testDir); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(testDir, epochFileName)
			if err := vfs.WriteFileAtomic(fs, name, []byte(c.file)); err != nil {
				t.Fatal(err)
			}
			read := func() *Log {
				t.Helper()
				l := &Log{fs: fs, dir: testDir, logger: quiet}
				if err := l.readEpochs(); err != nil {
					t.Fatal(err)
				}
				return l
			}
			l := read()
			if !slices.Equal(l.epochs, c.want) || !l.epochsOnDisk {
				t.Errorf("history %v (on disk %v), want %v", l.epochs, l.epochsOnDisk, c.want)
			}
			b, err := vfs.ReadFile(fs, name)
			if err != nil {
				t.Fatal(err)
			}
			if rewritten := string(b) != c.file; rewritten != c.rewritten {
				t.Errorf("file rewritten %v, want %v: %q", rewritten, c.rewritten, b)
			}
			// The next epoch is appended and read back.
			if err := l.startEpochLocked(7, 20); err != nil {
				t.Fatal(err)
			}
			if got, want := read().epochs, append(slices.Clone(c.want), EpochEntry{7, 20}); !slices.Equal(got, want) {
				t.Errorf("after the next epoch's start: %v, want %v", got, want)
			}
		})
	}
}

// TestFailedEpochWriteRewrittenBeforeAppend: a history write that fails
// (a truncation's rewrite failing at its rename or its directory sync, a
// new epoch's line written but not synced) leaves a file that no longer
// holds the history in memory. No record may reach the disk beside it: the
// next append writes the history whole first, or fails while it cannot,
// so the records appended after the failure survive a crash (the file left
// behind would make recovery cut them, its epochs not theirs).
func TestFailedEpochWriteRewrittenBeforeAppend(t *testing.T) {
	opts := Options{VerifyAll: true}
	reopen := func(t *testing.T, fs vfs.FS) *Log {
		t.Helper()
		l := openLog(t, fs, opts)
		t.Cleanup(func() { l.Close() })
		return l
	}
	// survives: reopened from the files as a kill leaves them and as a
	// power loss does, the log ends at end with history want, undamaged.
	survives := func(t *testing.T, m *vfs.MemFS, end int64, want []EpochEntry) {
		t.Helper()
		for _, fs := range []vfs.FS{m, m.Crash()} {
			c := reopen(t, fs)
			if c.EndOffset() != end || !slices.Equal(c.EpochHistory(), want) || c.Recovery().Damaged {
				t.Errorf("reopened: end %d (want %d), history %v (want %v), damaged %v",
					c.EndOffset(), end, c.EpochHistory(), want, c.Recovery().Damaged)
			}
		}
	}
	appendAt := func(t *testing.T, l *Log, epoch int32) {
		t.Helper()
		if _, err := l.Append(mkBatch(t, 2, 0, 10), epoch); err != nil {
			t.Fatalf("append in epoch %d: %v", epoch, err)
		}
	}
	sync := func(t *testing.T, l *Log) {
		t.Helper()
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		op   vfs.Op
	}{
		{"rename", vfs.OpRename},
		{"directory sync", vfs.OpSyncDir},
	} {
		t.Run("truncation's rewrite fails at its "+c.name, func(t *testing.T) {
			m := vfs.NewMem()
			l := openLog(t, m, opts)
			for _, ep := range []int32{3, 4, 5} {
				appendAt(t, l, ep) // epoch 3 at 0, 4 at 2, 5 at 4
			}
			sync(t, l)
			// The leader's log ends at 4 in epoch 4: epoch 5 was never
			// committed. The history's rewrite fails at the rename of its
			// new file, or at the directory sync after it (not at the
			// truncation's own sync of the segment's directory).
			renamed := false
			m.SetHook(func(op vfs.Op, name string) error {
				switch {
				case op == vfs.OpRename && strings.Contains(name, epochFileName):
					renamed = true
					if c.op == vfs.OpRename {
						return vfs.ErrInjected
					}
				case op == vfs.OpSyncDir && renamed && c.op == vfs.OpSyncDir:
					renamed = false
					return vfs.ErrInjected
				}
				return nil
			})
			if err := l.Truncate(4); !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("truncate: %v; want the injected error", err)
			}
			m.SetHook(nil)
			appendAt(t, l, 4) // 4..5, the leader's epoch-4 records
			sync(t, l)
			l.Close()
			survives(t, m, 6, []EpochEntry{{3, 0}, {4, 2}})
		})
	}

	t.Run("a new epoch's line not synced", func(t *testing.T) {
		m := vfs.NewMem()
		l := openLog(t, m, opts)
		appendAt(t, l, 3)
		sync(t, l)
		m.FailNext(vfs.OpSync, epochFileName, vfs.ErrInjected)
		if _, err := l.Append(mkBatch(t, 2, 0, 10), 5); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("append in epoch 5: %v; want the injected error", err)
		}
		m.SetHook(nil)
		// The line {5, 2} is in the file (the page cache, after a kill);
		// the log goes on in epoch 3 at 2.
		appendAt(t, l, 3)
		sync(t, l)
		l.Close()
		survives(t, m, 4, []EpochEntry{{3, 0}})
	})

	t.Run("appends fail while the history cannot be written", func(t *testing.T) {
		m := vfs.NewMem()
		l := openLog(t, m, opts)
		appendAt(t, l, 3)
		appendAt(t, l, 5)
		sync(t, l)
		m.SetHook(func(op vfs.Op, name string) error {
			if op == vfs.OpRename && strings.Contains(name, epochFileName) {
				return vfs.ErrInjected
			}
			return nil
		})
		if err := l.Truncate(2); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("truncate: %v; want the injected error", err)
		}
		end := l.EndOffset()
		if _, err := l.Append(mkBatch(t, 2, 0, 10), 3); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("append while the history cannot be written: %v; want the injected error", err)
		}
		if l.EndOffset() != end {
			t.Fatalf("end %d after a refused append, want %d", l.EndOffset(), end)
		}
		m.SetHook(nil)
		appendAt(t, l, 3)
		sync(t, l)
		l.Close()
		survives(t, m, 4, []EpochEntry{{3, 0}})
	})
}

// TestTornEpochHistoryOpensWhenRewriteFails: a damaged end of the history
// is dropped at Open even when the file cannot be rewritten then (a full
// disk after the crash); the rewrite happens before the next append.
func TestTornEpochHistoryOpensWhenRewriteFails(t *testing.T) {
	m := vfs.NewMem()
	l := openLog(t, m, Options{})
	if _, err := l.Append(mkBatch(t, 2, 0, 10), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	name := filepath.Join(testDir, epochFileName)
	b, err := vfs.ReadFile(m, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(m, name, append(b, "\n{\"epoch\":2,\"st"...)); err != nil {
		t.Fatal(err)
	}
	m.FailNext(vfs.OpRename, epochFileName, vfs.ErrInjected)
	l = openLog(t, m, Options{})
	defer l.Close()
	if !slices.Equal(l.EpochHistory(), []EpochEntry{{1, 0}}) {
		t.Fatalf("history %v, want [{1 0}]", l.EpochHistory())
	}
	if _, err := l.Append(mkBatch(t, 2, 0, 10), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	c := openAt(t, m.Crash(), testDir)
	defer c.Close()
	if want := []EpochEntry{{1, 0}, {2, 2}}; !slices.Equal(c.EpochHistory(), want) {
		t.Errorf("after the next epoch and a crash: %v, want %v", c.EpochHistory(), want)
	}
}
