package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// splitCompacted splits stored batches, checking framing, CRC and that the
// records decode with offsets inside their batch. Unlike recordbatch.Split
// it accepts compacted batches, whose record count is below
// lastOffsetDelta+1.
func splitCompacted(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < recordbatch.LengthOverhead {
			return nil, fmt.Errorf("%d trailing bytes", len(b))
		}
		n := recordbatch.LengthOverhead + int(int32(be32(b[8:])))
		if n < recordbatch.HeaderSize || n > len(b) {
			return nil, fmt.Errorf("batch of %d bytes, %d left", n, len(b))
		}
		h, err := recordbatch.Check(b[:n])
		if err != nil {
			return nil, err
		}
		recs, err := recordbatch.Records(b[:n], 1<<20)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("empty batch at %d", h.BaseOffset)
		}
		for i, r := range recs {
			if r.Offset < h.BaseOffset || r.Offset > h.LastOffset() || i > 0 && r.Offset <= recs[i-1].Offset {
				return nil, fmt.Errorf("record offset %d in batch [%d, %d]", r.Offset, h.BaseOffset, h.LastOffset())
			}
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out, nil
}

// crec is one record as written.
type crec struct {
	off     int64
	key     []byte // nil: null key
	val     []byte // nil: tombstone
	ts      int64
	hdrs    []recordbatch.RecordHeader
	batchTs int64 // the original batch's max timestamp
}

// cmodel tracks everything appended to a compacted log.
type cmodel struct {
	recs    map[int64]crec
	hdrs    map[int64]recordbatch.Header // original headers, by base offset
	latest  map[string]int64
	nullKey []int64
	end     int64
	horizon int64 // the largest tombstone horizon any pass used
}

func newCModel() *cmodel {
	return &cmodel{recs: map[int64]crec{}, hdrs: map[int64]recordbatch.Header{}, latest: map[string]int64{}, horizon: -1 << 62}
}

type cgen struct {
	rng   *rand.Rand
	nkeys int
	clock int64
	seq   map[int64]int32
	epoch int32
}

func (g *cgen) batch(t testing.TB) ([]byte, []recordbatch.Record) {
	t.Helper()
	rng := g.rng
	g.clock += 1 + rng.Int64N(20)
	recs := make([]recordbatch.Record, 1+rng.IntN(6))
	for i := range recs {
		r := &recs[i]
		r.Timestamp = g.clock + rng.Int64N(5)
		if rng.IntN(20) != 0 {
			r.Key = fmt.Appendf(nil, "k%d", rng.IntN(g.nkeys))
		}
		if rng.IntN(6) != 0 {
			r.Value = bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(100))
		}
		if rng.IntN(8) == 0 {
			r.Headers = []recordbatch.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}
		}
	}
	o := recordbatch.BatchOptions{ProducerID: -1, Codec: recordbatch.Codec(rng.IntN(5))}
	if rng.IntN(2) == 0 {
		o.Codec = recordbatch.CodecNone
	}
	if rng.IntN(2) == 0 {
		o.ProducerID = 1 + rng.Int64N(3)
		o.ProducerEpoch = int16(o.ProducerID)
		o.BaseSequence = g.seq[o.ProducerID]
		g.seq[o.ProducerID] += int32(len(recs))
	}
	b, err := recordbatch.Encode(o, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b, recs
}

func (m *cmodel) add(t testing.TB, b []byte, recs []recordbatch.Record, base int64) {
	t.Helper()
	h, err := recordbatch.ParseHeader(b)
	if err != nil || h.BaseOffset != base {
		t.Fatalf("appended batch: %v, base %d want %d", err, h.BaseOffset, base)
	}
	m.hdrs[base] = h
	for i, r := range recs {
		off := base + int64(i)
		m.recs[off] = crec{off: off, key: r.Key, val: r.Value, ts: r.Timestamp, hdrs: r.Headers, batchTs: h.MaxTimestamp}
		if r.Key == nil {
			m.nullKey = append(m.nullKey, off)
		} else {
			m.latest[string(r.Key)] = off
		}
	}
	m.end = h.LastOffset() + 1
}

