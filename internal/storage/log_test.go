package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// mkBatch builds a batch of n records with timestamps ts, ts+1, ... and
// values of valSize bytes.
func mkBatch(t testing.TB, n int, ts int64, valSize int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: ts + int64(i), Key: []byte(fmt.Sprint(i)), Value: bytes.Repeat([]byte{byte(ts + int64(i))}, valSize)}
	}
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openLog(t testing.TB, fs vfs.FS, opts Options) *Log {
	t.Helper()
	opts.FS = fs
	opts.Logger = quiet
	if opts.Pool == nil {
		opts.Pool = testPool(fs)
	}
	if opts.RetentionBytes == 0 {
		opts.RetentionBytes = -1
	}
	if opts.RetentionMs == 0 {
		opts.RetentionMs = -1
	}
	l, err := Open("data/topic-0", opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// model tracks what the log should hold.
type model struct {
	batches [][]byte // stored bytes, in order
	bases   []int64
}

func (m *model) add(b []byte, base int64) {
	m.batches = append(m.batches, bytes.Clone(b))
	m.bases = append(m.bases, base)
}

// readAll reads from offset to the end and returns the concatenated bytes.
func readAll(t testing.TB, l *Log, from int64, maxBytes int) []byte {
	t.Helper()
	var out []byte
	off := from
	for {
		b, err := l.Read(off, maxBytes, l.EndOffset())
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if b == nil {
			return out
		}
		batches, err := splitStored(b)
		if err != nil {
			t.Fatalf("read %d returned bad batches: %v", off, err)
		}
		out = append(out, b...)
		h, _ := recordbatch.ParseHeader(batches[len(batches)-1])
		off = h.LastOffset() + 1
	}
}

func splitStored(b []byte) ([][]byte, error) { return recordbatch.Split(b) }

func (m *model) bytesFrom(i int) []byte {
	var out []byte
	for _, b := range m.batches[i:] {
		out = append(out, b...)
	}
	return out
}

func TestAppendReadAcrossRolls(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 2000, IndexIntervalBytes: 300})
	var m model
	for i := range 200 {
		b := mkBatch(t, 1+i%4, int64(1000+i*10), 10+i%50)
		base, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.bases) > 0 {
			h, _ := recordbatch.ParseHeader(m.batches[len(m.batches)-1])
			if base != h.LastOffset()+1 {
				t.Fatalf("base %d after last %d", base, h.LastOffset())
			}
		}
		m.add(b, base)
	}
	if l.SegmentCount() < 5 {
		t.Fatalf("only %d segments", l.SegmentCount())
	}
	check := func(l *Log) {
		t.Helper()
		for i, base := range m.bases {
			h, _ := recordbatch.ParseHeader(m.batches[i])
			for _, off := range []int64{base, h.LastOffset()} {
				b, err := l.Read(off, 1, l.EndOffset())
				if err != nil || !bytes.Equal(b, m.batches[i]) {
					t.Fatalf("read %d: got %d bytes, %v", off, len(b), err)
				}
			}
		}
		if got := readAll(t, l, 0, 1000); !bytes.Equal(got, m.bytesFrom(0)) {
			t.Fatal("readAll mismatch")
		}
		if int(l.Size()) != len(m.bytesFrom(0)) {
			t.Fatalf("size %d want %d", l.Size(), len(m.bytesFrom(0)))
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, Options{SegmentBytes: 2000, IndexIntervalBytes: 300})
	check(l)
	// Still appendable after reopen.
	b := mkBatch(t, 2, 5, 5)
	base, err := l.Append(b, 0)
	if err != nil || base != m.bases[len(m.bases)-1]+int64(len(m.bases)%1)+lastDelta(m.batches[len(m.batches)-1])+1 {
		t.Fatalf("append after reopen: %d %v", base, err)
	}
	m.add(b, base)
	check(l)
	l.Close()
}

func lastDelta(b []byte) int64 {
	h, _ := recordbatch.ParseHeader(b)
	return int64(h.LastOffsetDelta)
}

