package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"sync"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	indexEntrySize  = 8
	timeEntrySize   = 12
)

// indexEntry maps the base offset of a batch (relative to the segment base)
// to the batch's file position.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry says that every batch of the segment before the batch at rel
// has a max timestamp of at most ts. A segment that has been rolled ends
// with an entry whose rel is its whole offset span, so ts is then the
// segment's max timestamp and the entry doubles as a completeness marker.
type timeEntry struct {
	ts  int64
	rel uint32
}

// segment is one log file and its two sparse indexes. Fields other than the
// file are published under Log.mu; the appender (holding Log.amu) writes the
// file beyond size without Log.mu, and readers never look past size. Bytes
// below size may still wait in the tail, so everything reads the file
// through the segment (ReadAt), which writes them first.
//
// The indexes live in memory. Only a rolled segment has index files: they
// are written once, when it rolls (or is rewritten or its indexes rebuilt),
// so an active segment holds a single descriptor. Nothing reads the index
// files of the active segment (recovery rebuilds its indexes by scanning
// it), so stale ones, left by a truncation or by an older version that kept
// them up to date, are harmless, and a roll replaces them.
type segment struct {
	base int64
	log  vfs.File

	size   int64 // bytes of whole batches
	next   int64 // one past the last offset the segment holds
	maxTs  int64 // largest batch max timestamp, -1 when empty
	index  []indexEntry
	tindex []timeEntry

	// alloc is the file's length when space was reserved beyond size
	// (Log.reserve), 0 otherwise; noReserve stops reserving for a file
	// that cannot. Appender only.
	alloc     int64
	noReserve bool

	sinceIdx int // bytes appended since the last index entry (appender only)
	// tail holds small appends not yet written to the file (tail.go);
	// everything that reads or changes the file writes it first.
	tail tail
	// uncached: the page cache of the log file below this position has
	// been dropped (Log.DropCache; guarded by Log.smu).
	uncached int64
}

func segName(dir string, base int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, suffix))
}

// plan returns the index entries to add before appending the batch with
// header h at pos. It does not mutate s.
func (s *segment) plan(pos int64, h recordbatch.Header, interval int) (ie *indexEntry, te *timeEntry) {
	if pos == 0 || s.sinceIdx < interval {
		return nil, nil
	}
	rel := uint32(h.BaseOffset - s.base)
	ie = &indexEntry{rel: rel, pos: uint32(pos)}
	if n := len(s.tindex); s.maxTs >= 0 && (n == 0 || s.tindex[n-1].ts < s.maxTs) {
		te = &timeEntry{ts: s.maxTs, rel: rel}
	}
	return ie, te
}

// apply records an appended batch; the caller holds Log.mu (or owns s).
func (s *segment) apply(pos int64, h recordbatch.Header, ie *indexEntry, te *timeEntry) {
	if ie != nil {
		s.index = append(s.index, *ie)
		s.sinceIdx = 0
	}
	if te != nil {
		s.tindex = append(s.tindex, *te)
	}
	s.sinceIdx += h.Size()
	s.size = pos + int64(h.Size())
	s.next = h.LastOffset() + 1
	s.maxTs = max(s.maxTs, h.MaxTimestamp)
}

func encodeIndex(e indexEntry) []byte {
	var b [indexEntrySize]byte
	binary.BigEndian.PutUint32(b[0:], e.rel)
	binary.BigEndian.PutUint32(b[4:], e.pos)
	return b[:]
}

func encodeTime(e timeEntry) []byte {
	var b [timeEntrySize]byte
	binary.BigEndian.PutUint64(b[0:], uint64(e.ts))
	binary.BigEndian.PutUint32(b[8:], e.rel)
	return b[:]
}