// readLog reads the whole log in small reads and returns its batches and
// records.
func readLog(t testing.TB, l *Log) ([]recordbatch.Header, []recordbatch.Record) {
	t.Helper()
	var hs []recordbatch.Header
	var out []recordbatch.Record
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		b, err := l.Read(off, 300, end)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if b == nil {
			break
		}
		bs, err := splitCompacted(b)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		for _, batch := range bs {
			h, _ := recordbatch.ParseHeader(batch)
			if h.LastOffset() < off {
				t.Fatalf("read %d returned batch [%d, %d]", off, h.BaseOffset, h.LastOffset())
			}
			recs, _ := recordbatch.Records(batch, 1<<20)
			hs = append(hs, h)
			for _, r := range recs {
				r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
				out = append(out, r)
			}
			off = h.LastOffset() + 1
		}
	}
	return hs, out
}

// checkContent verifies what must hold at any time: every record is one that
// was written, at the offset it was written at, in order, batches keep their
// original headers, and the latest record of every key (unless an expired
// tombstone) and every null-key record are present.
func checkContent(t testing.TB, l *Log, m *cmodel) ([]recordbatch.Header, []recordbatch.Record) {
	t.Helper()
	if l.EndOffset() != m.end {
		t.Fatalf("end offset %d, want %d", l.EndOffset(), m.end)
	}
	hs, recs := readLog(t, l)
	for _, h := range hs {
		o, ok := m.hdrs[h.BaseOffset]
		if !ok {
			t.Fatalf("batch at %d was never written", h.BaseOffset)
		}
		if h.LastOffsetDelta != o.LastOffsetDelta || h.ProducerID != o.ProducerID || h.ProducerEpoch != o.ProducerEpoch ||
			h.BaseSequence != o.BaseSequence || h.Attributes != o.Attributes || h.PartitionLeaderEpoch != o.PartitionLeaderEpoch {
			t.Fatalf("batch at %d: header %+v, written %+v", h.BaseOffset, h, o)
		}
	}
	seen := map[int64]bool{}
	for i, r := range recs {
		if i > 0 && r.Offset <= recs[i-1].Offset {
			t.Fatalf("offsets out of order: %d after %d", r.Offset, recs[i-1].Offset)
		}
		w, ok := m.recs[r.Offset]
		if !ok || !bytes.Equal(r.Key, w.key) || (r.Key == nil) != (w.key == nil) || !bytes.Equal(r.Value, w.val) ||
			(r.Value == nil) != (w.val == nil) || r.Timestamp != w.ts || len(r.Headers) != len(w.hdrs) {
			t.Fatalf("record at %d: got key %q value %q ts %d, written %+v", r.Offset, r.Key, r.Value, r.Timestamp, w)
		}
		seen[r.Offset] = true
	}
	for _, off := range m.nullKey {
		if !seen[off] {
			t.Fatalf("null-key record %d lost", off)
		}
	}
	for k, off := range m.latest {
		if seen[off] {
			continue
		}
		if w := m.recs[off]; w.val != nil || w.ts >= m.horizon {
			t.Fatalf("latest record of %q at %d lost (tombstone=%v)", k, off, w.val == nil)
		}
	}
	return hs, recs
}

// checkCompacted verifies, right after a pass over every closed segment
// with the given tombstone horizon, that closed segments hold only latest
// records and no tombstone that had expired.
func checkCompacted(t testing.TB, l *Log, m *cmodel, recs []recordbatch.Record, horizon int64) {
	t.Helper()
	l.mu.RLock()
	activeBase := l.active().base
	l.mu.RUnlock()
	for _, r := range recs {
		if r.Offset >= activeBase || r.Key == nil {
			continue
		}
		if m.latest[string(r.Key)] != r.Offset {
			t.Fatalf("closed segments hold superseded record %d of %q (latest %d)", r.Offset, r.Key, m.latest[string(r.Key)])
		}
		if w := m.recs[r.Offset]; w.val == nil && w.batchTs < horizon {
			t.Fatalf("expired tombstone %d of %q kept", r.Offset, r.Key)
		}
	}
}