func TestReadMaxBytesAndLimit(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	var m model
	for i := range 10 {
		b := mkBatch(t, 2, int64(i), 100)
		base, _ := l.Append(b, 0)
		m.add(b, base)
	}
	sz := len(m.batches[0])
	// maxBytes smaller than a batch: still one whole batch (KIP-74).
	if b, _ := l.Read(0, 1, 100); !bytes.Equal(b, m.batches[0]) {
		t.Fatal("at least one batch")
	}
	// Offset in the middle of a batch returns that batch.
	if b, _ := l.Read(3, sz, 100); !bytes.Equal(b, m.batches[1]) {
		t.Fatal("mid-batch read")
	}
	// maxBytes of 2.5 batches gives 2 whole batches.
	if b, _ := l.Read(0, sz*5/2, 100); !bytes.Equal(b, m.bytesFrom(0)[:2*sz]) {
		t.Fatalf("maxBytes: got %d bytes", len(b))
	}
	// Limit cuts before the batch at base 6.
	if b, _ := l.Read(0, 1<<20, 6); !bytes.Equal(b, m.bytesFrom(0)[:3*sz]) {
		t.Fatalf("limit: got %d bytes", len(b))
	}
	// Limit inside a batch keeps that batch (its base is below limit).
	if b, _ := l.Read(0, 1<<20, 7); !bytes.Equal(b, m.bytesFrom(0)[:4*sz]) {
		t.Fatalf("limit mid batch: got %d bytes", len(b))
	}
	if b, err := l.Read(6, 1<<20, 6); b != nil || err != nil {
		t.Fatalf("at limit: %d %v", len(b), err)
	}
	if b, err := l.Read(20, 1<<20, 20); b != nil || err != nil {
		t.Fatalf("at end: %d %v", len(b), err)
	}
	if _, err := l.Read(21, 1<<20, 21); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past end: %v", err)
	}
	// The result is a fresh slice.
	b, _ := l.Read(0, 1, 100)
	b[0] ^= 0xff
	if b2, _ := l.Read(0, 1, 100); !bytes.Equal(b2, m.batches[0]) {
		t.Fatal("read aliases storage")
	}
}