// writeIndexFiles replaces the index files of the segment at base (their
// names ending in suffix after the usual one) with index and tindex, and
// fsyncs and closes them. Their directory entries are not synced.
func writeIndexFiles(fs vfs.FS, dir string, base int64, suffix string, index []indexEntry, tindex []timeEntry) error {
	idx := make([]byte, 0, len(index)*indexEntrySize)
	for _, e := range index {
		idx = append(idx, encodeIndex(e)...)
	}
	tidx := make([]byte, 0, len(tindex)*timeEntrySize)
	for _, e := range tindex {
		tidx = append(tidx, encodeTime(e)...)
	}
	for _, f := range []struct {
		suffix string
		data   []byte
	}{{indexSuffix, idx}, {timeIndexSuffix, tidx}} {
		h, err := fs.Create(segName(dir, base, f.suffix+suffix))
		if err != nil {
			return err
		}
		_, err = h.Write(f.data)
		if err == nil {
			err = h.Sync()
		}
		if cerr := h.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removeIndexFiles removes the index files of a segment that has become
// the active one again. Best effort: nothing reads an active segment's
// index files, and the next roll replaces them.
func removeIndexFiles(fs vfs.FS, dir string, base int64) {
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		_ = fs.Remove(segName(dir, base, suf))
	}
}

// loadIndexes parses a rolled segment's index files and reports whether
// they are consistent with the segment (size and next must be set).
func (s *segment) loadIndexes(idx, tidx []byte) bool {
	if len(idx)%indexEntrySize != 0 || len(tidx)%timeEntrySize != 0 || len(tidx) == 0 {
		return false
	}
	span := s.next - s.base
	index := make([]indexEntry, 0, len(idx)/indexEntrySize)
	for i := 0; i < len(idx); i += indexEntrySize {
		e := indexEntry{binary.BigEndian.Uint32(idx[i:]), binary.BigEndian.Uint32(idx[i+4:])}
		if int64(e.rel) >= span || int64(e.pos) >= s.size {
			return false
		}
		if n := len(index); n > 0 && (e.rel <= index[n-1].rel || e.pos <= index[n-1].pos) {
			return false
		}
		index = append(index, e)
	}
	tindex := make([]timeEntry, 0, len(tidx)/timeEntrySize)
	for i := 0; i < len(tidx); i += timeEntrySize {
		e := timeEntry{int64(binary.BigEndian.Uint64(tidx[i:])), binary.BigEndian.Uint32(tidx[i+8:])}
		if int64(e.rel) > span {
			return false
		}
		if n := len(tindex); n > 0 && (e.rel < tindex[n-1].rel || e.ts < tindex[n-1].ts) {
			return false
		}
		tindex = append(tindex, e)
	}
	last := tindex[len(tindex)-1]
	if int64(last.rel) != span {
		return false
	}
	s.index, s.tindex, s.maxTs = index, tindex, last.ts
	return true
}

// lostTail reports whether the rolled segment's time index (its file
// content tidx) says the segment held a batch with a larger timestamp than
// any batch its log file holds now (maxTs): its last batches are gone, cut
// at a batch boundary, which no scan sees since compaction leaves gaps at
// the end of segments too. The time index ends with an entry whose rel is
// the segment's span and whose timestamp is the segment's max timestamp
// (finishEntry), written and fsynced whenever the segment is sealed or
// rewritten; without that entry nothing is known.
func (s *segment) lostTail(tidx []byte, maxTs int64) (int64, bool) {
	n := len(tidx)
	if n == 0 || n%timeEntrySize != 0 {
		return 0, false
	}
	e := tidx[n-timeEntrySize:]
	ts, rel := int64(binary.BigEndian.Uint64(e)), binary.BigEndian.Uint32(e[8:])
	if int64(rel) != s.next-s.base {
		return 0, false
	}
	return ts, ts > maxTs
}

// lookup returns the position of the last indexed batch whose base offset
// is <= offset, from which a header scan finds the batch holding offset.
func (s *segment) lookup(offset int64) int64 {
	if offset <= s.base {
		return 0
	}
	rel := offset - s.base
	i := sort.Search(len(s.index), func(i int) bool { return int64(s.index[i].rel) > rel })
	if i == 0 {
		return 0
	}
	return int64(s.index[i-1].pos)
}

// timeLookup returns a position before which no batch has a max timestamp
// >= ts.
func (s *segment) timeLookup(ts int64) int64 {
	i := sort.Search(len(s.tindex), func(i int) bool { return s.tindex[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return s.lookup(s.base + int64(s.tindex[i-1].rel))
}

// scanner reads batch headers through a small buffer so that walking many
// small batches costs few reads.
type scanner struct {
	f      io.ReaderAt
	end    int64 // scan never reads at or past end
	buf    []byte
	bufPos int64
	n      int
	// first is the size of the first read: a lookup starts at an index
	// entry and usually ends within one index interval, so reading a whole
	// buffer would mostly be waste.
	first int
}

const scanBufSize = 16 << 10

var scanBufs = sync.Pool{New: func() any { b := make([]byte, scanBufSize); return &b }}

func newScanner(f io.ReaderAt, end int64, first int) *scanner {
	return &scanner{f: f, end: end, buf: *scanBufs.Get().(*[]byte), bufPos: -1, first: min(max(first, 2*recordbatch.HeaderSize), scanBufSize)}
}

// release returns the buffer to the pool; the scanner is unusable after.
func (sc *scanner) release() {
	b := sc.buf
	sc.buf = nil
	scanBufs.Put(&b)
}

// header returns the header of the batch at pos, which must lie wholly
// before end.
func (sc *scanner) header(pos int64) (recordbatch.Header, error) {
	if pos < 0 || pos+recordbatch.HeaderSize > sc.end {
		return recordbatch.Header{}, fmt.Errorf("%w: truncated header at %d", ErrCorrupt, pos)
	}
	if sc.bufPos < 0 || pos < sc.bufPos || pos+recordbatch.HeaderSize > sc.bufPos+int64(sc.n) {
		want := len(sc.buf)
		if sc.bufPos < 0 {
			want = sc.first
		}
		n := int(min(int64(want), sc.end-pos))
		got, err := sc.f.ReadAt(sc.buf[:n], pos)
		if got < n {
			sc.n = 0
			return recordbatch.Header{}, shortRead(err, pos+int64(got))
		}
		sc.bufPos, sc.n = pos, n
	}
	h, err := recordbatch.ParseHeader(sc.buf[pos-sc.bufPos : int64(sc.n)])
	if err != nil {
		return h, fmt.Errorf("%w: at %d: %w", ErrCorrupt, pos, err)
	}
	if pos+int64(h.Size()) > sc.end {
		return h, fmt.Errorf("%w: batch at %d runs past %d", ErrCorrupt, pos, sc.end)
	}
	return h, nil
}

// find scans from pos for the first batch whose last offset is >= offset,
// returning its position; ok is false when there is none before end.
func (sc *scanner) find(pos, offset int64) (int64, recordbatch.Header, bool, error) {
	for pos < sc.end {
		h, err := sc.header(pos)
		if err != nil {
			return 0, h, false, err
		}
		if h.LastOffset() >= offset {
			return pos, h, true, nil
		}
		pos += int64(h.Size())
	}
	return 0, recordbatch.Header{}, false, nil
}

// shortRead is the error for a read that returned fewer bytes than the
// segment's recorded size promised: the file was cut (ErrCorrupt), unless
// the read failed for another reason, which is returned as it is.
func shortRead(err error, at int64) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: file ends at byte %d", ErrCorrupt, at)
	}
	return err
}

// scanRules say what a scan of a segment checks. It always checks framing
// (a whole header with magic 2 and a sane length that fits in the file),
// that offsets only increase and that a batch's offsets fit the segment.
type scanRules struct {
	// verify checks every batch's CRC and, when epochs is not empty, the
	// epoch rule (epochMatches).
	verify bool
	epochs []EpochEntry
	// prevEpoch is the epoch of the last batch before the segment, or
	// math.MinInt32 when unknown.
	prevEpoch int32
	// A batch whose base offset is >= gapsBelow must start exactly where
	// the previous batch ended (the first one at the segment base); below
	// it, gaps (which compaction leaves) are allowed. 0: no gaps anywhere;
	// math.MaxInt64: gaps anywhere.
	gapsBelow int64
	// limit: no batch may hold an offset at or past it (for a rolled
	// segment, its successor's base). math.MaxInt64 for none.
	limit int64
}

// anyGaps are the rules of a scan that only rebuilds indexes of data
// already checked or trusted.
var anyGaps = scanRules{prevEpoch: math.MinInt32, gapsBelow: math.MaxInt64, limit: math.MaxInt64}

// scanResult is what a scan found.
type scanResult struct {
	valid     int64 // bytes of whole good batches from the start of the file
	next      int64 // one past the last offset of the last good batch; the segment base when none
	lastEpoch int32 // epoch of the last good batch; the rules' prevEpoch when none
	maxTs     int64 // largest max timestamp of the good batches; -1 when none
	// gapEnd is one past the base offset of the last good batch that does
	// not start where its predecessor ended (or, for the first, at the
	// segment base); 0 when there is no such batch.
	gapEnd int64
	// bad says why the scan stopped before the end of the file; empty
	// when every byte belongs to a good batch.
	bad string
}

// scan walks the first size bytes of the segment's log file batch by batch
// and stops at the first batch that breaks the rules, calling visit (if not
// nil) with every good batch. Only I/O errors are returned as errors.
func (s *segment) scan(size int64, r scanRules, visit func(pos int64, h recordbatch.Header)) (scanResult, error) {
	res := scanResult{next: s.base, lastEpoch: r.prevEpoch, maxTs: -1}
	// Index positions are uint32, and segments never grow past that.
	sc := newScanner(s, min(size, math.MaxUint32), scanBufSize)
	defer sc.release()
	var body []byte
	pos := int64(0)
	for pos < sc.end {
		h, err := sc.header(pos)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				res.bad = err.Error()
				break
			}
			return res, err
		}
		if why := s.checkOffsets(sc, pos, h, res.next, r); why != "" {
			res.bad = why
			break
		}
		if r.verify {
			if cap(body) < h.Size() {
				body = make([]byte, h.Size())
			}
			body = body[:h.Size()]
			if n, err := s.ReadAt(body, pos); n < len(body) {
				if err = shortRead(err, pos+int64(n)); errors.Is(err, ErrCorrupt) {
					res.bad = err.Error()
					break
				}
				return res, err
			}
			if _, err := recordbatch.Check(body); err != nil {
				res.bad = fmt.Sprintf("batch at byte %d: %v", pos, err)
				break
			}
			if len(r.epochs) > 0 && !epochMatches(r.epochs, h.BaseOffset, h.PartitionLeaderEpoch, res.lastEpoch) {
				res.bad = fmt.Sprintf("batch at byte %d (offset %d) has leader epoch %d, which the epoch history does not allow there", pos, h.BaseOffset, h.PartitionLeaderEpoch)
				break
			}
		}
		if h.BaseOffset != res.next {
			res.gapEnd = h.BaseOffset + 1
		}
		if visit != nil {
			visit(pos, h)
		}
		res.next = h.LastOffset() + 1
		res.lastEpoch = h.PartitionLeaderEpoch
		res.maxTs = max(res.maxTs, h.MaxTimestamp)
		pos += int64(h.Size())
		res.valid = pos
	}
	if res.bad == "" && res.valid < size {
		res.bad = fmt.Sprintf("data past byte %d, the largest segment size", sc.end)
	}
	return res, nil
}