type segState struct {
	base, size, next, maxTs int64
	index                   []indexEntry
	tindex                  []timeEntry
}

func segStates(l *Log) []segState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []segState
	for _, s := range l.segs {
		out = append(out, segState{s.base, s.size, s.next, s.maxTs, slices.Clone(s.index), slices.Clone(s.tindex)})
	}
	return out
}

// countingHandler counts warnings, such as index rebuilds.
type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if testing.Verbose() {
		fmt.Println("warning:", r.Message)
	}
	h.n.Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

func openCounting(t testing.TB, fs vfs.FS, opts Options, warns *atomic.Int64) *Log {
	t.Helper()
	opts.FS = fs
	opts.Pool = testPool(fs)
	opts.Logger = slog.New(countingHandler{warns})
	opts.RetentionBytes, opts.RetentionMs = -1, -1
	l, err := Open("data/topic-0", opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkLookups checks Read at offsets in gaps and OffsetForTimestamp against
// the content.
func checkLookups(t testing.TB, rng *rand.Rand, l *Log, hs []recordbatch.Header, recs []recordbatch.Record) {
	t.Helper()
	end := l.EndOffset()
	for range 20 {
		if end == 0 {
			break
		}
		off := rng.Int64N(end)
		b, err := l.Read(off, 1, end)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		i := slices.IndexFunc(hs, func(h recordbatch.Header) bool { return h.LastOffset() >= off })
		if i < 0 {
			if b != nil {
				t.Fatalf("read %d past the last batch returned data", off)
			}
			continue
		}
		if b == nil || recordbatch.BaseOffset(b) != hs[i].BaseOffset {
			t.Fatalf("read %d: want the batch at %d", off, hs[i].BaseOffset)
		}
	}
	if len(recs) == 0 {
		return
	}
	lo, hi := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		lo, hi = min(lo, r.Timestamp), max(hi, r.Timestamp)
	}
	for range 10 {
		ts := lo - 2 + rng.Int64N(hi-lo+5)
		off, got, ok, err := l.OffsetForTimestamp(ts)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(recs, func(r recordbatch.Record) bool { return r.Timestamp >= ts })
		if i < 0 {
			if ok {
				t.Fatalf("ts %d: found %d, want none", ts, off)
			}
			continue
		}
		if !ok || off != recs[i].Offset || got != recs[i].Timestamp {
			t.Fatalf("ts %d: got %d@%d ok=%v, want %d@%d", ts, off, got, ok, recs[i].Offset, recs[i].Timestamp)
		}
	}
}

func activeBytes(t testing.TB, l *Log) (*segment, []byte) {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.active()
	b := make([]byte, s.size)
	if _, err := s.log.ReadAt(b, 0); err != nil && s.size > 0 {
		t.Fatal(err)
	}
	return s, b
}

func sameRecords(a, b []recordbatch.Record) bool {
	return slices.EqualFunc(a, b, func(x, y recordbatch.Record) bool {
		return x.Offset == y.Offset && bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value) && (x.Value == nil) == (y.Value == nil)
	})
}

// TestCompactRandomized appends random keyed batches (some compressed, some
// idempotent, with tombstones and null keys) to a log with small segments,
// compacts at random points with random tombstone retention and compaction
// lag, reopens, crashes, and injects I/O errors into compaction, checking
// the compaction invariants throughout.
func TestCompactRandomized(t *testing.T) {
	seeds, steps := 40, 400
	if testing.Short() {
		seeds = 8
	}
	if raceEnabled {
		seeds, steps = 2, 150
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { compactRun(t, seed, steps) })
	}
}

func compactRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: int64(2048 + rng.IntN(4096)), IndexIntervalBytes: 100 + rng.IntN(600)}
	var warns atomic.Int64
	l := openCounting(t, fs, opts, &warns)
	defer func() { l.Close() }()
	g := &cgen{rng: rng, nkeys: []int{5, 40, 300}[rng.IntN(3)], clock: 1_000_000, seq: map[int64]int32{}}
	m := newCModel()
	injected := false // a pass failed since the last reopen: indexes may be missing on disk
	// A pass failed and no later pass has run (which would sync the
	// directory): a crash may bring back a segment as it was before.
	unsynced := false

	compact := func(lag, drm int64) (CompactStats, int64) {
		t.Helper()
		now := time.UnixMilli(g.clock + rng.Int64N(50))
		horizon := int64(-1 << 62)
		if drm >= 0 {
			horizon = now.UnixMilli() - drm
		}
		as, ab := activeBytes(t, l)
		sizeBefore := l.Size()
		st, err := l.Compact(now, CompactOptions{DeleteRetentionMs: drm, MinCompactionLagMs: lag})
		if err != nil {
			t.Fatal(err)
		}
		unsynced = false
		m.horizon = max(m.horizon, horizon)
		if as2, ab2 := activeBytes(t, l); as2 != as || !bytes.Equal(ab, ab2) {
			t.Fatal("compaction touched the active segment")
		}
		if st.RecordsAfter > st.RecordsBefore || st.SegmentsRewritten > st.SegmentsExamined {
			t.Fatalf("stats %+v", st)
		}
		if got := sizeBefore - l.Size(); got != st.BytesBefore-st.BytesAfter {
			t.Fatalf("size shrank by %d, stats say %d", got, st.BytesBefore-st.BytesAfter)
		}
		return st, horizon
	}

	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 80:
			if rng.IntN(30) == 0 {
				g.epoch++
			}
			b, recs := g.batch(t)
			base, err := l.Append(b, g.epoch)
			if err != nil {
				t.Fatal(err)
			}
			m.add(t, b, recs, base)
		case r < 90:
			lag := int64(0)
			if rng.IntN(3) == 0 {
				lag = rng.Int64N(400)
			}
			drm := []int64{rng.Int64N(300), rng.Int64N(3000), -1, DefaultDeleteRetentionMs}[rng.IntN(4)]
			_, horizon := compact(lag, drm)
			_, recs := checkContent(t, l, m)
			if lag == 0 {
				checkCompacted(t, l, m, recs, horizon)
			}
		case r < 93:
			_, want := checkContent(t, l, m)
			before := segStates(l)
			l.Close()
			warns.Store(0)
			l = openCounting(t, fs, opts, &warns)
			if warns.Load() != 0 && !injected {
				t.Fatalf("step %d: reopen logged %d warnings (index rebuilds?)", step, warns.Load())
			}
			if after := segStates(l); !segStatesEqual(before, after) {
				t.Fatalf("step %d: segments differ after reopen:\n%+v\n%+v", step, before, after)
			}
			injected = false
			if _, got := checkContent(t, l, m); !sameRecords(got, want) {
				t.Fatalf("step %d: content differs after reopen", step)
			}
		case r < 96:
			// Crash after Compact and Sync: the durable state is the same.
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			_, want := checkContent(t, l, m)
			l2 := openCounting(t, fs.Crash(), opts, new(atomic.Int64))
			if _, got := checkContent(t, l2, m); !sameRecords(got, want) && !unsynced {
				t.Fatalf("step %d: content differs after crash", step)
			}
			l2.Close()
		default:
			// Fail one filesystem operation of a pass, then crash: the
			// running log and the recovered one must both be consistent.
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			n, fail := rng.IntN(20), atomic.Int64{}
			fs.SetHook(func(vfs.Op, string) error {
				if fail.Add(1) == int64(n) {
					return vfs.ErrInjected
				}
				return nil
			})
			now := time.UnixMilli(g.clock)
			drm := rng.Int64N(300)
			_, err := l.Compact(now, CompactOptions{DeleteRetentionMs: drm})
			fs.SetHook(nil)
			injected = injected || err != nil
			unsynced = unsynced || err != nil
			if err != nil && !errors.Is(err, vfs.ErrInjected) {
				t.Fatal(err)
			}
			m.horizon = max(m.horizon, now.UnixMilli()-drm)
			checkContent(t, l, m)
			l2 := openCounting(t, fs.Crash(), opts, new(atomic.Int64))
			checkContent(t, l2, m)
			hs, recs := readLog(t, l2)
			checkLookups(t, rng, l2, hs, recs)
			l2.Close()
		}
	}

	// A final full pass: closed segments then hold each key at most once.
	_, horizon := compact(0, rng.Int64N(500))
	hs, recs := checkContent(t, l, m)
	checkCompacted(t, l, m, recs, horizon)
	checkLookups(t, rng, l, hs, recs)
	l.mu.RLock()
	activeBase := l.active().base
	l.mu.RUnlock()
	keys := map[string]bool{}
	for _, r := range recs {
		if r.Offset < activeBase && r.Key != nil {
			if keys[string(r.Key)] {
				t.Fatalf("key %q twice in closed segments", r.Key)
			}
			keys[string(r.Key)] = true
		}
	}
	// Everything in the active segment is as written.
	for off := activeBase; off < m.end; off++ {
		if !slices.ContainsFunc(recs, func(r recordbatch.Record) bool { return r.Offset == off }) {
			t.Fatalf("active segment lost %d", off)
		}
	}
	// The index files on disk match: with them removed, Open rebuilds the
	// same indexes.
	before := segStates(l)
	l.Close()
	for _, s := range before {
		fs.Remove(segName("data/topic-0", s.base, indexSuffix))
		fs.Remove(segName("data/topic-0", s.base, timeIndexSuffix))
	}
	l = openCounting(t, fs, opts, &warns)
	if after := segStates(l); !segStatesEqual(before, after) {
		t.Fatalf("rebuilt indexes differ:\n%+v\n%+v", before, after)
	}
	if _, got := checkContent(t, l, m); !sameRecords(got, recs) {
		t.Fatal("content differs after rebuilding indexes")
	}
}