func TestTornTailAndBitFlip(t *testing.T) {
	for _, kind := range []string{"truncated", "garbage", "bitflip", "zeros"} {
		t.Run(kind, func(t *testing.T) {
			fs := vfs.NewMem()
			l := openLog(t, fs, Options{IndexIntervalBytes: 100})
			var m model
			for i := range 20 {
				b := mkBatch(t, 3, int64(i), 50)
				base, _ := l.Append(b, 0)
				m.add(b, base)
			}
			l.Close()
			name := segName("data/topic-0", 0, logSuffix)
			data, _ := vfs.ReadFile(fs, name)
			last := len(m.batches[len(m.batches)-1])
			switch kind {
			case "truncated":
				data = data[:len(data)-last/2]
			case "garbage":
				data = append(data, []byte("this is not a batch at all, just noise.....................................")...)
			case "bitflip":
				data[len(data)-10] ^= 0x04
			case "zeros":
				data = append(data, make([]byte, 500)...)
			}
			f, _ := fs.Create(name)
			f.Write(data)
			f.Close()
			l = openLog(t, fs, Options{IndexIntervalBytes: 100})
			defer l.Close()
			keep := len(m.batches)
			if kind != "garbage" && kind != "zeros" {
				keep--
			}
			if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, bytes.Join(m.batches[:keep], nil)) {
				t.Fatalf("kept %d bytes", len(got))
			}
			b := mkBatch(t, 1, 99, 1)
			base, err := l.Append(b, 0)
			if err != nil || base != int64(keep*3) {
				t.Fatalf("append after recovery: %d %v", base, err)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	l := openLog(t, fs, opts)
	var m model
	for i := range 60 {
		b := mkBatch(t, 2, int64(i), 40)
		base, _ := l.Append(b, int32(i/20))
		m.add(bytes.Clone(b), base)
	}
	segs := l.SegmentCount()
	// Offset 41 is inside batch 20 (offsets 40, 41): the whole batch goes.
	if err := l.Truncate(41); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != 40 || l.SegmentCount() >= segs {
		t.Fatalf("end %d segments %d->%d", l.EndOffset(), segs, l.SegmentCount())
	}
	if got := readAll(t, l, 0, 1<<20); !bytes.Equal(got, bytes.Join(m.batches[:20], nil)) {
		t.Fatal("content after truncate")
	}
	// Epoch 1 started at 40, so it is gone; epoch 2 too.
	if e := l.LatestEpoch(); e != 0 {
		t.Fatalf("latest epoch %d", e)
	}
	base, err := l.Append(mkBatch(t, 1, 1, 1), 5)
	if err != nil || base != 40 {
		t.Fatal(base, err)
	}
	l.Close()
	l = openLog(t, fs, opts)
	defer l.Close()
	if l.EndOffset() != 41 || l.LatestEpoch() != 5 {
		t.Fatalf("after reopen: end %d epoch %d", l.EndOffset(), l.LatestEpoch())
	}
	if err := l.Truncate(0); err != nil || l.EndOffset() != 0 || l.SegmentCount() != 1 {
		t.Fatalf("truncate to 0: %v end %d segs %d", err, l.EndOffset(), l.SegmentCount())
	}
	if f, e := l.EndOffsetForEpoch(5); f != -1 || e != -1 {
		t.Fatalf("epochs survive truncation to 0: %d %d", f, e)
	}
}

func TestDeleteRecordsAndRetention(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 1000, IndexIntervalBytes: 200}
	l := openLog(t, fs, opts)
	var m model
	for i := range 50 {
		b := mkBatch(t, 1, int64(i*1000), 100)
		base, _ := l.Append(b, 0)
		m.add(b, base)
	}
	segs := l.SegmentCount()
	if ns, err := l.DeleteRecords(17); err != nil || ns != 17 {
		t.Fatal(ns, err)
	}
	if _, err := l.Read(16, 100, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	if b, _ := l.Read(17, 1, 100); !bytes.Equal(b, m.batches[17]) {
		t.Fatal("read at start")
	}
	if l.SegmentCount() >= segs {
		t.Fatal("no segment removed")
	}
	if _, err := l.DeleteRecords(51); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, opts)
	if l.StartOffset() != 17 {
		t.Fatalf("start after reopen %d", l.StartOffset())
	}
	// Offsets 0..49 have timestamps i*1000. Retain 10s before now=50s:
	// segments whose max timestamp < 40000 go.
	l.Reconfigure(1000, 10_000, -1)
	n, err := l.EnforceRetention(time.UnixMilli(50_000))
	if err != nil || n == 0 {
		t.Fatal(n, err)
	}
	if s := l.StartOffset(); s > 41 || s < 30 {
		t.Fatalf("start after time retention %d", s)
	}
	if b, _ := l.Read(l.StartOffset(), 1, 100); b == nil {
		t.Fatal("nothing at start")
	}
	// Size retention: keep at least 500 bytes without going under.
	l.Reconfigure(1000, -1, 500)
	if _, err := l.EnforceRetention(time.UnixMilli(50_000)); err != nil {
		t.Fatal(err)
	}
	if l.Size() < 500 {
		t.Fatalf("size %d below retention", l.Size())
	}
	l.Reconfigure(1000, -1, 0)
	l.EnforceRetention(time.UnixMilli(50_000))
	if l.SegmentCount() != 1 {
		t.Fatal("active segment must stay")
	}
	start := l.StartOffset()
	l.Close()
	l = openLog(t, fs, opts)
	defer l.Close()
	if l.StartOffset() != start || l.EndOffset() != 50 {
		t.Fatalf("reopen: start %d end %d", l.StartOffset(), l.EndOffset())
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{SegmentBytes: 3000, IndexIntervalBytes: 150})
	defer l.Close()
	// Batch i holds 3 records at timestamps 100*i + 0,1,2; batch 7 uses
	// gzip to exercise decoding a compressed batch.
	for i := range 40 {
		recs := []recordbatch.Record{{Timestamp: int64(100 * i)}, {Timestamp: int64(100*i + 1)}, {Timestamp: int64(100*i + 2)}}
		codec := recordbatch.CodecNone
		if i == 7 {
			codec = recordbatch.CodecGzip
		}
		b, _ := recordbatch.Encode(recordbatch.BatchOptions{Codec: codec}, recs)
		l.Append(b, 0)
	}
	for _, c := range []struct{ ts, off, gotTs int64 }{
		{-5, 0, 0}, {0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 100}, {701, 22, 701}, {702, 23, 702},
		{1550, 48, 1600}, {3902, 119, 3902},
	} {
		off, ts, ok, err := l.OffsetForTimestamp(c.ts)
		if err != nil || !ok || off != c.off || ts != c.gotTs {
			t.Errorf("ts %d: got %d@%d ok=%v %v, want %d@%d", c.ts, off, ts, ok, err, c.off, c.gotTs)
		}
	}
	if _, _, ok, _ := l.OffsetForTimestamp(3903); ok {
		t.Error("found past the max")
	}
	if off, ts, ok, _ := l.MaxTimestamp(); !ok || off != 119 || ts != 3902 {
		t.Errorf("max timestamp %d@%d", off, ts)
	}
	l.DeleteRecords(50)
	if off, _, ok, _ := l.OffsetForTimestamp(0); !ok || off != 50 {
		t.Errorf("below start: %d", off)
	}
}

func TestEpochHistory(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{})
	if f, e := l.EndOffsetForEpoch(0); f != -1 || e != -1 {
		t.Fatal("empty history")
	}
	// Epoch 1: offsets 0-9, epoch 3: 10-19, epoch 6: 20-29.
	for _, ep := range []int32{1, 3, 6} {
		for range 5 {
			if _, err := l.Append(mkBatch(t, 2, 0, 1), ep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.Append(mkBatch(t, 1, 0, 1), 2); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale epoch: %v", err)
	}
	cases := []struct {
		req, epoch int32
		end        int64
	}{
		{0, -1, -1}, {1, 1, 10}, {2, 1, 10}, {3, 3, 20}, {4, 3, 20}, {5, 3, 20}, {6, 6, 30}, {9, 6, 30},
	}
	chk := func(l *Log) {
		t.Helper()
		for _, c := range cases {
			if f, e := l.EndOffsetForEpoch(c.req); f != c.epoch || e != c.end {
				t.Errorf("epoch %d: got %d/%d want %d/%d", c.req, f, e, c.epoch, c.end)
			}
		}
	}
	chk(l)
	if s, ok := l.EpochStartOffset(3); !ok || s != 10 {
		t.Fatal(s, ok)
	}
	l.Close()
	l = openLog(t, fs, Options{})
	chk(l)
	// Replica append with a newer epoch extends the history; a mismatched
	// base offset is refused.
	b := mkBatch(t, 2, 0, 1)
	recordbatch.SetBaseOffset(b, 30)
	recordbatch.SetPartitionLeaderEpoch(b, 8)
	if err := l.AppendReplica(b); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendReplica(b); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatal(err)
	}
	if f, e := l.EndOffsetForEpoch(7); f != 6 || e != 30 {
		t.Fatalf("KIP-279: %d %d", f, e)
	}
	if f, e := l.EndOffsetForEpoch(8); f != 8 || e != 32 {
		t.Fatalf("latest: %d %d", f, e)
	}
	// Truncating into epoch 3 drops 6 and 8.
	if err := l.Truncate(15); err != nil {
		t.Fatal(err)
	}
	if f, e := l.EndOffsetForEpoch(9); f != 3 || e != 14 {
		t.Fatalf("after truncate: %d %d", f, e)
	}
	// DeleteRecords moves the first entry's start forward.
	l.DeleteRecords(12)
	if h := l.EpochHistory(); len(h) != 1 || h[0] != (EpochEntry{3, 12}) {
		t.Fatalf("history %v", h)
	}
	l.Close()
}

func TestSyncErrorSurfaced(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{})
	defer l.Close()
	l.Append(mkBatch(t, 1, 0, 10), 0)
	if !l.Dirty() {
		t.Fatal("not dirty after append")
	}
	fs.FailNext(vfs.OpSync, ".log", vfs.ErrInjected)
	if _, err := l.Sync(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("sync error not surfaced: %v", err)
	}
	if l.DurableEnd() != 0 {
		t.Fatal("durable end advanced on failure")
	}
	// Sticky: a later fsync must not claim durability.
	if _, err := l.Sync(); err == nil {
		t.Fatal("second sync succeeded after a failed one")
	}
}

func TestSyncAdvancesDurable(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 500})
	defer l.Close()
	for range 10 {
		l.Append(mkBatch(t, 1, 0, 100), 0)
	}
	// Rolls fsync sealed segments, so some data is durable already.
	if l.DurableEnd() == 0 || l.DurableEnd() >= 10 {
		t.Fatalf("durable %d", l.DurableEnd())
	}
	d, err := l.Sync()
	if err != nil || d != 10 || l.Dirty() {
		t.Fatal(d, err)
	}
}

