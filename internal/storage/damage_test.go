package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

const testDir = "data/topic-0"

// rewrite replaces a file's content, durably.
func rewrite(t testing.TB, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func mustRead(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func segmentBases(t testing.TB, fs vfs.FS) []int64 {
	t.Helper()
	names, err := fs.ReadDir(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, n := range names {
		if b, ok := parseSegName(n, logSuffix); ok {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases
}

// logState is what a log shows readers.
type logState struct {
	batches    [][]byte
	start, end int64
	epochs     []EpochEntry
}

func stateOf(t testing.TB, l *Log) logState {
	t.Helper()
	return logState{readAll2(t, l), l.StartOffset(), l.EndOffset(), l.EpochHistory()}
}

func (a logState) equal(b logState) bool {
	return a.start == b.start && a.end == b.end && slices.Equal(a.epochs, b.epochs) &&
		slices.EqualFunc(a.batches, b.batches, bytes.Equal)
}

var clean = RecoveryReport{LostFrom: -1}

// reopenUnchanged opens the log in fs without and with VerifyAll and checks
// that recovery removes nothing and that readers see want.
func reopenUnchanged(t *testing.T, fs vfs.FS, opts Options, want logState) {
	t.Helper()
	for _, all := range []bool{false, true} {
		opts.VerifyAll = all
		l := openLog(t, fs, opts)
		if r := l.Recovery(); r != clean {
			t.Fatalf("VerifyAll=%v: recovery removed data from a sound log: %+v", all, r)
		}
		if got := stateOf(t, l); !got.equal(want) {
			t.Fatalf("VerifyAll=%v: log changed: start %d end %d epochs %v (%d batches), want %d %d %v (%d)",
				all, got.start, got.end, got.epochs, len(got.batches), want.start, want.end, want.epochs, len(want.batches))
		}
		l.Close()
	}
}

func replicaBatch(t testing.TB, base int64, epoch int32, ts int64) []byte {
	t.Helper()
	b := mkBatch(t, 2, ts, 20)
	recordbatch.SetBaseOffset(b, base)
	recordbatch.SetPartitionLeaderEpoch(b, epoch)
	return b
}

// TestVerifyAcceptsSoundLogs runs every path that changes the log or its
// epoch history (epochs across rolls, batches without an epoch, retention
// and DeleteRecords moving the history's start, compaction, truncation
// into the active and into a compacted rolled segment, full truncation,
// replica appends, a lost history) and checks that the verified scans of
// recovery (the active segment, and every segment with VerifyAll) find
// nothing to remove, after a clean close and after a crash.
func TestVerifyAcceptsSoundLogs(t *testing.T) {
	plain := recordbatch.BatchOptions{ProducerID: -1}
	appendAll := func(t *testing.T, l *Log, n int, ts int64, epochOf func(i int) int32) {
		t.Helper()
		for i := range n {
			if _, err := l.Append(mkBatch(t, 1+i%3, ts+int64(i), 30), epochOf(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name string
		opts Options
		run  func(t *testing.T, fs *vfs.MemFS, l *Log) *Log
	}{
		{"epochs-across-rolls", Options{SegmentBytes: 600, IndexIntervalBytes: 100}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			appendAll(t, l, 60, 0, func(i int) int32 { return []int32{0, 0, 1, 3, 3, 1833}[i/10] })
			return l
		}},
		{"no-epoch-then-epochs", Options{SegmentBytes: 600}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			appendAll(t, l, 10, 0, func(int) int32 { return -1 })
			appendAll(t, l, 10, 10, func(int) int32 { return 2 })
			if _, err := l.Append(mkBatch(t, 1, 0, 1), -1); !errors.Is(err, ErrStaleEpoch) {
				t.Fatalf("a batch without an epoch after epoch 2: %v", err)
			}
			return l
		}},
		{"retention-and-delete-records", Options{SegmentBytes: 400, IndexIntervalBytes: 100}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			// One record per batch, epoch i/7: DeleteRecords(14) leaves
			// batches 10-13 of epoch 1 below the first entry {2, 14}.
			for i := range 60 {
				if _, err := l.Append(mkBatch(t, 1, int64(i*1000), 80), int32(i/7)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.DeleteRecords(14); err != nil {
				t.Fatal(err)
			}
			if h := l.EpochHistory(); h[0] != (EpochEntry{2, 14}) {
				t.Fatalf("history %v", h)
			}
			l.Reconfigure(400, -1, 2000)
			if n, err := l.EnforceRetention(time.UnixMilli(1e6)); err != nil || n == 0 {
				t.Fatal(n, err)
			}
			// Into the active segment, past an epoch change in it: the
			// first entry moves up to the start.
			if _, err := l.DeleteRecords(l.EndOffset() - 2); err != nil {
				t.Fatal(err)
			}
			if h := l.EpochHistory(); len(h) != 1 || h[0].StartOffset != l.StartOffset() {
				t.Fatalf("history %v", h)
			}
			return l
		}},
		{"compaction", Options{SegmentBytes: 300, IndexIntervalBytes: 50}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			for i := range 40 {
				b := keyed(t, plain, int64(i), fmt.Sprint("k", i%5), fmt.Sprint(i))
				if _, err := l.Append(b, int32(i/9)); err != nil {
					t.Fatal(err)
				}
			}
			if st, err := l.Compact(time.UnixMilli(1000), CompactOptions{}); err != nil || st.SegmentsRewritten == 0 {
				t.Fatal(st, err)
			}
			return l
		}},
		{"truncation", Options{SegmentBytes: 600, IndexIntervalBytes: 100}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			appendAll(t, l, 50, 0, func(i int) int32 { return int32(i / 8) })
			segs := l.SegmentCount()
			if err := l.Truncate(l.EndOffset() - 3); err != nil { // in the active segment
				t.Fatal(err)
			}
			if err := l.Truncate(40); err != nil { // in a rolled one
				t.Fatal(err)
			}
			if l.SegmentCount() >= segs {
				t.Fatal("the truncation did not reach a rolled segment")
			}
			appendAll(t, l, 10, 100, func(int) int32 { return 9 })
			return l
		}},
		{"truncate-into-compacted", Options{SegmentBytes: 300, IndexIntervalBytes: 50}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			// Four batches per segment; compaction removes x@1 from the
			// first, leaving a gap in the middle of it.
			for i, k := range []string{"a", "x", "b", "x", "c", "d", "e", "f", "g", "h", "i", "j"} {
				if _, err := l.Append(keyed(t, plain, int64(i), k, "v"), 1); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Compact(time.UnixMilli(1000), CompactOptions{}); err != nil {
				t.Fatal(err)
			}
			// The first segment, with its gap, becomes the active one; a
			// crash right after must not make recovery cut at the gap.
			if err := l.Truncate(3); err != nil {
				t.Fatal(err)
			}
			if n := l.SegmentCount(); n != 1 {
				t.Fatalf("%d segments", n)
			}
			reopenUnchanged(t, fs.Crash(), Options{SegmentBytes: 300, IndexIntervalBytes: 50}, stateOf(t, l))
			for i := range 3 {
				if _, err := l.Append(keyed(t, plain, int64(20+i), "z", "v"), 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.CheckpointRecoveryPoint(); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"truncate-fully", Options{SegmentBytes: 600}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			appendAll(t, l, 20, 0, func(int) int32 { return 7 })
			if err := l.TruncateFullyAndStartAt(500); err != nil {
				t.Fatal(err)
			}
			appendAll(t, l, 20, 0, func(i int) int32 { return int32(i / 10) })
			return l
		}},
		{"replica", Options{SegmentBytes: 600}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			for i, ep := range []int32{-1, 2, 2, 4, 4, 4, 9} {
				if err := l.AppendReplica(replicaBatch(t, l.EndOffset(), ep, int64(i))); err != nil {
					t.Fatal(err)
				}
			}
			return l
		}},
		{"lost-history", Options{SegmentBytes: 600}, func(t *testing.T, fs *vfs.MemFS, l *Log) *Log {
			appendAll(t, l, 20, 0, func(i int) int32 { return int32(3 + i/10) })
			l.Close()
			fs.Remove(filepath.Join(testDir, epochFileName))
			// The history starts anew at the next epoch, and the batches
			// before it are covered by none of its entries.
			l = openLog(t, fs, Options{SegmentBytes: 600})
			appendAll(t, l, 10, 50, func(int) int32 { return 9 })
			return l
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			l := c.run(t, fs, openLog(t, fs, c.opts))
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			want := stateOf(t, l)
			// Everything is durable: a crash now changes nothing either.
			reopenUnchanged(t, fs.Crash(), c.opts, want)
			l.Close()
			reopenUnchanged(t, fs, c.opts, want)
		})
	}
}

// headerFlip flips bits of one batch header field.
type headerFlip struct {
	name string
	at   func(base int64) (byteIndex int, mask byte)
}

var headerFlips = []headerFlip{
	{"base-offset-raised-high", func(int64) (int, byte) { return 2, 0x01 }}, // +2^40
	{"base-offset-raised-low", func(int64) (int, byte) { return 7, 0x01 }},  // bases are even: +1
	{"base-offset-lowered", func(base int64) (int, byte) {
		low := base & -base // the lowest set bit
		for i := 7; i >= 0; i-- {
			if low < 256 {
				return i, byte(low)
			}
			low >>= 8
		}
		panic("base 0")
	}},
	{"batch-length-grown", func(int64) (int, byte) { return 9, 0x01 }},
	{"batch-length-changed", func(int64) (int, byte) { return 11, 0x08 }},
	{"epoch-bit-14", func(int64) (int, byte) { return 14, 0x40 }}, // 1900 -> 18284, as the chaos run saw
	{"epoch-sign", func(int64) (int, byte) { return 12, 0x80 }},
	{"epoch-low-bit", func(int64) (int, byte) { return 15, 0x01 }},
	{"magic", func(int64) (int, byte) { return 16, 0x01 }},
}

// TestActiveSegmentHeaderFlips flips bits in every header field that the
// CRC does not cover, in the last batch and in a middle batch of the active
// segment: recovery must cut the log at that batch, and say Damaged when
// the damage is followed by valid data (all fields but the length, whose
// flip hides where the next batch is) or when the lost batch was below the
// recovery point.
func TestActiveSegmentHeaderFlips(t *testing.T) {
	const n = 10
	for _, checkpoint := range []bool{false, true} {
		for _, target := range []int{6, n - 1} {
			for _, fl := range headerFlips {
				name := fmt.Sprintf("%s/batch-%d/checkpoint=%v", fl.name, target, checkpoint)
				t.Run(name, func(t *testing.T) {
					fs := vfs.NewMem()
					opts := Options{IndexIntervalBytes: 100}
					l := openLog(t, fs, opts)
					var m model
					for i := range n {
						b := mkBatch(t, 2, int64(i), 20)
						base, err := l.Append(b, []int32{1833, 1900}[i/5])
						if err != nil {
							t.Fatal(err)
						}
						m.add(b, base)
					}
					if checkpoint {
						l.Sync()
						if err := l.CheckpointRecoveryPoint(); err != nil {
							t.Fatal(err)
						}
					}
					l.Close()
					name := segName(testDir, 0, logSuffix)
					data := mustRead(t, fs, name)
					pos := len(m.bytesFrom(0)) - len(m.bytesFrom(target))
					i, mask := fl.at(m.bases[target])
					data[pos+i] ^= mask
					rewrite(t, fs, name, data)

					l = openLog(t, fs, opts)
					defer l.Close()
					r := l.Recovery()
					base := m.bases[target]
					if l.EndOffset() != base || r.LostFrom != base || r.DroppedBytes != int64(len(m.bytesFrom(target))) {
						t.Fatalf("end %d, report %+v; want the log cut at %d, %d bytes dropped", l.EndOffset(), r, base, len(m.bytesFrom(target)))
					}
					middle := target < n-1 && fl.name != "batch-length-grown" && fl.name != "batch-length-changed"
					if want := checkpoint || middle; r.Damaged != want || (r.Reason != "") != want {
						t.Fatalf("Damaged %v (%q), want %v", r.Damaged, r.Reason, want)
					}
					if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, bytes.Join(m.batches[:target], nil)) {
						t.Fatalf("kept %d bytes", len(got))
					}
					for _, e := range l.EpochHistory() {
						if e.StartOffset >= base {
							t.Fatalf("history %v beyond the end %d", l.EpochHistory(), base)
						}
					}
					if b, err := l.Append(mkBatch(t, 1, 99, 1), 1900); err != nil || b != base {
						t.Fatalf("append after recovery at %d: %v", b, err)
					}
				})
			}
		}
	}
}

// errorLog collects the records logged at level Error.
type errorLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *errorLog) WithAttrs(as []slog.Attr) slog.Handler { return &withAttrs{h, as} }
func (h *errorLog) WithGroup(string) slog.Handler         { return h }

type withAttrs struct {
	*errorLog
	as []slog.Attr
}

func (w *withAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(w.as...)
	return w.errorLog.Handle(ctx, r)
}

func (h *errorLog) attrs() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

// rolledLog writes 24 batches of 2 records, four to a segment, epochs
// changing every five batches; it returns the model and where each batch
// lies: its segment base and byte position there.
func rolledLog(t *testing.T, fs vfs.FS, opts Options) (m model, segOf []int64, posOf []int) {
	l := openLog(t, fs, opts)
	for i := range 24 {
		b := mkBatch(t, 2, int64(10*i), 40)
		base, err := l.Append(b, int32(i/5))
		if err != nil {
			t.Fatal(err)
		}
		m.add(b, base)
	}
	l.Sync()
	if err := l.CheckpointRecoveryPoint(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, base := range segmentBases(t, fs) {
		data := mustRead(t, fs, segName(testDir, base, logSuffix))
		for pos := 0; pos < len(data); {
			segOf = append(segOf, base)
			posOf = append(posOf, pos)
			pos += recordbatch.LengthOverhead + int(int32(be32(data[pos+8:])))
		}
	}
	if len(segOf) != len(m.bases) || len(segmentBases(t, fs)) != 6 {
		t.Fatalf("%d batches in %d segments", len(segOf), len(segmentBases(t, fs)))
	}
	return m, segOf, posOf
}

// TestRolledSegmentDamage damages the third of six segments (a flipped
// body bit, CRC bit or epoch bit, a raised base offset of its last batch, a
// cut inside its last batch, a cut of its whole last batch). Without
// VerifyAll, Open succeeds and reads of the damaged range fail with
// ErrCorrupt (where reads can tell). With VerifyAll the log is cut at the
// damaged batch, the later segments go, the report says Damaged, and an
// Error names the segment, the position and the offsets lost.
func TestRolledSegmentDamage(t *testing.T) {
	opts := Options{SegmentBytes: 650, IndexIntervalBytes: 100}
	const (
		readable   = iota // reads of the damaged batch fail with ErrCorrupt
		unreadable        // reads cannot tell (the header fields no CRC covers)
		found             // Open finds it anyway: the cut removed an indexed batch, so the indexes are rebuilt
	)
	cases := []struct {
		name    string
		batch   int // the damaged batch: the log is cut there
		without int // what happens without VerifyAll
		damage  func(data []byte, pos, size int) []byte
	}{
		{"flip-body", 9, readable, func(d []byte, pos, size int) []byte { d[pos+recordbatch.HeaderSize+7] ^= 0x10; return d }},
		{"flip-crc", 9, readable, func(d []byte, pos, size int) []byte { d[pos+18] ^= 0x01; return d }},
		{"flip-epoch", 9, unreadable, func(d []byte, pos, size int) []byte { d[pos+15] ^= 0x02; return d }},
		// Bases are even, so these raise them by one: the epoch rule sees
		// nothing, but the next batch would overlap (middle), or the batch
		// would reach the next segment's base (last).
		{"raise-base-of-middle", 9, unreadable, func(d []byte, pos, size int) []byte { d[pos+7] ^= 0x01; return d }},
		{"raise-base-of-last", 11, unreadable, func(d []byte, pos, size int) []byte { d[pos+7] ^= 0x01; return d }},
		{"raise-base-of-last-far", 11, unreadable, func(d []byte, pos, size int) []byte { d[pos+6] ^= 0x01; return d }},
		{"cut-inside-last", 11, readable, func(d []byte, pos, size int) []byte { return d[:pos+size/2] }},
		{"cut-whole-last", 11, found, func(d []byte, pos, size int) []byte { return d[:pos] }},
	}
	for _, c := range cases {
		for _, all := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/VerifyAll=%v", c.name, all), func(t *testing.T) {
				fs := vfs.NewMem()
				m, segOf, posOf := rolledLog(t, fs, opts)
				seg := segOf[c.batch]
				if seg != segOf[8] || segOf[12] == seg || (c.batch == 11) != (segOf[c.batch+1] != seg) {
					t.Fatalf("batch %d is not where the test expects it", c.batch)
				}
				name := segName(testDir, seg, logSuffix)
				rewrite(t, fs, name, c.damage(mustRead(t, fs, name), posOf[c.batch], len(m.batches[c.batch])))
				var onDisk int64
				for _, b := range segmentBases(t, fs) {
					onDisk += int64(len(mustRead(t, fs, segName(testDir, b, logSuffix))))
				}

				errs := &errorLog{}
				o := opts
				o.FS, o.Logger, o.RetentionMs, o.RetentionBytes, o.VerifyAll = fs, slog.New(errs), -1, -1, all
				o.Pool = testPool(fs)
				l, err := Open(testDir, o)
				if err != nil {
					t.Fatalf("Open failed on damaged data: %v", err)
				}
				defer l.Close()
				r := l.Recovery()
				cut := m.bases[c.batch]
				if !all && c.without != found {
					if r != clean || l.EndOffset() != m.bases[23]+2 {
						t.Fatalf("without VerifyAll: report %+v, end %d", r, l.EndOffset())
					}
					if b, err := l.Read(m.bases[8], 1, l.EndOffset()); err != nil || !bytes.Equal(b, m.batches[8]) {
						t.Fatalf("read before the damage: %v", err)
					}
					if b, err := l.Read(m.bases[12], 1, l.EndOffset()); err != nil || !bytes.Equal(b, m.batches[12]) {
						t.Fatalf("read after the damaged segment: %v", err)
					}
					if c.without == readable {
						if _, err := l.Read(cut, 1, l.EndOffset()); !errors.Is(err, ErrCorrupt) {
							t.Fatalf("read of the damaged batch: %v", err)
						}
						if _, _, _, err := l.OffsetForTimestamp(int64(10 * c.batch)); !errors.Is(err, ErrCorrupt) {
							t.Fatalf("timestamp lookup in the damaged batch: %v", err)
						}
					}
					return
				}
				if l.EndOffset() != cut || l.SegmentCount() != 3 {
					t.Fatalf("end %d with %d segments, want the log cut at %d in its third segment", l.EndOffset(), l.SegmentCount(), cut)
				}
				kept := int64(len(bytes.Join(m.batches[:c.batch], nil)))
				if !r.Damaged || r.Reason == "" || r.LostFrom != cut || r.DroppedBytes != onDisk-kept {
					t.Fatalf("report %+v, want Damaged, LostFrom %d, %d bytes dropped", r, cut, onDisk-kept)
				}
				if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, bytes.Join(m.batches[:c.batch], nil)) {
					t.Fatalf("kept %d bytes, want %d", len(got), kept)
				}
				if bases := segmentBases(t, fs); len(bases) != 3 || bases[2] != seg {
					t.Fatalf("segments left: %v", bases)
				}
				if h := l.EpochHistory(); h[len(h)-1].StartOffset >= cut {
					t.Fatalf("history %v reaches past the end %d", h, cut)
				}
				found := false
				for _, a := range errs.attrs() {
					if a["dir"] == testDir && a["base"] == fmt.Sprint(seg) && a["position"] == fmt.Sprint(posOf[c.batch]) &&
						a["lostFrom"] == fmt.Sprint(cut) && a["lostTo"] == fmt.Sprint(m.bases[23]+1) {
						found = true
					}
				}
				if !found {
					t.Fatalf("no error logged with the segment, position and offsets lost: %v", errs.attrs())
				}
				// The cut segment is the active one now: appends go on, and
				// the next open (VerifyAll or not) finds nothing to remove;
				// the recovery point above the end keeps the log Damaged.
				b := mkBatch(t, 1, 500, 5)
				if base, err := l.Append(b, 9); err != nil || base != cut {
					t.Fatalf("append at %d: %v", base, err)
				}
				l.Sync()
				want := stateOf(t, l)
				l.Close()
				for _, all := range []bool{false, true} {
					o.VerifyAll = all
					l, err := Open(testDir, o)
					if err != nil {
						t.Fatal(err)
					}
					if r := l.Recovery(); r.DroppedBytes != 0 || !r.Damaged {
						t.Fatalf("reopen: %+v", r)
					}
					if got := stateOf(t, l); !got.equal(want) {
						t.Fatal("reopen changed the log")
					}
					l.Close()
				}
			})
		}
	}
}

func readRecoveryFile(t testing.TB, fs vfs.FS) recoveryFile {
	t.Helper()
	var rf recoveryFile
	if err := json.Unmarshal(mustRead(t, fs, filepath.Join(testDir, recoveryFileName)), &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// TestRecoveryPoint covers the recovery point: losing checkpointed data is
// Damaged and stays so until the log grows past the point again;
// truncations lower it first, so neither a truncation nor a crash half way
// through one looks like damage; a missing or unreadable file is unknown;
// checkpoints write only changes and never lower the point.
func TestRecoveryPoint(t *testing.T) {
	opts := Options{SegmentBytes: 800, IndexIntervalBytes: 100}
	build := func(t *testing.T, n int) (*vfs.MemFS, *Log, model) {
		fs := vfs.NewMem()
		l := openLog(t, fs, opts)
		var m model
		for i := range n {
			b := mkBatch(t, 2, int64(i), 40)
			base, err := l.Append(b, int32(i/10))
			if err != nil {
				t.Fatal(err)
			}
			m.add(b, base)
		}
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := l.CheckpointRecoveryPoint(); err != nil {
			t.Fatal(err)
		}
		if rf := readRecoveryFile(t, fs); rf.Version != 1 || rf.Offset != int64(2*n) {
			t.Fatalf("recovery point file %+v", rf)
		}
		return fs, l, m
	}
	// cutActive cuts whole batches off the end of the active segment, as
	// a damaged disk might: no bad batch is left for recovery to see.
	cutActive := func(t *testing.T, fs vfs.FS, m model, keep int) {
		bases := segmentBases(t, fs)
		last := bases[len(bases)-1]
		name := segName(testDir, last, logSuffix)
		data := mustRead(t, fs, name)
		drop := len(m.bytesFrom(keep))
		if m.bases[keep] < last {
			t.Fatal("cut reaches past the active segment")
		}
		rewrite(t, fs, name, data[:len(data)-drop])
	}

	t.Run("synced-tail-cut-below-checkpoint", func(t *testing.T) {
		fs, l, m := build(t, 30)
		l.Close()
		cutActive(t, fs, m, 27)
		for range 2 { // Damaged persists across restarts
			l = openLog(t, fs, opts)
			r := l.Recovery()
			if !r.Damaged || r.Reason == "" || r.LostFrom != 54 || r.DroppedBytes != 0 || l.EndOffset() != 54 {
				t.Fatalf("report %+v end %d", r, l.EndOffset())
			}
			// A checkpoint does not lower the point below what was lost.
			if err := l.CheckpointRecoveryPoint(); err != nil || readRecoveryFile(t, fs).Offset != 60 {
				t.Fatalf("checkpoint lowered the point: %v %+v", err, readRecoveryFile(t, fs))
			}
			l.Close()
		}
		// Once the log has grown past the point again, it is sound.
		l = openLog(t, fs, opts)
		for range 4 {
			if _, err := l.Append(mkBatch(t, 2, 0, 1), 5); err != nil {
				t.Fatal(err)
			}
		}
		l.Sync()
		l.CheckpointRecoveryPoint()
		l.Close()
		l = openLog(t, fs, opts)
		defer l.Close()
		if r := l.Recovery(); r != clean {
			t.Fatalf("after growing past the point: %+v", r)
		}
	})

	t.Run("unsynced-tail-torn", func(t *testing.T) {
		// A torn tail beyond the recovery point is a crash, not damage.
		fs, l, m := build(t, 30)
		for range 3 {
			l.Append(mkBatch(t, 2, 0, 40), 2)
		}
		crashed := fs.CrashTorn(rand.New(rand.NewPCG(1, 2)))
		l = openLog(t, crashed, opts)
		defer l.Close()
		if r := l.Recovery(); r.Damaged || l.EndOffset() < m.bases[29]+2 {
			t.Fatalf("report %+v end %d", r, l.EndOffset())
		}
	})

	t.Run("legitimate-truncations", func(t *testing.T) {
		fs, l, _ := build(t, 30)
		if err := l.Truncate(51); err != nil { // inside batch 25: the end becomes 50
			t.Fatal(err)
		}
		if rf := readRecoveryFile(t, fs); rf.Offset != 50 {
			t.Fatalf("Truncate left the recovery point at %d", rf.Offset)
		}
		if err := l.Truncate(5); err != nil { // into a rolled segment
			t.Fatal(err)
		}
		if rf := readRecoveryFile(t, fs); rf.Offset != 4 {
			t.Fatalf("Truncate left the recovery point at %d", rf.Offset)
		}
		l.Close()
		l = openLog(t, fs, opts)
		if r := l.Recovery(); r != clean || l.EndOffset() != 4 {
			t.Fatalf("after Truncate: %+v end %d", r, l.EndOffset())
		}
		for range 10 {
			l.Append(mkBatch(t, 2, 0, 40), 7)
		}
		l.Sync()
		l.CheckpointRecoveryPoint()
		if err := l.TruncateFullyAndStartAt(3); err != nil {
			t.Fatal(err)
		}
		if rf := readRecoveryFile(t, fs); rf.Offset != 3 {
			t.Fatalf("TruncateFullyAndStartAt left the recovery point at %d", rf.Offset)
		}
		l.Close()
		l = openLog(t, fs, opts)
		defer l.Close()
		if r := l.Recovery(); r != clean || l.EndOffset() != 3 {
			t.Fatalf("after TruncateFullyAndStartAt: %+v end %d", r, l.EndOffset())
		}
	})

	t.Run("crash-between-lowering-and-cut", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			offset int64
			op     vfs.Op
			file   string
		}{
			{"active", 51, vfs.OpTruncate, ".log"},      // the cut of the active segment fails
			{"rolled", 5, vfs.OpRemove, ".log"},         // removing the later segments fails
			{"fully", 0, vfs.OpWrite, startFileName},    // TruncateFullyAndStartAt: writing the start fails
			{"written-only", 20, vfs.Op(-1), "no-such"}, // the lower point written by hand
		} {
			t.Run(c.name, func(t *testing.T) {
				fs, l, m := build(t, 30)
				switch c.name {
				case "written-only":
					b, _ := json.Marshal(recoveryFile{Version: 1, Offset: c.offset})
					if err := vfs.WriteFileAtomic(fs, filepath.Join(testDir, recoveryFileName), b); err != nil {
						t.Fatal(err)
					}
				case "fully":
					fs.FailNext(c.op, c.file, vfs.ErrInjected)
					if err := l.TruncateFullyAndStartAt(c.offset); !errors.Is(err, vfs.ErrInjected) {
						t.Fatalf("truncation did not fail: %v", err)
					}
				default:
					fs.FailNext(c.op, c.file, vfs.ErrInjected)
					if err := l.Truncate(c.offset); !errors.Is(err, vfs.ErrInjected) {
						t.Fatalf("truncation did not fail: %v", err)
					}
				}
				if rf := readRecoveryFile(t, fs); rf.Offset > c.offset {
					t.Fatalf("recovery point %d not lowered", rf.Offset)
				}
				l = openLog(t, fs.Crash(), opts)
				defer l.Close()
				if r := l.Recovery(); r != clean || l.EndOffset() != m.bases[29]+2 {
					t.Fatalf("report %+v end %d", r, l.EndOffset())
				}
			})
		}
	})

	t.Run("missing-or-unreadable", func(t *testing.T) {
		for _, content := range []string{"", "garbage", `{"version":2,"offset":5}`} {
			fs, l, m := build(t, 30)
			l.Close()
			name := filepath.Join(testDir, recoveryFileName)
			if content == "" {
				fs.Remove(name)
			} else {
				rewrite(t, fs, name, []byte(content))
			}
			cutActive(t, fs, m, 27)
			l = openLog(t, fs, opts)
			if r := l.Recovery(); r != clean {
				t.Fatalf("%q: unknown recovery point, yet %+v", content, r)
			}
			if err := l.CheckpointRecoveryPoint(); err != nil || readRecoveryFile(t, fs).Offset != 54 {
				t.Fatalf("checkpoint after an unknown point: %v", err)
			}
			l.Close()
		}
	})

	t.Run("checkpoint-writes-changes-only", func(t *testing.T) {
		fs, l, _ := build(t, 5)
		defer l.Close()
		writes := 0
		fs.SetHook(func(op vfs.Op, name string) error {
			if op == vfs.OpRename && filepath.Base(name) == recoveryFileName+".tmp" {
				writes++
			}
			return nil
		})
		defer fs.SetHook(nil)
		for range 3 {
			if err := l.CheckpointRecoveryPoint(); err != nil {
				t.Fatal(err)
			}
		}
		l.Append(mkBatch(t, 1, 0, 1), 0) // not durable yet: nothing changes
		l.CheckpointRecoveryPoint()
		if writes != 0 {
			t.Fatalf("%d writes without a change", writes)
		}
		l.Sync()
		l.CheckpointRecoveryPoint()
		l.CheckpointRecoveryPoint()
		if writes != 1 || readRecoveryFile(t, fs).Offset != 11 {
			t.Fatalf("%d writes, point %d", writes, readRecoveryFile(t, fs).Offset)
		}
	})
}

// TestRandomDamage appends random batches across epochs and rolls,
// checkpointing now and then, damages the data once (a random byte flipped
// or a random length cut off, in a random segment) and reopens with
// VerifyAll. Open must succeed; the log must be a prefix of what was
// written that ends before the damaged batch, with an epoch history that
// matches its batches; and Damaged must be set when the log lost a rolled
// segment's data or ends below the last checkpoint.
func TestRandomDamage(t *testing.T) {
	seeds := 150
	if testing.Short() || raceEnabled {
		seeds = 30
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomDamage(t, seed) })
	}
}