func segStatesEqual(a, b []segState) bool {
	return slices.EqualFunc(a, b, func(x, y segState) bool {
		return x.base == y.base && x.size == y.size && x.next == y.next && x.maxTs == y.maxTs &&
			slices.Equal(x.index, y.index) && slices.Equal(x.tindex, y.tindex)
	})
}

// TestCompactConcurrentReaders reads the whole log in a loop while Compact
// runs and an appender adds newer versions of the keys: every read returns
// valid batches with increasing offsets, and each key's newest version as
// of the start of the read is always found.
func TestCompactConcurrentReaders(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{SegmentBytes: 4096, IndexIntervalBytes: 300})
	defer l.Close()
	const nkeys = 50
	var mu sync.Mutex
	latest := make([]int, nkeys) // newest appended version of each key
	version := 0
	appendOne := func(rng *rand.Rand) {
		recs := make([]recordbatch.Record, 1+rng.IntN(4))
		mu.Lock()
		keys := make([]int, len(recs))
		for i := range recs {
			version++
			keys[i] = rng.IntN(nkeys)
			recs[i] = recordbatch.Record{Timestamp: int64(version), Key: fmt.Appendf(nil, "%d", keys[i]), Value: fmt.Appendf(nil, "%d", version)}
		}
		mu.Unlock()
		b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1, Codec: recordbatch.Codec(rng.IntN(5))}, recs)
		if err != nil {
			panic(err)
		}
		if _, err := l.Append(b, 0); err != nil {
			panic(err)
		}
		mu.Lock()
		for i, k := range keys {
			latest[k] = max(latest[k], atoi(recs[i].Value))
		}
		mu.Unlock()
	}
	initial, more := 600, 300
	if raceEnabled {
		initial, more = 200, 100
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range initial {
		appendOne(rng)
	}

	done := make(chan struct{})
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				mu.Lock()
				want := slices.Clone(latest)
				mu.Unlock()
				got := make([]int, nkeys)
				// Read up to the end as it moves: the version that
				// superseded one we want may be appended during the read.
				last := int64(-1)
				for off := int64(0); off < l.EndOffset(); {
					b, err := l.Read(off, 700, l.EndOffset())
					if err != nil {
						errc <- err
						return
					}
					if b == nil {
						break
					}
					bs, err := splitCompacted(b)
					if err != nil {
						errc <- fmt.Errorf("read %d: %w", off, err)
						return
					}
					for _, batch := range bs {
						recs, _ := recordbatch.Records(batch, 1<<20)
						for _, r := range recs {
							if r.Offset <= last {
								errc <- fmt.Errorf("offset %d after %d", r.Offset, last)
								return
							}
							last = r.Offset
							k := atoi(r.Key)
							got[k] = max(got[k], atoi(r.Value))
						}
						h, _ := recordbatch.ParseHeader(batch)
						off = h.LastOffset() + 1
					}
				}
				for k := range want {
					if got[k] < want[k] {
						errc <- fmt.Errorf("key %d: newest version seen %d, %d was appended before the read", k, got[k], want[k])
						return
					}
				}
			}
		})
	}
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		rng := rand.New(rand.NewPCG(3, 4))
		for range more {
			appendOne(rng)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var rewritten int
	for round := 0; ; round++ {
		st, err := l.Compact(time.Now(), CompactOptions{DeleteRetentionMs: -1})
		if err != nil {
			t.Fatal(err)
		}
		rewritten += st.SegmentsRewritten
		select {
		case <-appended:
		default:
			continue
		}
		if round >= 5 {
			break
		}
	}
	close(done)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if rewritten == 0 {
		t.Fatal("nothing was compacted")
	}
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		n = 10*n + int(c-'0')
	}
	return n
}