// TestCrashRandomized applies random appends, syncs, truncations, deletes
// and reopens, crashing (optionally tearing unsynced writes) at random, and
// checks after each crash that every synced batch is intact, offsets are
// contiguous, and the log accepts appends.
func TestCrashRandomized(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashRun(t, seed) })
	}
}

func crashRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: int64(300 + rng.IntN(3000)), IndexIntervalBytes: 50 + rng.IntN(500)}
	l := openLog(t, fs, opts)
	var m model  // everything appended (not truncated) so far
	durable := 0 // batches in m known durable
	epoch := int32(0)
	for step := range 300 {
		switch r := rng.IntN(100); {
		case r < 60:
			if rng.IntN(20) == 0 {
				epoch++
			}
			b := mkBatch(t, 1+rng.IntN(5), int64(step), rng.IntN(200))
			base, err := l.Append(b, epoch)
			if err != nil {
				t.Fatal(err)
			}
			m.add(b, base)
		case r < 75:
			d, err := l.Sync()
			if err != nil {
				t.Fatal(err)
			}
			durable = 0
			for durable < len(m.bases) && m.bases[durable] < d {
				durable++
			}
			if durable != len(m.bases) {
				t.Fatalf("sync returned %d, not the end", d)
			}
		case r < 78 && len(m.bases) > 0:
			i := rng.IntN(len(m.bases))
			off := m.bases[i] + rng.Int64N(lastDelta(m.batches[i])+1)
			if off < l.StartOffset() {
				continue
			}
			if err := l.Truncate(off); err != nil {
				t.Fatal(err)
			}
			m.batches, m.bases = m.batches[:i], m.bases[:i]
			durable = min(durable, i)
		case r < 80:
			l.Close()
			l = openLog(t, fs, opts)
			durable = len(m.bases) // Open fsyncs what it recovered.
		case r < 95:
			var crashed *vfs.MemFS
			if rng.IntN(2) == 0 {
				crashed = fs.Crash()
			} else {
				crashed = fs.CrashTorn(rng)
			}
			fs = crashed
			l = openLog(t, fs, opts) // the old handle is abandoned, as in a real crash
			end := l.EndOffset()
			// Surviving batches: a prefix of m at least as long as durable.
			n := 0
			for n < len(m.bases) && m.bases[n]+lastDelta(m.batches[n]) < end {
				n++
			}
			if n < durable {
				t.Fatalf("step %d: lost synced data: %d batches left, %d were durable", step, n, durable)
			}
			if n < len(m.bases) && m.bases[n] != end || n == len(m.bases) && len(m.bases) > 0 && m.bases[n-1]+lastDelta(m.batches[n-1])+1 != end {
				t.Fatalf("step %d: log end %d is not a batch boundary", step, end)
			}
			m.batches, m.bases = m.batches[:n], m.bases[:n]
			durable = n
			if l.DurableEnd() != end {
				t.Fatalf("durable end %d after open, end %d", l.DurableEnd(), end)
			}
			if e := l.LatestEpoch(); e > epoch {
				t.Fatalf("epoch %d from the future", e)
			}
			epoch = max(epoch, l.LatestEpoch())
		default:
			continue
		}
		verify(t, l, &m)
	}
	l.Close()
}

