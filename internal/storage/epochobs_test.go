package storage

import (
	"path/filepath"
	"slices"
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