func keyed(t testing.TB, o recordbatch.BatchOptions, ts int64, kvs ...string) []byte {
	t.Helper()
	var recs []recordbatch.Record
	for i := 0; i < len(kvs); i += 2 {
		r := recordbatch.Record{Timestamp: ts, Key: []byte(kvs[i])}
		if kvs[i+1] != "" {
			r.Value = []byte(kvs[i+1])
		}
		recs = append(recs, r)
	}
	b, err := recordbatch.Encode(o, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCompactKeepsTransactionalAndTruncates checks that transactional and
// control batches survive untouched, that a segment emptied by compaction
// stays as a gap, and that truncating into a compacted segment survives a
// reopen.
func TestCompactKeepsTransactionalAndTruncates(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 100, IndexIntervalBytes: 50}
	l := openLog(t, fs, opts)
	plain := recordbatch.BatchOptions{ProducerID: -1}
	txn := recordbatch.BatchOptions{ProducerID: 9, ProducerEpoch: 1, Transactional: true}
	ctl := recordbatch.BatchOptions{ProducerID: 9, ProducerEpoch: 1, Transactional: true, Control: true}
	var stored [][]byte
	for _, b := range [][]byte{
		keyed(t, plain, 1, "a", "1", "b", "1"), // 0-1: both superseded: the batch goes
		keyed(t, txn, 2, "a", "t"),             // 2: kept whole
		keyed(t, ctl, 3, "a", "c"),             // 3: kept whole
		keyed(t, plain, 4, "c", "1", "a", "2"), // 4-5: c superseded
		keyed(t, plain, 5, "b", "2", "c", "2"), // 6-7: kept
		keyed(t, plain, 6, "d", "3"),           // 8: active, kept
	} {
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, bytes.Clone(b))
	}
	if n := l.SegmentCount(); n != 6 {
		t.Fatalf("want one batch per segment, have %d segments", n)
	}
	st, err := l.Compact(time.UnixMilli(10), CompactOptions{DeleteRetentionMs: DefaultDeleteRetentionMs})
	if err != nil {
		t.Fatal(err)
	}
	if st.SegmentsRewritten != 2 || st.RecordsBefore != 8 || st.RecordsAfter != 5 {
		t.Fatalf("stats %+v", st)
	}
	got := readAll2(t, l)
	if want := [][]byte{stored[1], stored[2], stored[4], stored[5]}; len(got) != 5 || !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) || !bytes.Equal(got[3], want[2]) || !bytes.Equal(got[4], want[3]) {
		t.Fatalf("got %d batches", len(got))
	}
	h, _ := recordbatch.ParseHeader(got[2])
	recs, _ := recordbatch.Records(got[2], 1<<20)
	if h.BaseOffset != 4 || h.LastOffsetDelta != 1 || len(recs) != 1 || recs[0].Offset != 5 || string(recs[0].Value) != "2" {
		t.Fatalf("rewritten batch %+v %+v", h, recs)
	}
	// Offsets 0 and 1 are a gap: reading them yields the batch at 2.
	if b, err := l.Read(0, 1, 100); err != nil || recordbatch.BaseOffset(b) != 2 {
		t.Fatalf("read in gap: %v", err)
	}
	if n := l.SegmentCount(); n != 6 {
		t.Fatalf("the emptied segment should stay, have %d segments", n)
	}

	// Truncating at 5 removes the batch 4-5 whole: its segment is now
	// the active one, and empty.
	if err := l.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if e := l.EndOffset(); e != 4 {
		t.Fatalf("end %d after truncating at 5", e)
	}
	l.Close()
	l = openLog(t, fs, opts)
	defer l.Close()
	if e := l.EndOffset(); e != 4 {
		t.Fatalf("end %d after reopen", e)
	}
	if got := readAll2(t, l); len(got) != 2 || !bytes.Equal(got[0], stored[1]) {
		t.Fatalf("after truncate and reopen: %d batches", len(got))
	}
}

