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
// files are published under Log.mu; the appender (holding Log.amu) writes the
// files beyond size without Log.mu, and readers never look past size.
type segment struct {
	base int64
	log  vfs.File
	idx  vfs.File // nil once the segment is rolled: its index is final
	tidx vfs.File

	size   int64 // bytes of whole batches
	next   int64 // one past the last offset the segment holds
	maxTs  int64 // largest batch max timestamp, -1 when empty
	index  []indexEntry
	tindex []timeEntry

	sinceIdx int // bytes appended since the last index entry (appender only)
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

// writeIndexFiles replaces both index files with the in-memory indexes.
func (s *segment) writeIndexFiles(fs vfs.FS, dir string) error {
	if s.idx == nil {
		f, err := fs.Create(segName(dir, s.base, indexSuffix))
		if err != nil {
			return err
		}
		s.idx = f
	} else if err := s.idx.Truncate(0); err != nil {
		return err
	}
	if s.tidx == nil {
		f, err := fs.Create(segName(dir, s.base, timeIndexSuffix))
		if err != nil {
			return err
		}
		s.tidx = f
	} else if err := s.tidx.Truncate(0); err != nil {
		return err
	}
	buf := make([]byte, 0, len(s.index)*indexEntrySize)
	for _, e := range s.index {
		buf = append(buf, encodeIndex(e)...)
	}
	if _, err := s.idx.Write(buf); err != nil {
		return err
	}
	buf = make([]byte, 0, len(s.tindex)*timeEntrySize)
	for _, e := range s.tindex {
		buf = append(buf, encodeTime(e)...)
	}
	_, err := s.tidx.Write(buf)
	return err
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

var errSegmentCorrupt = errors.New("storage: segment corrupt")

// scanner reads batch headers through a small buffer so that walking many
// small batches costs few reads.
type scanner struct {
	f      vfs.File
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

func newScanner(f vfs.File, end int64, first int) *scanner {
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
		return recordbatch.Header{}, fmt.Errorf("%w: truncated header at %d", errSegmentCorrupt, pos)
	}
	if sc.bufPos < 0 || pos < sc.bufPos || pos+recordbatch.HeaderSize > sc.bufPos+int64(sc.n) {
		want := len(sc.buf)
		if sc.bufPos < 0 {
			want = sc.first
		}
		n := int(min(int64(want), sc.end-pos))
		got, err := sc.f.ReadAt(sc.buf[:n], pos)
		if got < n {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			sc.n = 0
			return recordbatch.Header{}, err
		}
		sc.bufPos, sc.n = pos, n
	}
	h, err := recordbatch.ParseHeader(sc.buf[pos-sc.bufPos : int64(sc.n)])
	if err != nil {
		return h, fmt.Errorf("%w: at %d: %w", errSegmentCorrupt, pos, err)
	}
	if pos+int64(h.Size()) > sc.end {
		return h, fmt.Errorf("%w: batch at %d runs past %d", errSegmentCorrupt, pos, sc.end)
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

// rebuild rescans the segment's log file from the start, recomputing
// indexes, next and maxTs. With verify, every batch's CRC is checked. It
// stops at the first batch that is torn, corrupt or out of sequence and
// returns the number of valid bytes.
func (s *segment) rebuild(verify bool, interval int) (int64, error) {
	fileSize, err := s.log.Size()
	if err != nil {
		return 0, err
	}
	s.index, s.tindex, s.sinceIdx, s.maxTs, s.next, s.size = nil, nil, 0, -1, s.base, 0
	sc := newScanner(s.log, min(fileSize, math.MaxUint32), scanBufSize)
	defer sc.release()
	var body []byte
	pos := int64(0)
	for pos < sc.end {
		h, err := sc.header(pos)
		if err != nil {
			if errors.Is(err, errSegmentCorrupt) {
				break
			}
			return 0, err
		}
		// Offsets only increase; compaction may leave gaps between
		// batches.
		if h.BaseOffset < s.next || h.LastOffsetDelta < 0 || h.LastOffset()+1-s.base > math.MaxUint32 {
			break
		}
		if verify {
			if cap(body) < h.Size() {
				body = make([]byte, h.Size())
			}
			body = body[:h.Size()]
			if n, err := s.log.ReadAt(body, pos); n < len(body) {
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				return 0, err
			}
			if _, err := recordbatch.Check(body); err != nil {
				break
			}
		}
		ie, te := s.plan(pos, h, interval)
		s.apply(pos, h, ie, te)
		pos += int64(h.Size())
	}
	return pos, nil
}

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
	var errs []error
	for _, f := range []vfs.File{s.log, s.idx, s.tidx} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	s.log, s.idx, s.tidx = nil, nil, nil
	return errors.Join(errs...)
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
