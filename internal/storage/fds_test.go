package storage

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// segFiles lists the segment files in the test log's directory by kind.
func segFiles(t *testing.T, fs vfs.FS) (logs, indexes []int64) {
	t.Helper()
	names, err := fs.ReadDir("data/topic-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if b, ok := parseSegName(n, logSuffix); ok {
			logs = append(logs, b)
		}
		if b, ok := parseSegName(n, indexSuffix); ok {
			indexes = append(indexes, b)
		}
		if b, ok := parseSegName(n, timeIndexSuffix); ok && !slices.Contains(indexes, b) {
			t.Fatalf("time index of %d without an offset index", b)
		}
	}
	return logs, indexes
}

// Only rolled segments have index files; the active segment's indexes are
// in memory, and a truncation that makes a rolled segment the active one
// removes its files.
func TestActiveSegmentHasNoIndexFiles(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 100}
	l := openLog(t, fs, opts)
	defer func() { l.Close() }()
	var m model
	for i := range 60 {
		b := mkBatch(t, 2, int64(10*i), 40)
		base, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		m.add(b, base)
	}
	check := func(when string) {
		t.Helper()
		logs, indexes := segFiles(t, fs)
		if len(logs) < 3 || !slices.Equal(indexes, logs[:len(logs)-1]) {
			t.Fatalf("%s: segments %v, index files %v: want index files for every segment but the last", when, logs, indexes)
		}
	}
	check("after appends")
	// A rolled segment becomes the active one.
	logs, _ := segFiles(t, fs)
	// Inside the first batch of the last rolled segment, which goes whole.
	cut := logs[len(logs)-2]
	if err := l.Truncate(cut + 1); err != nil {
		t.Fatal(err)
	}
	check("after a truncation into a rolled segment")
	kept := slices.Index(m.bases, cut)
	if got := readAll(t, l, 0, 1000); !bytes.Equal(got, bytes.Join(m.batches[:kept], nil)) {
		t.Fatal("content after truncation")
	}
	// It rolls again, writing its index files anew.
	for i := range 40 {
		if _, err := l.Append(mkBatch(t, 2, int64(1000+10*i), 40), 0); err != nil {
			t.Fatal(err)
		}
	}
	check("after rolling again")
	l.Close()
	var warns atomic.Int64
	l = openCounting(t, fs, opts, &warns)
	if warns.Load() != 0 {
		t.Fatalf("%d warnings at open: the index files written at roll were not accepted", warns.Load())
	}
	check("after reopening")
}

// Index files for the active segment, from an older version that wrote
// them as it appended or from a crash part way through a roll, are never
// trusted: recovery rebuilds the active segment's indexes by scanning.
func TestStaleActiveIndexFilesIgnored(t *testing.T) {
	for _, stale := range []string{"garbage", "other-segment", "empty"} {
		t.Run(stale, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 100}
			l := openLog(t, fs, opts)
			var m model
			for i := range 50 {
				b := mkBatch(t, 2, int64(10*i), 40)
				base, _ := l.Append(b, 0)
				m.add(b, base)
			}
			want := segStates(l)
			l.Close()
			var idx, tidx []byte
			switch stale {
			case "garbage":
				idx, tidx = bytes.Repeat([]byte{0xff}, 80), bytes.Repeat([]byte{0x7f}, 120)
			case "other-segment":
				// Consistent-looking entries that point into the middle of
				// batches, and a finish entry claiming a short segment.
				idx = slices.Concat(encodeIndex(indexEntry{rel: 3, pos: 17}), encodeIndex(indexEntry{rel: 9, pos: 301}))
				tidx = slices.Concat(encodeTime(timeEntry{ts: 5000, rel: 4}), encodeTime(timeEntry{ts: 9000, rel: 10}))
			}
			for suf, data := range map[string][]byte{indexSuffix: idx, timeIndexSuffix: tidx} {
				if err := vfs.WriteFileAtomic(fs, segName("data/topic-0", 0, suf), data); err != nil {
					t.Fatal(err)
				}
			}
			l = openLog(t, fs, opts)
			defer l.Close()
			if got := segStates(l); !segStatesEqual(got, want) {
				t.Fatalf("indexes after open:\n%+v\nwant\n%+v", got, want)
			}
			if r := l.Recovery(); r.DroppedBytes != 0 || r.Damaged {
				t.Fatalf("recovery %+v", r)
			}
			for i, base := range m.bases {
				if b, err := l.Read(base+1, 1, l.EndOffset()); err != nil || !bytes.Equal(b, m.batches[i]) {
					t.Fatalf("read %d: %v", base+1, err)
				}
			}
			if off, ts, ok, err := l.OffsetForTimestamp(255); err != nil || !ok || off != 52 || ts != 260 {
				t.Fatalf("timestamp lookup: %d@%d %v %v", off, ts, ok, err)
			}
			if _, indexes := segFiles(t, fs); len(indexes) != 0 {
				t.Fatal("recovery left the active segment's stale index files")
			}
		})
	}
}