func randomDamage(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: int64(300 + rng.IntN(1500)), IndexIntervalBytes: 50 + rng.IntN(300)}
	l := openLog(t, fs, opts)
	var m model
	var epochs []int32
	epoch, rp := int32(rng.IntN(3)), int64(0)
	for step := range 40 + rng.IntN(80) {
		if rng.IntN(8) == 0 {
			epoch += 1 + int32(rng.IntN(3))
		}
		b := mkBatch(t, 1+rng.IntN(4), int64(step), rng.IntN(120))
		base, err := l.Append(b, epoch)
		if err != nil {
			t.Fatal(err)
		}
		m.add(b, base)
		epochs = append(epochs, epoch)
		if rng.IntN(10) == 0 {
			l.Sync()
			if err := l.CheckpointRecoveryPoint(); err != nil {
				t.Fatal(err)
			}
			rp = l.DurableEnd()
		}
	}
	l.Close()

	// Damage one segment.
	bases := segmentBases(t, fs)
	si := rng.IntN(len(bases))
	name := segName(testDir, bases[si], logSuffix)
	data := mustRead(t, fs, name)
	if len(data) == 0 {
		return
	}
	var at int // the first damaged byte
	kind := "flip"
	if rng.IntN(2) == 0 {
		at = rng.IntN(len(data))
		data[at] ^= byte(1 + rng.IntN(255))
	} else {
		kind = "cut"
		at = len(data) - 1 - rng.IntN(len(data))
		data = data[:at]
	}
	rewrite(t, fs, name, data)
	// The damaged batch: the one holding byte at of segment si.
	segStart := 0
	for i := range m.bases {
		if m.bases[i] >= bases[si] {
			segStart = len(m.bytesFrom(0)) - len(m.bytesFrom(i))
			break
		}
	}
	damaged := len(m.bases)
	for i := range m.bases {
		if pos := len(m.bytesFrom(0)) - len(m.bytesFrom(i)) - segStart; m.bases[i] >= bases[si] && pos+len(m.batches[i]) > at {
			damaged = i
			break
		}
	}

	opts.VerifyAll = true
	l = openLog(t, fs, opts)
	r := l.Recovery()
	end := l.EndOffset()
	kept := 0
	for kept < len(m.bases) && m.bases[kept] < end {
		kept++
	}
	t.Logf("%s at byte %d of segment %d of %d: kept %d of %d batches (damaged: %d), recovery point %d, %+v",
		kind, at, si, len(bases), kept, len(m.bases), damaged, rp, r)
	if kept > damaged {
		t.Fatalf("the damaged batch %d (offset %d) is still in the log, which ends at %d", damaged, m.bases[damaged], end)
	}
	want := int64(0)
	if kept > 0 {
		want = m.bases[kept-1] + lastDelta(m.batches[kept-1]) + 1
	}
	if end != want {
		t.Fatalf("end %d is not where batch %d ends (%d)", end, kept-1, want)
	}
	if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, m.bytesFrom(0)[:len(m.bytesFrom(0))-len(m.bytesFrom(kept))]) {
		t.Fatalf("the log is not a prefix of what was written")
	}
	var wantHist []EpochEntry
	for i := range kept {
		if i == 0 || epochs[i] != epochs[i-1] {
			wantHist = append(wantHist, EpochEntry{epochs[i], m.bases[i]})
		}
	}
	if h := l.EpochHistory(); !slices.Equal(h, wantHist) {
		t.Fatalf("history %v, want %v", h, wantHist)
	}
	if end < rp && !r.Damaged {
		t.Fatalf("the log ends at %d below its recovery point %d, yet %+v", end, rp, r)
	}
	if si < len(bases)-1 && kept < len(m.bases) && !r.Damaged {
		t.Fatalf("a rolled segment lost data, yet %+v", r)
	}
	if kept < len(m.bases) && r.LostFrom != end {
		t.Fatalf("report %+v, end %d", r, end)
	}
	// Recovery is done: appends go on and the next open removes nothing.
	if _, err := l.Append(mkBatch(t, 1, 0, 1), epoch+1); err != nil {
		t.Fatal(err)
	}
	l.Sync()
	st := stateOf(t, l)
	l.Close()
	l = openLog(t, fs, opts)
	defer l.Close()
	if r := l.Recovery(); r.DroppedBytes != 0 || !stateOf(t, l).equal(st) {
		t.Fatalf("second open: %+v", r)
	}
}