// checkOffsets returns why the offsets of batch h at pos are wrong, or ""
// when they are fine; next is where the previous batch ended.
func (s *segment) checkOffsets(sc *scanner, pos int64, h recordbatch.Header, next int64, r scanRules) string {
	switch {
	case h.LastOffsetDelta < 0:
		return fmt.Sprintf("batch at byte %d has lastOffsetDelta %d", pos, h.LastOffsetDelta)
	case h.BaseOffset < next:
		return fmt.Sprintf("batch at byte %d has base offset %d, below %d where the previous batch ended", pos, h.BaseOffset, next)
	case h.LastOffset()+1-s.base > math.MaxUint32:
		return fmt.Sprintf("batch at byte %d has offsets up to %d, beyond the segment's range", pos, h.LastOffset())
	case h.LastOffset() >= r.limit:
		return fmt.Sprintf("batch at byte %d has offsets up to %d, at or past the next segment's base %d", pos, h.LastOffset(), r.limit)
	case h.BaseOffset == next:
		return ""
	case h.BaseOffset >= r.gapsBelow:
		return fmt.Sprintf("batch at byte %d has base offset %d where %d was due", pos, h.BaseOffset, next)
	}
	// A gap is allowed here, but a raised bit in this batch's base offset
	// (which no CRC covers) looks like one too; then the next batch starts
	// inside this one's range yet after the previous batch, and it is this
	// batch that is wrong, not the next.
	if nh, err := sc.header(pos + int64(h.Size())); err == nil && nh.BaseOffset <= h.LastOffset() && nh.BaseOffset >= next {
		return fmt.Sprintf("batch at byte %d has base offset %d, out of line with %d before it and %d after it", pos, h.BaseOffset, next, nh.BaseOffset)
	}
	return ""
}