// A roll that cannot write the sealed segment's index files (say, out of
// descriptors) fails the append and changes nothing: the segment stays
// active, the log stays writable, and the next append rolls.
func TestRollIndexWriteFailure(t *testing.T) {
	for _, op := range []struct {
		name string
		op   vfs.Op
		file string
	}{
		{"create-index", vfs.OpCreate, indexSuffix},
		{"create-timeindex", vfs.OpCreate, timeIndexSuffix},
		{"sync-index", vfs.OpSync, indexSuffix},
		{"write-timeindex", vfs.OpWrite, timeIndexSuffix},
		{"syncdir", vfs.OpSyncDir, "topic-0"},
		{"create-log", vfs.OpCreate, logSuffix},
	} {
		t.Run(op.name, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{SegmentBytes: 1000, IndexIntervalBytes: 100}
			l := openLog(t, fs, opts)
			var m model
			add := func() error {
				b := mkBatch(t, 2, int64(10*len(m.bases)), 100)
				base, err := l.Append(b, 0)
				if err == nil {
					m.add(b, base)
				}
				return err
			}
			for l.SegmentCount() == 1 {
				if err := add(); err != nil {
					t.Fatal(err)
				}
			}
			for l.SegmentCount() == 2 {
				fs.FailNext(op.op, op.file, vfs.ErrInjected)
				if err := add(); err != nil {
					if !errors.Is(err, vfs.ErrInjected) {
						t.Fatal(err)
					}
					break
				}
			}
			if l.SegmentCount() != 2 {
				t.Fatal("the failed roll added a segment")
			}
			fs.SetHook(nil)
			if err := add(); err != nil {
				t.Fatalf("append after a failed roll: %v", err)
			}
			if l.SegmentCount() != 3 {
				t.Fatal("no roll after the failed one")
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, l, 0, 1000); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("content after a failed roll")
			}
			l.Close()
			var warns atomic.Int64
			l = openCounting(t, fs.Crash(), opts, &warns)
			defer l.Close()
			if got := readAll(t, l, 0, 1000); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("content after a crash")
			}
			if warns.Load() != 0 || l.Recovery().DroppedBytes != 0 {
				t.Fatalf("%d warnings, recovery %+v", warns.Load(), l.Recovery())
			}
		})
	}
}

// testPoolEnv names an environment variable that makes the tests' logs open
// their rolled segments through a descriptor pool of that size, so that the
// whole suite (crashes, damage, compaction) can be run against pooled files:
//
//	MOONMQ_STORAGE_TEST_POOL=1 go test ./internal/storage/
const testPoolEnv = "MOONMQ_STORAGE_TEST_POOL"

var testPoolLimit = func() int {
	n, _ := strconv.Atoi(os.Getenv(testPoolEnv))
	return n
}()

// testPool returns a pool over fs when testPoolEnv asks for one, else nil.
func testPool(fs vfs.FS) *vfs.Pool {
	if testPoolLimit <= 0 {
		return nil
	}
	return vfs.NewPool(fs, testPoolLimit)
}

// Out of descriptors, reads of rolled segments and a truncation into one
// fail with an error saying so, and change nothing: the log stays
// writable, and once descriptors are back everything reads as written.
func TestOutOfDescriptors(t *testing.T) {
	mem := vfs.NewMem()
	var out atomic.Bool
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpOpen && out.Load() {
			return &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
		}
		return nil
	})
	opts := Options{SegmentBytes: 1000, IndexIntervalBytes: 100, Pool: vfs.NewPool(mem, 1)}
	l := openLog(t, mem, opts)
	defer l.Close()
	var m model
	for l.SegmentCount() < 5 {
		b := mkBatch(t, 2, int64(10*len(m.bases)), 100)
		base, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		m.add(b, base)
	}
	out.Store(true)
	var readErr error
	for i, base := range m.bases {
		if _, err := l.Read(base, 1, l.EndOffset()); err != nil {
			readErr = err
			if i == len(m.bases)-1 {
				t.Fatal("a read of the active segment needed a descriptor")
			}
		}
	}
	if !errors.Is(readErr, syscall.EMFILE) || !strings.Contains(readErr.Error(), "ulimit") {
		t.Fatalf("reads of rolled segments out of descriptors: %v", readErr)
	}
	// A rolled segment evicted from the pool cannot become the active one.
	cut := m.bases[1]
	if err := l.Truncate(cut); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("truncation into an evicted segment out of descriptors: %v", err)
	}
	if l.EndOffset() != m.bases[len(m.bases)-1]+2 {
		t.Fatal("the failed truncation changed the log")
	}
	b := mkBatch(t, 2, 5000, 10)
	base, err := l.Append(b, 0)
	if err != nil {
		t.Fatalf("append out of descriptors: %v", err)
	}
	m.add(b, base)
	if _, err := l.Sync(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}
	out.Store(false)
	if got := readAll(t, l, 0, 1000); !bytes.Equal(got, m.bytesFrom(0)) {
		t.Fatal("content after descriptors came back")
	}
	if err := l.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, 0, 1000); !bytes.Equal(got, m.bytesFrom(0)[:len(bytes.Join(m.batches[:1], nil))]) {
		t.Fatal("content after the truncation")
	}
}