// TestTruncateCrashLeavesPrefix: a crash at the end of a Truncate into a
// rolled segment, after the cut but before the last directory fsync, must
// not bring back the removed later segments behind the cut one (a hole in
// the log).
func TestTruncateCrashLeavesPrefix(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 800, IndexIntervalBytes: 100}
	l := openLog(t, fs, opts)
	var m model
	for i := range 30 {
		b := mkBatch(t, 2, int64(i), 40)
		base, _ := l.Append(b, 0)
		m.add(b, base)
	}
	l.Sync()
	// Fail the directory fsync that follows the cut segment's fsync.
	synced := false
	fs.SetHook(func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpSync && filepath.Ext(name) == logSuffix:
			synced = true
		case op == vfs.OpSyncDir && synced:
			return vfs.ErrInjected
		}
		return nil
	})
	if err := l.Truncate(13); !errors.Is(err, vfs.ErrInjected) { // batch 6, in the second segment
		t.Fatalf("truncate: %v", err)
	}
	fs.SetHook(nil)
	l = openLog(t, fs.Crash(), opts)
	defer l.Close()
	if r := l.Recovery(); r != clean || l.EndOffset() != 12 || l.SegmentCount() != 2 {
		t.Fatalf("end %d, %d segments, recovery %+v after the crash", l.EndOffset(), l.SegmentCount(), r)
	}
	if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, bytes.Join(m.batches[:6], nil)) {
		t.Fatal("the log is not the truncated prefix")
	}
}