func verify(t *testing.T, l *Log, m *model) {
	t.Helper()
	start := l.StartOffset()
	i := 0
	for i < len(m.bases) && m.bases[i]+lastDelta(m.batches[i]) < start {
		i++
	}
	if i < len(m.bases) {
		if got := readAll(t, l, max(start, m.bases[i]), 700); !bytes.Equal(got, m.bytesFrom(i)) {
			t.Fatalf("content mismatch: %d bytes, want %d", len(got), len(m.bytesFrom(i)))
		}
	}
	want := int64(0)
	if n := len(m.bases); n > 0 {
		want = m.bases[n-1] + lastDelta(m.batches[n-1]) + 1
	}
	if l.EndOffset() != want {
		t.Fatalf("end %d want %d", l.EndOffset(), want)
	}
	if l.DurableEnd() > l.EndOffset() {
		t.Fatalf("durable %d beyond end %d", l.DurableEnd(), l.EndOffset())
	}
}

func TestConcurrentReadersAndAppender(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{SegmentBytes: 5000, IndexIntervalBytes: 200})
	defer l.Close()
	done := make(chan struct{})
	errc := make(chan error, 4)
	for range 3 {
		go func() {
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				end := l.EndOffset()
				off := int64(0)
				for off < end {
					b, err := l.Read(off, 1000, end)
					if err != nil {
						errc <- err
						return
					}
					bs, err := recordbatch.Split(b)
					if err != nil {
						errc <- fmt.Errorf("partial batch observed: %w", err)
						return
					}
					h, _ := recordbatch.ParseHeader(bs[len(bs)-1])
					off = h.LastOffset() + 1
				}
				l.Sync()
			}
		}()
	}
	for i := range 500 {
		if _, err := l.Append(mkBatch(t, 2, int64(i), 50), 0); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), Options{Logger: quiet, RetentionMs: -1, RetentionBytes: -1, Pool: testPool(vfs.Default)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := mkBatch(b, 1, 0, 1024-recordbatch.HeaderSize-10)
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		if _, err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	l, err := Open(b.TempDir(), Options{Logger: quiet, RetentionMs: -1, RetentionBytes: -1, Pool: testPool(vfs.Default)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := mkBatch(b, 1, 0, 1024-recordbatch.HeaderSize-10)
	const n = 10000
	for range n {
		l.Append(batch, 0)
	}
	b.SetBytes(int64(len(batch)))
	i := int64(0)
	for b.Loop() {
		if _, err := l.Read(i%n, 1, n); err != nil {
			b.Fatal(err)
		}
		i += 7919
	}
}

// BenchmarkOpenVerifyAll measures a start that verifies every segment (the
// broker's Open): 256 MiB of 16 KiB batches in 16 MiB segments, read back
// from the page cache. MB/s is the verification rate.
func BenchmarkOpenVerifyAll(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Logger: quiet, RetentionMs: -1, RetentionBytes: -1, SegmentBytes: 16 << 20}
	l, err := Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	batch := mkBatch(b, 16, 0, 1024-10)
	const total = 256 << 20
	for written := 0; written < total; written += len(batch) {
		if _, err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	size := l.Size()
	l.Close()
	opts.VerifyAll = true
	b.SetBytes(size)
	for b.Loop() {
		l, err := Open(dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		if r := l.Recovery(); r.DroppedBytes != 0 || r.Damaged {
			b.Fatalf("a sound log lost data at open: %+v", r)
		}
		l.Close()
	}
}

// TestReadInto: ReadInto returns what Read returns, in dst's memory when
// dst is large enough, and in new memory otherwise.
func TestReadInto(t *testing.T) {
	l, err := Open(t.TempDir(), Options{Logger: quiet, RetentionMs: -1, RetentionBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 10 {
		if _, err := l.Append(mkBatch(t, 3, 0, 100), 0); err != nil {
			t.Fatal(err)
		}
	}
	want, err := l.Read(0, 1<<20, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	got, err := l.ReadInto(big, 0, 1<<20, l.EndOffset())
	if err != nil || !bytes.Equal(got, want) || &got[0] != &big[0] {
		t.Fatalf("ReadInto a large buffer: equal=%v aliases=%v err=%v", bytes.Equal(got, want), len(got) > 0 && &got[0] == &big[0], err)
	}
	small := make([]byte, 10)
	got, err = l.ReadInto(small, 0, 1<<20, l.EndOffset())
	if err != nil || !bytes.Equal(got, want) || &got[0] == &small[0] {
		t.Fatalf("ReadInto a small buffer: equal=%v err=%v", bytes.Equal(got, want), err)
	}
}

// TestDeleteRecordsOnFullDisk: with no room for the start offset's file,
// DeleteRecords removes the segments first, which frees the room, and then
// persists the start; before, a full disk could never be freed this way.
func TestDeleteRecordsOnFullDisk(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 300})
	for range 10 {
		if _, err := l.Append(mkBatch(t, 1, 0, 100), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.SegmentCount()
	fs.FailNext(vfs.OpCreate, startFileName, fmt.Errorf("create: %w", syscall.ENOSPC))
	start, err := l.DeleteRecords(8)
	if err != nil || start != 8 {
		t.Fatalf("DeleteRecords on a full disk: start %d, %v", start, err)
	}
	if n := l.SegmentCount(); n >= segs {
		t.Fatalf("%d segments before, %d after: nothing freed", segs, n)
	}
	l.Close()
	l = openLog(t, fs, Options{SegmentBytes: 300})
	defer l.Close()
	if s := l.StartOffset(); s != 8 {
		t.Fatalf("start %d after reopen, want 8", s)
	}
}

// StartEpoch persists an epoch's start at the log's end ahead of the
// epoch's first batch, which then writes no history of its own; it does
// nothing off the end or for an epoch the history has, and the history is
// what appending alone would have made.
func TestStartEpoch(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{})
	for range 3 {
		if _, err := l.Append(mkBatch(t, 2, 0, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	histories := 0 // writes to the history file, whole or appended
	fs.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && (strings.HasSuffix(name, epochFileName) || strings.HasSuffix(name, epochFileName+".tmp")) {
			histories++
		}
		return nil
	})
	// Off the end, or an epoch the history has: nothing.
	if err := l.StartEpoch(4, 5); err != nil || histories != 0 {
		t.Fatalf("start off the end: %v, %d histories written", err, histories)
	}
	if err := l.StartEpoch(1, 6); err != nil || histories != 0 {
		t.Fatalf("start of the latest epoch: %v, %d histories written", err, histories)
	}
	if err := l.StartEpoch(4, 6); err != nil || histories != 1 {
		t.Fatalf("start at the end: %v, %d histories written", err, histories)
	}
	if err := l.StartEpoch(4, 6); err != nil || histories != 1 {
		t.Fatalf("the same start again: %v, %d histories written", err, histories)
	}
	if base, err := l.Append(mkBatch(t, 2, 0, 1), 4); err != nil || base != 6 || histories != 1 {
		t.Fatalf("the epoch's first batch: base %d, %v, %d histories written; want 6, nil, 1", base, err, histories)
	}
	if _, err := l.Append(mkBatch(t, 1, 0, 1), 3); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a batch of an older epoch after the start: %v, want ErrStaleEpoch", err)
	}
	want := []EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 4, StartOffset: 6}}
	if got := l.EpochHistory(); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	l.Close()
	fs.SetHook(nil)
	l = openLog(t, fs, Options{})
	defer l.Close()
	if got := l.EpochHistory(); !slices.Equal(got, want) {
		t.Fatalf("history after reopening %v, want %v", got, want)
	}
	if err := l.StartEpoch(5, l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.StartEpoch(6, 8); !errors.Is(err, ErrClosed) {
		t.Fatalf("start on a closed log: %v, want ErrClosed", err)
	}
}