// epochMatches is the epoch rule of verified scans: may a batch with base
// offset base carry epoch, after a batch with epoch prev?
//
// The history gets an entry {E, B} durably before the batch at B with
// epoch E is written (appendLocked), and batches of one epoch follow it
// until the next entry; the history then only loses its tail to a
// truncation (which removed the batches first), is emptied by
// TruncateFullyAndStartAt (which removed them all first), or has its
// first entries dropped and the first remaining one moved up to the log
// start (trimEpochsFromStart); compaction keeps batches' epochs. So a
// batch covered by an entry (StartOffset <= base) carries the epoch of the
// last such entry. A batch below the first entry predates the history
// (epoch -1), lies below the log start under a moved first entry, or
// predates a history that was lost and begun anew: its epoch cannot exceed
// the first entry's. Epochs never decrease along the log (appendLocked
// refuses it), all negative epochs counting as one.
func epochMatches(epochs []EpochEntry, base int64, epoch, prev int32) bool {
	if max(epoch, -1) < max(prev, -1) {
		return false
	}
	i := sort.Search(len(epochs), func(i int) bool { return epochs[i].StartOffset > base }) - 1
	if i < 0 {
		return epoch <= epochs[0].Epoch
	}
	return epoch == epochs[i].Epoch
}

// rebuild rescans the segment's log file from the start under rules r,
// recomputing indexes, next and maxTs from the good batches, and stops at
// the first bad one; res.valid is the number of bytes kept.
func (s *segment) rebuild(r scanRules, interval int) (scanResult, error) {
	fileSize, err := s.log.Size()
	if err != nil {
		return scanResult{}, err
	}
	s.index, s.tindex, s.sinceIdx, s.maxTs, s.next, s.size = nil, nil, 0, -1, s.base, 0
	return s.scan(fileSize, r, func(pos int64, h recordbatch.Header) {
		ie, te := s.plan(pos, h, interval)
		s.apply(pos, h, ie, te)
	})
}