// TestCompactRefusesCorruptBatch: compaction re-encodes batches under a
// fresh CRC, so it must stop at a corrupt one rather than launder it.
func TestCompactRefusesCorruptBatch(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 200, IndexIntervalBytes: 50}
	l := openLog(t, fs, opts)
	plain := recordbatch.BatchOptions{ProducerID: -1}
	for i, k := range []string{"a", "b", "a", "b", "c", "d"} {
		if _, err := l.Append(keyed(t, plain, int64(i), k, "value"), 0); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	name := segName(testDir, 0, logSuffix)
	data := mustRead(t, fs, name)
	data[len(data)-2] ^= 0x20 // in the value of the first segment's last batch
	rewrite(t, fs, name, data)
	l = openLog(t, fs, opts)
	defer l.Close()
	if _, err := l.Compact(time.UnixMilli(100), CompactOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("compaction over a corrupt batch: %v", err)
	}
	if !bytes.Equal(mustRead(t, fs, name), data) {
		t.Fatal("compaction rewrote the damaged segment")
	}
}

// TestUnreadableSmallFiles: a damaged epoch history or start offset file
// must not stop the log from opening either; each is ignored, with an
// error logged.
func TestUnreadableSmallFiles(t *testing.T) {
	for _, file := range []string{epochFileName, startFileName} {
		fs := vfs.NewMem()
		l := openLog(t, fs, Options{})
		for range 3 {
			l.Append(mkBatch(t, 1, 0, 1), 4)
		}
		l.Close()
		rewrite(t, fs, filepath.Join(testDir, file), []byte("{not json"))
		errs := &errorLog{}
		l, err := Open(testDir, Options{FS: fs, Pool: testPool(fs), Logger: slog.New(errs), RetentionMs: -1, RetentionBytes: -1})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if l.EndOffset() != 3 || len(errs.attrs()) == 0 || (file == epochFileName) != (l.LatestEpoch() == -1) {
			t.Fatalf("%s: end %d, epoch %d, errors %v", file, l.EndOffset(), l.LatestEpoch(), errs.attrs())
		}
		l.Close()
	}
}

// TestCheckpointDuringTruncate: a checkpoint running alongside truncations
// must never leave a recovery point above the log end (which a crash would
// then report as Damaged): Truncate lowers the point and cuts while no
// checkpoint can write one it took before the cut.
func TestCheckpointDuringTruncate(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 2000, IndexIntervalBytes: 100})
	defer l.Close()
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := l.CheckpointRecoveryPoint(); err != nil {
				done <- err
				return
			}
		}
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		for range 1 + rng.IntN(4) {
			if _, err := l.Append(mkBatch(t, 1+rng.IntN(3), int64(i), 20), 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := l.Truncate(l.EndOffset() - 1 - rng.Int64N(min(l.EndOffset(), 8))); err != nil {
			t.Fatal(err)
		}
		if rf := readRecoveryFile(t, fs); rf.Offset > l.EndOffset() {
			t.Fatalf("step %d: recovery point %d above the end %d", i, rf.Offset, l.EndOffset())
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