// TestCompactGapInActiveSegment: a segment whose first batch compaction
// dropped becomes the active one by truncation; recovery must accept the
// gap at its start rather than cut the segment there.
func TestCompactGapInActiveSegment(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{SegmentBytes: 200, IndexIntervalBytes: 50}
	l := openLog(t, fs, opts)
	plain := recordbatch.BatchOptions{ProducerID: -1}
	for i, kv := range []string{"x", "y", "x", "z", "w"} {
		if _, err := l.Append(keyed(t, plain, int64(i), kv, "v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.SegmentCount(); n != 3 {
		t.Fatalf("want two batches per segment, have %d segments", n)
	}
	if _, err := l.Compact(time.UnixMilli(10), CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Truncate(2); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, opts)
	defer l.Close()
	if e := l.EndOffset(); e != 2 {
		t.Fatalf("end %d after reopen, want 2", e)
	}
	got := readAll2(t, l)
	if len(got) != 1 || recordbatch.BaseOffset(got[0]) != 1 {
		t.Fatalf("got %d batches", len(got))
	}
	if base, err := l.Append(keyed(t, plain, 9, "q", "v"), 0); err != nil || base != 2 {
		t.Fatalf("append at %d: %v", base, err)
	}
}

func readAll2(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		b, err := l.Read(off, 1, end)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		bs, err := splitCompacted(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(bs[0]))
		h, _ := recordbatch.ParseHeader(bs[0])
		off = h.LastOffset() + 1
	}
	return out
}

// TestCompactAbortsOnTruncation: a truncation while a pass runs may remove
// records the pass's key map relies on, so the pass must not swap anything.
func TestCompactAbortsOnTruncation(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 100})
	defer l.Close()
	for i := range 6 {
		if _, err := l.Append(keyed(t, recordbatch.BatchOptions{ProducerID: -1}, int64(i), "k", fmt.Sprint(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := readAll2(t, l)
	fs.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate {
			l.truncations.Add(1) // as if Truncate ran while the segment was being cleaned
		}
		return nil
	})
	_, err := l.Compact(time.UnixMilli(100), CompactOptions{})
	fs.SetHook(nil)
	if !errors.Is(err, ErrCompactionAborted) {
		t.Fatalf("got %v", err)
	}
	if got := readAll2(t, l); len(got) != len(before) {
		t.Fatal("an aborted pass changed the log")
	}
	names, _ := fs.ReadDir("data/topic-0")
	for _, n := range names {
		if bytes.HasSuffix([]byte(n), []byte(cleanedSuffix)) {
			t.Fatalf("left %s behind", n)
		}
	}
	st, err := l.Compact(time.UnixMilli(100), CompactOptions{})
	if err != nil || st.SegmentsRewritten != len(before)-1 {
		t.Fatalf("%+v %v", st, err)
	}
}

// TestReplicaCopiesCompactionGaps: a follower copying a compacted leader
// appends batches across the gaps the leader's compaction left. Without
// AllowGaps a gap is refused; with it the copy holds the leader's batches
// at their offsets, also after a power loss, and recovery still insists
// on contiguous offsets above the allowed bound.
func TestReplicaCopiesCompactionGaps(t *testing.T) {
	leaderFS := vfs.NewMem()
	opts := Options{SegmentBytes: 200, IndexIntervalBytes: 50}
	leader := openLog(t, leaderFS, opts)
	defer leader.Close()
	plain := recordbatch.BatchOptions{ProducerID: -1}
	for i, kv := range []string{"x", "y", "x", "y", "x", "z", "w", "v"} {
		if _, err := leader.Append(keyed(t, plain, int64(i), kv, "v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := leader.Compact(time.UnixMilli(10), CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	batches := readAll2(t, leader)
	gaps := 0
	for i := 1; i < len(batches); i++ {
		prev, _ := recordbatch.ParseHeader(batches[i-1])
		if recordbatch.BaseOffset(batches[i]) > prev.LastOffset()+1 {
			gaps++
		}
	}
	if first := recordbatch.BaseOffset(batches[0]); first != 0 {
		gaps++
	}
	if gaps == 0 {
		t.Fatalf("compaction left no gap among %d batches", len(batches))
	}

	fs := vfs.NewMem()
	f := openLog(t, fs, Options{SegmentBytes: 1 << 20})
	// A checkpoint first, so that recovery has a file that says where gaps
	// may be (without one it allows them anywhere, and the test would
	// prove nothing).
	if err := f.CheckpointRecoveryPoint(); err != nil {
		t.Fatal(err)
	}
	refused := false
	for _, b := range batches {
		if recordbatch.BaseOffset(b) != f.EndOffset() && !refused {
			if err := f.AppendReplica(b); !errors.Is(err, ErrOffsetMismatch) {
				t.Fatalf("a gap without AllowGaps: %v", err)
			}
			refused = true
			if err := f.AllowGaps(leader.EndOffset()); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.AppendReplica(b); err != nil {
			t.Fatalf("append at %d: %v", recordbatch.BaseOffset(b), err)
		}
	}
	if _, err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	crashed := fs.Crash()
	f = openLog(t, crashed, Options{SegmentBytes: 1 << 20})
	defer f.Close()
	if rep := f.Recovery(); rep.Damaged || rep.DroppedBytes > 0 {
		t.Fatalf("recovery cut the copy: %+v", rep)
	}
	got := readAll2(t, f)
	if len(got) != len(batches) {
		t.Fatalf("copy holds %d batches, leader %d", len(got), len(batches))
	}
	for i := range got {
		if !bytes.Equal(got[i], batches[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if f.EndOffset() != leader.EndOffset() {
		t.Fatalf("copy ends at %d, leader at %d", f.EndOffset(), leader.EndOffset())
	}
	// Above the allowed bound a gap is refused again.
	b := keyed(t, plain, 20, "u", "v")
	recordbatch.SetBaseOffset(b, leader.EndOffset()+5)
	if err := f.AppendReplica(b); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("a gap above the allowed bound: %v", err)
	}
}