// endAt returns where the batches before pos end: one past the last offset
// of the batch that ends at pos (a batch boundary), or the segment base
// when pos is 0.
func (s *segment) endAt(pos int64, interval int) (int64, error) {
	if pos == 0 {
		return s.base, nil
	}
	// Start at the last indexed batch before pos, so the walk is short.
	i := sort.Search(len(s.index), func(i int) bool { return int64(s.index[i].pos) >= pos })
	from := int64(0)
	if i > 0 {
		from = int64(s.index[i-1].pos)
	}
	sc := newScanner(s, pos, interval+recordbatch.HeaderSize)
	defer sc.release()
	next := s.base
	for from < pos {
		h, err := sc.header(from)
		if err != nil {
			return 0, err
		}
		next = h.LastOffset() + 1
		from += int64(h.Size())
	}
	return next, nil
}

// validBatchFollows reports whether the bad batch at pos is followed by a
// good one: its length field is sane and a batch starting where that
// length says it ends parses and passes its CRC. A write cut short by a
// crash leaves nothing valid after the cut, so a good batch after a bad one
// means damage inside data that had been written whole.
func validBatchFollows(f vfs.File, pos, fileSize int64) bool {
	var lb [recordbatch.LengthOverhead]byte
	if n, _ := f.ReadAt(lb[:], pos); n < len(lb) {
		return false
	}
	size := int64(recordbatch.LengthOverhead) + int64(int32(binary.BigEndian.Uint32(lb[8:])))
	next := pos + size
	if size < recordbatch.HeaderSize || next+recordbatch.HeaderSize > fileSize {
		return false
	}
	hb := make([]byte, recordbatch.HeaderSize)
	if n, _ := f.ReadAt(hb, next); n < len(hb) {
		return false
	}
	h, err := recordbatch.ParseHeader(hb)
	if err != nil || next+int64(h.Size()) > fileSize {
		return false
	}
	body := make([]byte, h.Size())
	if n, _ := f.ReadAt(body, next); n < len(body) {
		return false
	}
	_, err = recordbatch.Check(body)
	return err == nil
}

// ReadAt reads the segment's log file, writing its tail first when the
// read covers any of it.
func (s *segment) ReadAt(p []byte, off int64) (int, error) {
	return tailReader{&s.tail, s.log}.ReadAt(p, off)
}

// flushTail writes the segment's tail to its file.
func (s *segment) flushTail() error { return s.tail.flush(s.log) }

// finish adds the completeness marker to a segment's time index: the entry
// whose rel is the whole span.
func (s *segment) finishEntry() timeEntry {
	ts := s.maxTs
	if n := len(s.tindex); n > 0 {
		ts = max(ts, s.tindex[n-1].ts)
	}
	return timeEntry{ts: ts, rel: uint32(s.next - s.base)}
}

func (s *segment) closeFiles() error {
	s.tail.discard()
	if s.log == nil {
		return nil
	}
	err := s.log.Close()
	s.log = nil
	return err
}

func removeSegmentFiles(fs vfs.FS, dir string, base int64) error {
	var errs []error
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := fs.Remove(segName(dir, base, suf)); err != nil && !errors.Is(err, errNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
